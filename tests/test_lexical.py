"""The batch BM25 encoder (`lexical.doc_vectors`, what writes use) gives exactly the sparse vectors of a
straightforward per-text reference: the same term ids in the same order and the same float64 weights; and the
point ids the Qdrant stores write are uuid5's."""

from __future__ import annotations

import random
import re
import zlib
from collections import Counter

from connectors import lexical

TEXTS = [
    "",
    "the and of",  # stop words only
    "Error E-417 in v2.1 of the parser; see RFC-9110/section-3 and it's fixed in build 4.2.0-rc1.",
    "snake_case CamelCase x..y a--b -lead trail- 'quoted' don't O'Brien 3.14 1,000 http://example.com/a/b",
    "Straße STRASSE naïve café résumé e\u0301 İstanbul ΣΊΣΥΦΟΣ ὈΔΥΣΣΕΎΣ σοφόςΣ",
    "東京タワー 東京 の 夜景 ٣٤٥ ١٢ १२३ 𝟙𝟚 ① ½ Ⅻ emoji🙂mid 🙂",
    "tabs\tand\nnewlines\r\nNBSP\u00a0here em\u2003space ideo\u3000space zero\u200bwidth sep\x1cfile\x1frec",
    "repeat repeat repeat Repeat REPEAT repeat-er re.peat",
    "word " * 400,  # long: length normalisation
    "curly ’apostrophe’ and ‘quotes’ and hy‐phen (U+2010) and en–dash",
    "ID-7/ID-7/ID-7 v1.2.3.4.5 a.b.c-d/e'f",
]


def reference(text: str) -> lexical.SparseVector:
    """BM25 term weights as the docstring of `connectors.lexical` defines them, written out for one text."""
    stop = lexical.STOPWORDS
    found: list[str] = []
    for word in re.findall(r"\w+(?:[-./']\w+)*", text.lower()):
        if word not in stop:
            found.append(word)
        if re.search(r"[-./']", word):
            found += [p for p in re.split(r"[-./']", word) if p and p not in stop]
    counts = Counter(zlib.crc32(t.encode()) & 0x7FFFFFFF for t in found)
    norm = lexical.K1 * (1 - lexical.B + lexical.B * sum(counts.values()) / lexical.AVG_LEN)
    items = sorted(counts.items())
    return {"indices": [i for i, _ in items], "values": [n * (lexical.K1 + 1) / (n + norm) for _, n in items]}


def fuzz_texts(n: int, seed: int) -> list[str]:
    """Random texts over letters, digits, the compound separators, punctuation, unicode and every kind of space."""
    rng = random.Random(seed)
    pool = list("abcxyzABCXYZ0123456789-./'_,;:!?()\"") + list("ßİıΣσςéèñüøÅ東京タ٣१①½🙂\u0301\u200b’‐")
    spaces = [" ", " ", " ", "\t", "\n", "\u00a0", "\u2003", "\u3000", "\x1c"]
    words = [w.strip(".,;") for w in " ".join(TEXTS).split() if w.strip(".,;")]
    out = []
    for _ in range(n):
        parts = []
        for _ in range(rng.randint(0, 60)):
            if rng.random() < 0.4:
                parts.append(rng.choice(words))  # pieces that repeat across texts (the encoder's table)
            else:
                parts.append("".join(rng.choice(pool) for _ in range(rng.randint(1, 9))))
            parts.append(rng.choice(spaces))
        out.append("".join(parts))
    return out


def test_doc_vectors_equal_the_per_text_reference_exactly() -> None:
    texts = TEXTS + fuzz_texts(300, seed=1)
    got = lexical.doc_vectors(texts)
    assert got.indices.dtype.name == "int32" and got.values.dtype.name == "float64"
    assert len(got.offsets) == len(texts) + 1
    for i, text in enumerate(texts):
        want = reference(text)
        assert got[i] == want, f"text {i}: {text!r}"
        assert lexical.doc_vector(text) == want, f"text {i}: {text!r}"


def test_doc_vectors_give_the_same_vectors_whatever_the_batch() -> None:
    texts = fuzz_texts(120, seed=2) + TEXTS
    whole = lexical.doc_vectors(texts)
    alone = [lexical.doc_vectors([t])[0] for t in reversed(texts)]  # the piece table warm, in another order
    assert [whole[i] for i in range(len(texts))] == alone[::-1]
    empty = lexical.doc_vectors([])
    assert len(empty.offsets) == 1 and len(empty.indices) == 0


def test_compound_identifiers_are_kept_whole_and_split() -> None:
    ids = set(lexical.doc_vectors(["E-417 v2.1"])[0]["indices"])
    assert ids == {lexical.term_id(t) for t in ("e-417", "e", "417", "v2.1", "v2", "1")}


def test_point_ids_are_the_uuid5_of_the_chunk_id_or_the_uuid_it_holds() -> None:
    import uuid

    from connectors.base import ID_NAMESPACE, point_id

    u = uuid.UUID("12345678-1234-5678-1234-567812345678")
    ids = [
        "",
        "chunk-0000001",
        "a" * 31,
        "a" * 32,
        "é東🙂" * 11,
        str(u),
        str(u).upper(),
        u.hex,
        f"{{{u}}}",
        f"urn:uuid:{u}",
    ]
    for chunk_id in ids:
        try:
            want = str(uuid.UUID(chunk_id))
        except ValueError:
            want = str(uuid.uuid5(ID_NAMESPACE, chunk_id))
        assert point_id(chunk_id) == want, chunk_id
