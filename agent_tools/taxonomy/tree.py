"""Taxonomy trees: parse YAML or JSON (nested or flat), validate (cycles, duplicates, limits), hash, node texts.

Two shapes are accepted. Nested: the root is a mapping `{name, description?, examples?, children: [...]}`
(or a list of top-level nodes). Flat: `{name?, nodes: [{id, name, parent?, description?, examples?}]}`,
where a node without `parent` sits under the root; flat is what a database export usually looks like.
Every walk is iterative and linear in the number of nodes, so a deep or huge tree cannot blow the stack.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

from agent_tools.errors import TaxonomyError

NODE_KEYS = {"name", "id", "description", "examples", "children", "metadata"}
FLAT_KEYS = {"name", "id", "parent", "description", "examples", "metadata"}
SEPARATOR = " > "


@dataclass
class _Raw:
    """A node as parsed, before the tree is put in preorder."""

    name: str
    id: str | None
    description: str
    examples: list[str]
    parent: int  # index into the raw list; -1 for the root
    where: str


@dataclass(eq=False)
class Taxonomy:
    """A validated tree in preorder: node 0 is the root; node i's subtree is i .. i + size[i] - 1."""

    names: list[str]
    ids: list[str]
    labels: list[str]  # "Electronics > Phones > Cases"; "" for the root
    descriptions: list[str]
    examples: list[list[str]]
    parent: list[int]
    children: list[list[int]]
    depth: list[int]
    size: list[int]
    digest: str = ""
    by_id: dict[str, int] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.names)

    @property
    def leaves(self) -> list[int]:
        return [i for i, c in enumerate(self.children) if not c]

    def path(self, i: int) -> list[int]:
        """Node indices from the top level down to i (the root excluded)."""
        out = []
        while i > 0:
            out.append(i)
            i = self.parent[i]
        return out[::-1]

    def node_text(self, i: int) -> str:
        """What gets embedded for a node: its full path (the parents give a child its meaning), then its
        description and examples."""
        text = self.labels[i]
        if self.descriptions[i]:
            text += f": {self.descriptions[i]}"
        if self.examples[i]:
            text += f". For example: {'; '.join(self.examples[i])}"
        return text

    def find(self, key: str) -> int:
        """A node by id or label."""
        if key in self.by_id:
            return self.by_id[key]
        raise TaxonomyError(f"no node {key!r} in this taxonomy")


def load_taxonomy(path: str | Path, max_nodes: int = 200_000) -> Taxonomy:
    """Read a taxonomy file: JSON by its `.json` suffix, YAML otherwise."""
    p = Path(path).expanduser()
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise TaxonomyError(f"cannot read taxonomy {p}: {e}") from None
    return parse_taxonomy_text(text, "json" if p.suffix.lower() == ".json" else "yaml", max_nodes, source=str(p))


def parse_taxonomy_text(text: str, fmt: str = "yaml", max_nodes: int = 200_000, source: str = "") -> Taxonomy:
    """Parse YAML (JSON is YAML too, but the JSON parser is much faster) and build the tree."""
    where = f" {source}" if source else ""
    try:
        if fmt == "json":
            data = json.loads(text)
        else:
            import yaml

            data = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except Exception as e:  # noqa: BLE001 - any parser failure is the caller's malformed file
        raise TaxonomyError(f"taxonomy{where} is not valid {fmt.upper()}: {e}") from None
    return build_taxonomy(data, max_nodes)


def build_taxonomy(data: object, max_nodes: int = 200_000) -> Taxonomy:
    """Validate parsed data (nested or flat: whatever a YAML or JSON parser or a caller gave) and return the
    tree in preorder."""
    if isinstance(data, list):
        data = {"name": "root", "children": data}
    if not isinstance(data, dict):
        raise TaxonomyError(f"a taxonomy must be a mapping (or a list of top-level nodes), not {_kind(data)}")
    raw = _parse_flat(data, max_nodes) if "nodes" in data else _parse_nested(data, max_nodes)
    return _finish(raw)


