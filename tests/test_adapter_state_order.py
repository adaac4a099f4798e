"""The one order of a rule's source states on every replica: ``in_order`` must give exactly what
``sorted(labelsets, key=sorted)`` gives (each set's sorted label pairs compared in turn), whatever
the names and values hold: prefixes of one another, empty values, characters past ASCII, and NULs,
whose joined form would not compare as the pairs do."""

from __future__ import annotations

import random

from adapter.sources.evidence import in_order

Labels = frozenset[tuple[str, str]]

ALPHABET = ["", "a", "ab", "a b", "b", "z", "A", "é", "日本", "\x01", "-", "10.0.0.1:9400", "10.0.0.10:9400"]


def _random_sets(rng: random.Random, count: int, with_nul: bool) -> list[Labels]:
    names = ["instance", "job", "namespace", "pod", "queue", "UUID", "a", "aa"]
    texts = ALPHABET + (["\x00", "a\x00", "a\x00b", "\x00z"] if with_nul else [])
    out = set()
    while len(out) < count:
        size = rng.randint(0, 4)
        pairs = {(rng.choice(names), rng.choice(texts) + rng.choice(texts)) for _ in range(size)}
        out.add(frozenset(pairs))
    return list(out)


def test_the_order_is_sorted_by_each_sets_sorted_pairs() -> None:
    rng = random.Random(7)
    for _ in range(50):
        sets = _random_sets(rng, 200, with_nul=False)
        assert in_order(set(sets)) == sorted(sets, key=sorted)


def test_labels_holding_a_nul_keep_the_same_order() -> None:
    # the pairs order ("k", "v") before ("k", "v\0a"); joined by NUL, "k\0v\0z\01" would come after
    # "k\0v\0a"
    shorter = frozenset({("k", "v"), ("z", "1")})
    nul = frozenset({("k", "v\x00a")})
    assert in_order({nul, shorter}) == [shorter, nul]
    rng = random.Random(11)
    for _ in range(50):
        sets = _random_sets(rng, 200, with_nul=True)
        assert in_order(set(sets)) == sorted(sets, key=sorted)


def test_no_sets_and_the_empty_set() -> None:
    assert in_order(set()) == []
    assert in_order({frozenset(), frozenset({("a", "")})}) == [frozenset(), frozenset({("a", "")})]
