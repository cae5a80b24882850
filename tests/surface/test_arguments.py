"""The argument checker every door shares: its fast path never passes what the JSON schema refuses, and its errors
name the parameter, the closest accepted name and the accepted ones."""

from __future__ import annotations

from typing import Any

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from imagesvc.errors import InvalidRequest
from imagesvc.surface.arguments import _plainly_valid, canonical, validate
from imagesvc.tools import load_all

SCHEMAS = {name: spec.input_schema for name, spec in load_all().items()}
VALUES = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**40), 2**40), st.floats(allow_nan=False), st.text(max_size=600),
    st.lists(st.integers(-3, 30), max_size=30), st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)  # fmt: skip


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_the_fast_path_never_passes_what_the_schema_refuses(name: str) -> None:
    schema = SCHEMAS[name]
    keys = st.sampled_from([*schema["properties"], "other"]) if schema["properties"] else st.just("other")
    validator = jsonschema.Draft202012Validator(schema)

    @given(st.dictionaries(keys, VALUES, max_size=5))
    @settings(max_examples=300, deadline=None)
    def check(arguments: dict[str, Any]) -> None:
        if _plainly_valid(schema, arguments):
            assert validator.is_valid(arguments), arguments

    check()


def test_errors_name_the_parameter_and_aliases_are_one_name() -> None:
    schema = SCHEMAS["search_images"]
    with pytest.raises(InvalidRequest) as unknown:
        validate("search_images", schema, {"maxperbook": 3})
    assert unknown.value.details["parameter"] == "maxperbook"
    assert unknown.value.details["did_you_mean"] == "maxPerBook"
    assert "query" in unknown.value.details["accepted"]
    with pytest.raises(InvalidRequest) as too_big:
        validate("search_images", schema, {"limit": 51})
    assert too_big.value.details["parameter"] == "limit" and "at most 50" in too_big.value.message
    assert canonical("search_images", schema, {"q": "x", "book": "b"}) == {"query": "x", "book_id": "b"}
    with pytest.raises(InvalidRequest):
        canonical("search_images", schema, {"q": "x", "query": "y"})


def _integers(schema: Any, path: str) -> list[tuple[str, dict[str, Any]]]:
    """Every integer-typed schema inside ``schema`` (properties, items, alternatives), with where it is."""
    found = []
    if isinstance(schema, dict):
        kinds = schema.get("type")
        if kinds == "integer" or (isinstance(kinds, list) and "integer" in kinds):
            found.append((path, schema))
        for key, value in schema.items():
            found += _integers(value, f"{path}.{key}")
    elif isinstance(schema, list):
        for i, value in enumerate(schema):
            found += _integers(value, f"{path}[{i}]")
    return found


def test_every_whole_number_a_tool_takes_is_bounded() -> None:
    """A caller's integer reaches SQLite, whose integers are 64-bit: an unbounded one (a year of 2**91) was a 500.
    So every integer a tool's input schema declares has both bounds, and the year bounds are one definition."""
    unbounded = [
        f"{name}{where}"
        for name, tool in load_all().items()
        for where, rule in _integers(tool.input_schema, "")
        if "minimum" not in rule
        or "maximum" not in rule
        or abs(rule["maximum"]) >= 2**63
        or abs(rule["minimum"]) >= 2**63
    ]
    assert not unbounded, unbounded
