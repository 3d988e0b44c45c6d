"""The connection pool's choice of whom to close past the cap (engine/http/connections.py): the longest idle,
never a connection whose first bytes may not have been read yet, then the probe reserve, then refusal."""

from __future__ import annotations

from engine.http.connections import Pool


class Conn:
    """A connection as the pool sees it: whether it may be taken for idle yet, and whether it was closed."""

    def __init__(self, pool: Pool, evictable: bool) -> None:
        self.pool, self.ready, self.dropped = pool, evictable, False

    def evictable(self) -> bool:
        return self.ready

    def drop(self) -> None:
        self.dropped = True
        self.pool.forget(self)


def admitted(pool: Pool, conn: Conn) -> str:
    verdict = pool.admit(conn)
    if verdict != "refuse":
        pool.set_idle(conn, True)  # as connection_made does
    return verdict


def test_a_new_connection_is_not_evicted_before_its_bytes_are_read() -> None:
    pool = Pool(cap=3, reserve=1)
    fresh = Conn(pool, evictable=False)  # a probe accepted a moment ago, its request not read yet
    assert admitted(pool, fresh) == "ok"
    idle = [Conn(pool, evictable=True) for _ in range(2)]
    assert [admitted(pool, c) for c in idle] == ["ok", "ok"]
    newcomer = Conn(pool, evictable=False)
    assert admitted(pool, newcomer) == "ok"
    assert not fresh.dropped and idle[0].dropped  # the longest idle that has been read, not the oldest
    assert admitted(pool, Conn(pool, evictable=False)) == "ok" and idle[1].dropped
    assert admitted(pool, Conn(pool, evictable=False)) == "health"  # none idle for sure: the probe reserve
    assert admitted(pool, Conn(pool, evictable=False)) == "refuse"
    assert not fresh.dropped and not newcomer.dropped
    fresh.ready = True  # it stayed silent past FRESH_S (or was read and answered): idle like any other
    assert admitted(pool, Conn(pool, evictable=False)) == "ok" and fresh.dropped
