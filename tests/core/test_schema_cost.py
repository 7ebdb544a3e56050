"""Each schema keyword is charged by its real work (issue 26, finding 5).

``multipleOf`` did exact rational arithmetic on each value for one step: 120,000 x
``1e308`` under ``multipleOf: 5e-324`` took seconds without reaching
``Limits.max_validation_steps``.  Now a number is ``m x 10**e`` and the check is integer
arithmetic charged by bit lengths; a value compared (``enum``, ``const``,
``uniqueItems``) is charged by its characters, bits and member names.  These properties
generate schemas of costly keywords and costly instances (parsed from JSON, as a server's
are) and check that under a budget of K steps a check never takes more CPU than
``RATIO`` x K steps of an ordinary check measured in the same test (plus a floor; the
same load and tracer for both), whether it ends conforming, mismatching or with
``validation_budget``.  CPU time (``time.process_time``), never the wall clock.
"""

from __future__ import annotations

import gc
import json
import time
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sansmcp.core.errors import ServerAnswered
from sansmcp.core.jsonvalue import parse_json
from sansmcp.core.limits import Limits
from sansmcp.core.schema.output import check_output, compile_output

PER_STEP = 10e-6  # seconds of CPU a charged step may stand for (~0.2-1 us measured)
RATIO = 10  # CPU a costly step may take against a step of an ordinary check, measured here
FLOOR = 0.003  # seconds of CPU: below it, a ratio measures noise
PATTERN_CHUNK = 4_096  # steps a pattern search may run before it charges them


def server_value(value: Any) -> Any:
    """``value`` as a server's result holds it: fresh objects from its JSON (no cached
    string hash), and numbers as the decoder builds them."""
    return parse_json(json.dumps(value).encode(), max_depth=64, max_values=1 << 20)


def outcome(schema: dict[str, Any], instance: Any, steps: int) -> tuple[float, str]:
    """The CPU time of checking ``instance`` against ``schema`` under ``steps`` steps, and
    how it ended: ``ok``, ``mismatch`` or ``budget`` (the exact error checked)."""
    limits = Limits(max_validation_steps=steps)
    compiled = compile_output("t", json.dumps(schema).encode(), Limits(), from_config=False)
    result = {"structuredContent": server_value(instance)}
    gc.disable()
    start = time.process_time()
    try:
        check_output("t", compiled, result, limits)
        ended = "ok"
    except ServerAnswered as exc:
        ended = {"output_schema_mismatch": "mismatch", "validation_budget": "budget"}[exc.reason]
        if ended == "budget":
            assert exc.bound == "max_validation_steps"
            assert exc.limit == steps
            assert "(Limits.max_validation_steps)" in str(exc)
    finally:
        spent = time.process_time() - start
        gc.enable()
    return spent, ended


def ordinary_step() -> float:
    """The CPU time of one step of an ordinary check (an array of small ints against
    ``type`` and ``minimum``), measured now, under the same load and tracer as the test."""
    steps = 20_000
    spent, ended = outcome(
        {"type": "array", "items": {"type": "integer", "minimum": 0}}, [1] * steps, steps
    )
    assert ended == "budget"
    return spent / steps


costly_numbers = st.one_of(
    st.sampled_from([1e308, 1.7976931348623157e308, 5e-324, -0.0, 0.1, 3, 2.5e-310]),
    st.integers(1, 4299).map(lambda n: int("9" * n)),
    st.integers(3000, 4299).map(lambda n: -int("7" * n)),
    st.integers(1, 4299).map(lambda n: 3 * 10**n),
    st.floats(allow_nan=False, allow_infinity=False),
)
divisors = st.one_of(
    st.sampled_from([5e-324, 2.4703282292062328e-324, 1e-300, 0.1, 1.5e300, 1e308, 3, 7]),
    st.integers(1, 4000).map(lambda n: 10**n + 3),
    st.floats(min_value=5e-324, allow_infinity=False),
)
long_texts = st.builds(lambda n, c: c * n, st.integers(50_000, 200_000), st.sampled_from("ab1"))


