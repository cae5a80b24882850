"""The caller-class table matches the service spec §8, and identity is always an upgrade."""

from __future__ import annotations

import itertools

import pytest

from imagesvc.access.policy import CLASSES, caller_class, key_class

SPEC = {  # class: (pages per day, images per day, requests, per seconds), from spec §8
    "anonymous": (500, 500, 60, 3600),
    "signed_in": (1_000, 1_000, 1_000, 3600),
    "key:free": (2_000, 2_000, 60, 60),
    "key:language": (None, None, 120, 60),
    "key:domain": (None, None, 300, 60),
    "key:full": (None, None, 600, 60),
    "key:enterprise": (None, None, 1_000, 60),
}


@pytest.mark.parametrize(("name", "numbers"), SPEC.items())
def test_allowances_match_the_spec(name: str, numbers: tuple[int | None, int | None, int, int]) -> None:
    c = caller_class(name)
    assert (c.budget("text"), c.budget("images"), c.request_limit(), c.request_window) == numbers


def test_only_full_tiers_get_clean_images_and_exempt_callers_are_never_limited() -> None:
    assert {name for name, c in CLASSES.items() if c.clean_allowed} == {"key:full", "key:enterprise"}
    for name in ("crawler", "assistant"):
        c = caller_class(name)
        assert (c.budget("text"), c.budget("images"), c.request_limit()) == (None, None, None)


def test_identity_is_always_an_upgrade() -> None:
    ordered = [c for c in sorted(CLASSES.values(), key=lambda c: c.rank) if not c.exempt]
    for lower, higher in itertools.pairwise(ordered):
        for pool in ("text", "images"):
            low, high = lower.budget(pool), higher.budget(pool)
            assert high is None or (low is not None and high >= low), (lower.name, higher.name, pool)


def test_unknown_names_list_the_valid_ones() -> None:
    assert key_class("free").name == "key:free"
    with pytest.raises(KeyError, match="key:language"):
        caller_class("gold")
    with pytest.raises(ValueError, match="text, images"):
        caller_class("anonymous").budget("audio")
