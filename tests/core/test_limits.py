"""``Limits`` checks itself at construction: each field's kind and minimum (issue 10, G.4).

The expected rule of each field is written here from the issue, independently of
``limits._RULES``: times are finite and > 0 except the two waits (>= 0); the
allowances (retries, idle sockets, optional extras) are ints >= 0; every other count
is an int >= 1.  A float field takes an int or a float, never a bool; an int field
takes only an int.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sansmcp.core import limits as limits_module
from sansmcp.core.errors import CallerError
from sansmcp.core.limits import Limits

FIELDS = [field.name for field in dataclasses.fields(Limits)]
WAITS = {"stream_end_wait", "cancel_grace", "store_load_wait"}
ALLOWANCES = {
    "pool_max_idle_per_origin",
    "max_stream_retries",
    "max_server_requests",
    "max_informational",
    "max_recorded_skips",  # an optional record: 0 keeps only the count
    "max_cache_entries",  # the listing cache: 0 turns it off
    "max_cache_bytes",
    "max_compiled_schemas",  # the compiled output schemas: 0 keeps none
    "max_compiled_schema_bytes",
    "max_notifications",  # 0 delivers none (they are counted as dropped)
}


# Counts the HTTP/2 machine also sends as SETTINGS values (red team, issue 10): <= 2**32 - 1.
H2_SETTINGS = {"max_header_bytes", "h2_max_concurrent_streams"}
# Depths the schema validator recurses on (issue 15): <= 128, under the recursion limit.
DEPTHS = {"max_validation_depth"}


def is_float_field(name: str) -> bool:
    return isinstance(getattr(Limits(), name), float)


def acceptable(name: str, value: Any) -> bool:
    """The issue's rule for ``name``, written out on its own."""
    if isinstance(value, bool):
        return False
    if is_float_field(name):
        if not isinstance(value, int | float):
            return False
        if isinstance(value, int) and abs(value) > 2**1023:
            return False  # no float holds it: no deadline can be computed from it
        if not math.isfinite(value):
            return False
        return value >= 0 if name in WAITS else value > 0
    if not isinstance(value, int):
        return False
    if name in H2_SETTINGS and value > 2**32 - 1:
        return False  # sent as a 32-bit HTTP/2 SETTINGS value
    if name in DEPTHS and value > 128:
        return False
    return value >= 0 if name in ALLOWANCES else value >= 1


def build(name: str, value: Any) -> bool:
    """True when ``Limits(name=value)`` is accepted; a refusal must name the field."""
    try:
        made = Limits(**{name: value})
    except CallerError as exc:
        assert f"Limits.{name} must be " in str(exc)
        return False
    assert getattr(made, name) is value
    return True


def test_every_field_has_a_rule() -> None:
    """A field added to ``Limits`` needs its entry in ``limits._RULES``."""
    missing = sorted(set(FIELDS) - set(limits_module._RULES))
    stale = sorted(set(limits_module._RULES) - set(FIELDS))
    assert (missing, stale) == ([], [])


def test_every_default_is_valid() -> None:
    defaults = Limits()
    for name in FIELDS:
        assert acceptable(name, getattr(defaults, name)), name


def test_the_issue_example_is_refused() -> None:
    with pytest.raises(CallerError, match=r"^Limits\.call_timeout must be a finite number > 0; "):
        Limits(call_timeout=math.nan, max_tool_pages=-1)
    with pytest.raises(CallerError) as caught:
        Limits(max_tool_pages=-1)
    assert str(caught.value) == "Limits.max_tool_pages must be an int >= 1; got -1"


# Values at and around each kind's edge, and values of the wrong kind.
EDGE_VALUES: list[Any] = [
    0,
    0.0,
    -0.0,
    1,
    1.0,
    -1,
    -1.0,
    5e-324,
    -5e-324,
    0.5,
    10**100,
    10**400,
    -(10**400),
    math.nan,
    math.inf,
    -math.inf,
    True,
    False,
    None,
    "1",
    b"1",
    [1],
    1j,
]


@pytest.mark.parametrize("name", FIELDS)
def test_table_every_field_at_its_edges(name: str) -> None:
    verdicts = {repr(value): build(name, value) for value in EDGE_VALUES}
    expected = {repr(value): acceptable(name, value) for value in EDGE_VALUES}
    assert verdicts == expected
    # The minimum itself, and the edge on each side of it, as the issue states them.
    if is_float_field(name):
        assert build(name, 0) is (name in WAITS)
        assert build(name, 5e-324)
        assert not build(name, math.nan)
    else:
        floor = 0 if name in ALLOWANCES else 1
        assert build(name, floor) and not build(name, floor - 1)
        assert not build(name, float(floor + 1))


@pytest.mark.parametrize(
    ("value", "got"),
    [
        (True, "got a bool"),
        ("3", "got a str"),
        (None, "got a NoneType"),
        (math.inf, "got inf"),
        (10**400, "got an int too large for a float"),
    ],
)
def test_message_names_field_rule_and_value(value: Any, got: str) -> None:
    with pytest.raises(CallerError) as caught:
        Limits(dial_timeout=value)
    assert str(caught.value) == f"Limits.dial_timeout must be a finite number > 0; {got}"
    with pytest.raises(CallerError) as caught:
        Limits(max_informational=2.0)
    assert str(caught.value) == "Limits.max_informational must be an int >= 0; got the float 2.0"


values = st.one_of(
    st.integers(),
    st.integers(min_value=-3, max_value=3),
    st.floats(),
    st.floats(min_value=-1.0, max_value=1.0),
    st.booleans(),
    st.none(),
    st.text(max_size=3),
    st.binary(max_size=3),
    st.lists(st.integers(), max_size=2),
    st.complex_numbers(max_magnitude=2),
)


@given(st.sampled_from(FIELDS), values)
def test_any_value_is_judged_by_the_rule(name: str, value: Any) -> None:
    assert build(name, value) is acceptable(name, value)


@given(st.dictionaries(st.sampled_from(FIELDS), values, max_size=6))
def test_several_fields_refuse_iff_one_is_bad(changes: dict[str, Any]) -> None:
    bad = [name for name, value in changes.items() if not acceptable(name, value)]
    try:
        Limits(**changes)
    except CallerError as exc:
        assert bad, "refused though every value is acceptable"
        named = str(exc).split(" must be ", 1)[0]
        assert named.removeprefix("Limits.") in bad
    else:
        assert not bad


def test_replace_checks_too() -> None:
    with pytest.raises(CallerError, match=r"^Limits\.pool_max_sockets must be an int >= 1; got 0$"):
        dataclasses.replace(Limits(), pool_max_sockets=0)


@pytest.mark.parametrize(("name", "value"), [("call_timeout", 0.0), ("max_tool_pages", 0)])
def test_a_field_without_an_entry_gets_the_strict_rule_of_its_type(
    monkeypatch: pytest.MonkeyPatch, name: str, value: float
) -> None:
    monkeypatch.delitem(limits_module._RULES, name)
    assert build(name, 1)
    assert not build(name, value)
    assert not build(name, True)
