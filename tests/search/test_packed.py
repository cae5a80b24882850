"""Packed read-only string tables (imagesvc/search/packed.py), which hold the query lexicons and the English word list:
a table answers every lookup as the dict it was built from, for any string (hostile ones too), keys whose hashes
share their low 32 bits are told apart, and grouped rows keep their order."""

from __future__ import annotations

import random
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor

import pytest

from imagesvc.search.packed import grouped, int_table, key_set, keyed, pooled, text_tables

HOSTILE = [
    "",
    " ",
    "\x00",
    "a\x00b",
    "\ud800",  # a lone surrogate: legal in a str, not encodable
    "x\udfffy",
    "\U0010ffff",
    "\U0001f600",
    "e\u0301",
    "é",
    "ß",
    "İ",
    "\u202e\u200f",
    "a" * 10_000,
    "שׁוֹשַׁן",
    "زنبقة",
    "ﬁ",
]
LETTERS = "abcdefghijklmnopqrstuvwxyzàèìòùאבגדהוזחטיכלמנסעפצקרשתابتثجحخدذرزسشصضطظعغفقكلمنهوي"


def _words(count: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return list(dict.fromkeys("".join(rng.choices(LETTERS, k=rng.randint(1, 12))) for _ in range(count)))


def _near(words: list[str]) -> list[str]:
    """Strings like ``words`` that are none of them: each cut, extended, upper-cased."""
    out = [w[:-1] for w in words] + [w + "x" for w in words] + [w.upper() for w in words] + ["\x00" + w for w in words]
    known = set(words)
    return [w for w in out if w not in known]


def test_a_text_table_answers_as_the_dict_it_was_built_from() -> None:
    words = _words(20_000, 1) + HOSTILE
    table = {w: f"sense {i % 97}" for i, w in enumerate(words)}
    (packed,) = text_tables(table)
    assert len(packed) == len(table) and dict(packed.items()) == table and packed == table
    assert set(packed) == set(table)
    for word, sense in table.items():
        assert word in packed and packed[word] == sense and packed.get(word) == sense
    for other in _near(words):
        assert other not in packed and packed.get(other) is None and packed.get(other, "-") == "-"
        with pytest.raises(KeyError):
            packed[other]
    for thing in (1, None, b"a", ("a",)):
        assert thing not in packed  # type: ignore[operator]


def test_tables_packed_together_share_their_values_and_answer_each_as_its_own() -> None:
    first = {w: w[::-1] for w in _words(3_000, 2)}
    second = {w: first.get(w, "shared") for w in _words(3_000, 3)}
    packed = text_tables(first, second, {})
    assert [dict(t.items()) for t in packed] == [first, second, {}]


def test_keys_whose_hashes_share_their_low_32_bits_are_told_apart() -> None:
    """Python's ``hash()`` of a str is salted per process: find two strings that collide here (~80,000 tried)."""
    seen: dict[int, str] = {}
    for i in range(2_000_000):
        word = f"w{i}"
        low = hash(word) & 0xFFFF_FFFF
        if low in seen:
            pair = [seen[low], word]
            break
        seen[low] = word
    else:
        pytest.fail("no collision of 32 bits in two million strings")
    table = {w: i for i, w in enumerate([*pair, *_words(5_000, 4)])}
    packed = int_table(table)
    assert all(packed[w] == i for w, i in table.items())
    assert pair[0] + "x" not in packed and pair[1][:-1] not in packed


def test_an_int_table_keeps_every_number() -> None:
    table = {"none": 0, "one": 1, "most": 2**32 - 1}
    assert dict(int_table(table).items()) == table
    wide = {**table, "more": 2**40, "less": -5}  # past 32 bits: 8 bytes a number
    assert dict(int_table(wide).items()) == wide


def test_empty_tables_answer_nothing() -> None:
    for empty in (text_tables({})[0], int_table({}), key_set([])):
        assert len(empty) == 0 and list(empty) == [] and "" not in empty and "a" not in empty


def test_a_key_set_and_a_pool_hold_what_they_were_given() -> None:
    words = _words(5_000, 5) + HOSTILE
    keys = key_set(set(words))
    assert len(keys) == len(set(words)) and set(keys) == set(words)
    assert all(w in keys for w in words) and not any(w in keys for w in _near(words))
    repeated = [random.Random(6).choice(words[:50]) for _ in range(1_000)]
    assert list(pooled(repeated)) == repeated


def test_keyed_values_follow_their_keys() -> None:
    table = {w: [i, len(w)] for i, w in enumerate(_words(2_000, 7))}
    keys, values = keyed(table)
    assert {key: value for key, value in zip(keys, values, strict=True)} == table


def test_grouped_rows_keep_their_order_within_each_key() -> None:
    """As a dict of lists built row by row would hold them (a Latin stem's entries, in the dictionary's order)."""
    rng = random.Random(8)
    stems = _words(3_000, 9)
    rows = [(rng.choice(stems), i, rng.randint(1, 4)) for i in range(20_000)]
    expected: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for stem, number, part in rows:
        expected[stem].append((number, part))
    keys, starts, (numbers, parts) = grouped([r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows])
    found = {
        key: list(zip(numbers[starts[i] : starts[i + 1]], parts[starts[i] : starts[i + 1]], strict=True))
        for i, key in enumerate(keys)
    }
    assert found == expected


def test_a_table_read_from_many_threads_answers_as_from_one() -> None:
    words = _words(20_000, 10)
    table = {w: w.upper() for w in words}
    (packed,) = text_tables(table)
    probes = words + _near(words[:5_000])

    def read(chunk: list[str]) -> list[str | None]:
        return [packed.get(w) for w in chunk]

    chunks = [probes[i::8] for i in range(8)] * 4
    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(read, chunks))
    assert answers == [[table.get(w) for w in chunk] for chunk in chunks]