def repeated(number: int | float, count: int) -> list[int | float]:
    """``count`` copies of ``number``, fewer of a long one (at most ~1 MB of JSON)."""
    return [number] * max(1, min(count, (1 << 20) // len(json.dumps(number))))


def texts_of(base: str, count: int) -> list[str]:
    return [f"{base}{index}" for index in range(count)]


costly_cases = st.one_of(
    st.builds(
        lambda d, n, k: ({"type": "array", "items": {"multipleOf": d}}, repeated(n, k)),
        divisors,
        costly_numbers,
        st.integers(5_000, 20_000),
    ),
    st.builds(
        lambda t, k: ({"type": "array", "uniqueItems": True}, texts_of(t, k)),
        long_texts,
        st.integers(30, 100),
    ),
    st.builds(
        lambda t, k: ({"type": "array", "items": {"enum": [t + "x", 1, t]}}, [t] * k),
        long_texts,
        st.integers(30, 100),
    ),
    st.builds(
        lambda n, k: ({"type": "array", "items": {"const": n}}, repeated(n, k)),
        costly_numbers,
        st.integers(5_000, 20_000),
    ),
    st.builds(
        lambda t, k: (
            {"type": "array", "uniqueItems": True},
            [{name: 0 for name in texts_of(t, 50)} for _ in range(k)],
        ),
        long_texts.map(lambda text: text[:20_000]),
        st.integers(1, 20),
    ),
    st.builds(
        lambda p, t, k: ({"type": "array", "items": {"pattern": p}}, texts_of(t, k)),
        st.sampled_from(["^(a|b)*c$", "a.*b.*1", "(ab|a)+$", "[a-z]{3,}1"]),
        long_texts.map(lambda text: text[:20_000]),
        st.integers(1, 20),
    ),
    st.builds(
        lambda t, k: (
            {"type": "object", "propertyNames": {"maxLength": 5, "pattern": "^a+$"}},
            {name: 0 for name in texts_of(t, k)},
        ),
        long_texts.map(lambda text: text[:20_000]),
        st.integers(1, 50),
    ),
)


@settings(max_examples=60, deadline=None)
@given(case=costly_cases, steps=st.sampled_from([200, 1_000, 5_000, 30_000]))
def test_a_check_takes_at_most_a_fixed_cpu_time_per_step_of_its_budget(
    case: tuple[dict[str, Any], Any], steps: int
) -> None:
    schema, instance = case
    spent, ended = outcome(schema, instance, steps)
    # a pattern search charges its steps in chunks of up to 4,096 (regex.Program.search)
    slack = PATTERN_CHUNK if "pattern" in json.dumps(schema) else 0
    allowed = FLOOR + RATIO * ordinary_step() * (steps + slack)
    assert spent <= allowed, (spent, ended, steps, json.dumps(schema)[:80])


def test_multipleof_of_120000_times_1e308_by_5e324_ends_with_the_step_budget() -> None:
    """The finding's example: ~5 s and no bound before; now 5 + 2 steps a value, so the
    default budget (500,000) is spent at about the 71,000th, in bounded CPU."""
    limits = Limits()
    schema = {"type": "array", "items": {"multipleOf": 5e-324}}
    spent, ended = outcome(schema, [1e308] * 120_000, limits.max_validation_steps)
    assert ended == "budget"
    assert spent <= FLOOR + PER_STEP * limits.max_validation_steps


@pytest.mark.parametrize(
    ("divisor", "value", "held"),
    [
        (5e-324, 1e308, True),  # 2 x 10**631
        (0.1, 0.3, True),
        (0.1, 0.35, False),
        (1e-300, 10**4000 + 1, True),
        (3, 1.7976931348623157e308, False),  # 17976931348623157 x 10**292: digit sum 88
        (7, 7e300, True),
        (10**50, 1e300, True),
        (10**50 + 1, 1e300, False),
        (1.5e300, 10**400 * 3, True),
        (1.5e300, 10**299 * 3, False),
        (2.5, 5e-310, False),
        (0.5, -0.0, True),
        (10**30, 3e5, False),
        (1e-5, 12345, True),
        (3e-5, 1e-5, False),
        (2e-5, 4e-5, True),
    ],
)
def test_multipleof_is_exact_by_the_shortest_decimal_form(
    divisor: float, value: float, held: bool
) -> None:
    schema = {"multipleOf": divisor}
    _, ended = outcome(schema, value, Limits().max_validation_steps)
    assert ended == ("ok" if held else "mismatch")


@pytest.mark.parametrize(
    ("schema", "instance"),
    [
        ({"items": {"multipleOf": 10**2000 + 3}}, [(10**2000 + 3) * 10**2290] * 50),
        ({"uniqueItems": True}, texts_of("a" * 100_000, 40)),
        ({"items": {"enum": ["b" * 100_000]}}, ["b" * 100_000] * 40),
        ({"items": {"pattern": "^(a|b)*c$"}}, ["ab" * 50_000] * 40),
    ],
)
def test_costly_keywords_are_driven_past_the_step_budget(schema: Any, instance: Any) -> None:
    spent, ended = outcome({"type": "array", **schema}, instance, 10_000)
    assert ended == "budget"  # (the exact error is checked by outcome)
    assert spent <= FLOOR + PER_STEP * 10_000


def test_multipleof_refuses_a_divisor_that_is_not_a_finite_positive_number() -> None:
    for divisor in (0, -1, float("inf")):
        with pytest.raises(ServerAnswered) as caught:
            compile_output("t", {"multipleOf": divisor}, Limits(), from_config=False)
        assert caught.value.reason == "unusable_output_schema"
        assert "multipleOf is not a finite number > 0" in str(caught.value)
