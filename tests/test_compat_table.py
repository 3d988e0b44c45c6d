"""docs/compatibility.md's table lists exactly the calls the compatibility suite covers, at its pinned versions."""

from __future__ import annotations

from tests.compat_table import DOC, covered, pinned, table_rows


def test_table_matches_the_suite() -> None:
    rows = table_rows(DOC.read_text())
    assert [(r[0], r[2]) for r in rows] == covered()
    assert all(r[1] == pinned(r[0]) and r[1] for r in rows)
    assert {r[3] for r in rows} <= {"pass", "not run"}