def _kind(value: object) -> str:
    return "null" if value is None else type(value).__name__


def _text(obj: dict[str, object], key: str, where: str, required: bool = False) -> str:
    value = obj.get(key)
    if value is None and not required:
        return ""
    if isinstance(value, int) and not isinstance(value, bool) and key in ("id", "parent"):
        return str(value)
    if not isinstance(value, str) or (required and not value.strip()):
        need = "a non-empty string" if required else "a string"
        raise TaxonomyError(f"{where}: '{key}' must be {need}, not {_kind(value)}")
    return value.strip()


def _examples(obj: dict[str, object], where: str) -> list[str]:
    value = obj.get("examples") or []
    if not isinstance(value, list) or not all(isinstance(x, str) for x in value):
        raise TaxonomyError(f"{where}: 'examples' must be a list of strings")
    return [x.strip() for x in value if x.strip()]


def _mapping(obj: object, where: str) -> dict[str, object]:
    if not isinstance(obj, dict):
        raise TaxonomyError(f"{where}: a node must be a mapping with a 'name', not {_kind(obj)}")
    return obj


def _node(obj: dict[str, object], keys: set[str], parent: int, where: str) -> _Raw:
    unknown = set(obj) - keys
    if unknown:
        raise TaxonomyError(f"{where}: unknown field(s) {sorted(map(str, unknown))}; a node has {sorted(keys)}")
    name = _text(obj, "name", where, required=True)
    node_id = _text(obj, "id", where) or None
    return _Raw(name, node_id, _text(obj, "description", where), _examples(obj, where), parent, where)


def _parse_nested(root: dict[str, object], max_nodes: int) -> list[_Raw]:
    """Depth-first with explicit enter/exit steps, so a YAML alias that points at its own ancestor (a cycle)
    is seen without recursion, and an alias bomb stops at max_nodes."""
    root = {"name": "root", **root}
    raw: list[_Raw] = []
    on_path: set[int] = set()
    stack: list[tuple[bool, object, int, str]] = [(True, root, -1, "taxonomy")]
    while stack:
        enter, item, parent, where = stack.pop()
        if not enter:
            on_path.discard(id(item))
            continue
        if id(item) in on_path:
            raise TaxonomyError(f"{where}: the taxonomy is cyclic (this node contains itself, e.g. via a YAML alias)")
        obj = _mapping(item, where)
        node = _node(obj, NODE_KEYS, parent, where)
        raw.append(node)
        if len(raw) > max_nodes:
            raise TaxonomyError(f"the taxonomy has more than {max_nodes:,} nodes (SHOAL_TOOLS_MAX_TAXONOMY_NODES)")
        kids = obj.get("children") or []
        if not isinstance(kids, list):
            raise TaxonomyError(f"{where}: 'children' must be a list of nodes, not {_kind(kids)}")
        on_path.add(id(obj))
        stack.append((False, obj, parent, where))
        index = len(raw) - 1
        for k in range(len(kids) - 1, -1, -1):
            stack.append((True, kids[k], index, f"{where}.children[{k}]"))
    return raw


def _parse_flat(data: dict[str, object], max_nodes: int) -> list[_Raw]:
    """`nodes: [{id, name, parent?}]`; parents are resolved after all ids are known, then cycles are found."""
    nodes = data["nodes"]
    if not isinstance(nodes, list):
        raise TaxonomyError(f"taxonomy.nodes must be a list, not {_kind(nodes)}")
    if len(nodes) + 1 > max_nodes:
        raise TaxonomyError(f"the taxonomy has more than {max_nodes:,} nodes (SHOAL_TOOLS_MAX_TAXONOMY_NODES)")
    root_name = _text({"name": data.get("name") or "root"}, "name", "taxonomy", required=True)
    raw = [_Raw(root_name, None, _text(data, "description", "taxonomy"), [], -1, "taxonomy")]
    index: dict[str, int] = {}
    parents: list[str | None] = [None]
    for k, item in enumerate(nodes):
        where = f"taxonomy.nodes[{k}]"
        obj = _mapping(item, where)
        node = _node(obj, FLAT_KEYS, 0, where)
        if node.id is None:
            raise TaxonomyError(f"{where}: a node in a flat taxonomy needs an 'id'")
        if node.id in index:
            raise TaxonomyError(f"{where}: duplicate id {node.id!r} (also taxonomy.nodes[{index[node.id] - 1}])")
        index[node.id] = len(raw)
        raw.append(node)
        parents.append(_text(obj, "parent", where) or None if obj.get("parent") is not None else None)
    for i in range(1, len(raw)):
        ref = parents[i]
        if ref is None:
            continue
        if ref not in index:
            raise TaxonomyError(f"{raw[i].where}: parent {ref!r} is not the id of any node")
        raw[i].parent = index[ref]
    _reject_flat_cycles(raw)
    return raw


def _reject_flat_cycles(raw: list[_Raw]) -> None:
    """Follow parent links once per node (memoised): a walk that meets itself is a cycle."""
    state = [0] * len(raw)  # 0 unseen, 1 on the current walk, 2 reaches the root
    state[0] = 2
    for start in range(1, len(raw)):
        walk = []
        i = start
        while state[i] == 0:
            state[i] = 1
            walk.append(i)
            i = raw[i].parent
        if state[i] == 1:
            cycle = walk[walk.index(i) :]
            ids = " -> ".join(repr(raw[j].id) for j in [*cycle, i])
            raise TaxonomyError(f"the taxonomy is cyclic: parent links {ids}")
        for j in walk:
            state[j] = 2


def _finish(raw: list[_Raw]) -> Taxonomy:
    """Children lists, preorder, labels, ids, depths, sizes and the content digest."""
    kids: list[list[int]] = [[] for _ in raw]
    for i in range(1, len(raw)):
        kids[raw[i].parent].append(i)
    if not kids[0]:
        raise TaxonomyError("the taxonomy has no nodes under its root")
    order: list[int] = []
    stack = [0]
    while stack:
        i = stack.pop()
        order.append(i)
        stack.extend(reversed(kids[i]))
    new = {old: k for k, old in enumerate(order)}
    n = len(order)
    t = Taxonomy(
        names=[raw[i].name for i in order],
        ids=[""] * n,
        labels=[""] * n,
        descriptions=[raw[i].description for i in order],
        examples=[raw[i].examples for i in order],
        parent=[new[raw[i].parent] if raw[i].parent >= 0 else -1 for i in order],
        children=[[new[c] for c in kids[i]] for i in order],
        depth=[0] * n,
        size=[1] * n,
    )
    for k in range(1, n):
        p = t.parent[k]
        t.depth[k] = t.depth[p] + 1
        t.labels[k] = t.names[k] if p == 0 else t.labels[p] + SEPARATOR + t.names[k]
    for k in range(n - 1, 0, -1):
        t.size[t.parent[k]] += t.size[k]
    _check_siblings(t, raw, order)
    for k in range(n):
        t.ids[k] = raw[order[k]].id or t.labels[k]
        if t.ids[k] in t.by_id and k:
            raise TaxonomyError(f"{raw[order[k]].where}: duplicate id {t.ids[k]!r}")
        t.by_id[t.ids[k]] = k
        t.by_id.setdefault(t.labels[k], k)
    content = json.dumps([t.depth, t.names, t.descriptions, t.examples], separators=(",", ":"))
    t.digest = hashlib.sha256(content.encode()).hexdigest()
    return t


def _check_siblings(t: Taxonomy, raw: list[_Raw], order: list[int]) -> None:
    for i, kids in enumerate(t.children):
        seen: set[str] = set()
        for c in kids:
            key = t.names[c].casefold()
            if key in seen:
                where = raw[order[c]].where
                raise TaxonomyError(f"{where}: duplicate child name {t.names[c]!r} under {t.labels[i] or 'the root'!r}")
            seen.add(key)
