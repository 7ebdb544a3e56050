"""Output-schema validation cost: sansmcp's own validator against ``jsonschema`` (issue 15).

Run: ``python -m bench.schema``.  Prints, as CPU time (``time.process_time``):

* the import cost of each validator (``-X importtime``, cumulative, in a fresh process);
* compiling a typical ``outputSchema`` and checking one typical result, per call;
* the hostile schemas of ``tests/hostile`` (a catastrophic ``pattern`` on 64 KiB, a
  schema nested past the depth, a wide ``anyOf``): the CPU until the budget ends each.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

from sansmcp.core.limits import Limits
from sansmcp.core.schema.budget import BudgetExhausted, DepthExceeded
from sansmcp.core.schema.validator import compile_schema

LIMITS = Limits()
STEPS, DEPTH = LIMITS.max_validation_steps, LIMITS.max_validation_depth

# The official Python SDK's echo tool (a wrapped str result) and a pydantic model with $defs.
ECHO = {
    "properties": {"result": {"title": "Result", "type": "string"}},
    "required": ["result"],
    "title": "echoOutput",
    "type": "object",
}
REPORT = {
    "$defs": {
        "Item": {
            "properties": {
                "id": {"type": "integer", "minimum": 0},
                "name": {"type": "string", "maxLength": 200},
                "tags": {"items": {"type": "string"}, "type": "array", "uniqueItems": True},
                "price": {"anyOf": [{"type": "number"}, {"type": "null"}]},
            },
            "required": ["id", "name"],
            "type": "object",
            "additionalProperties": False,
        }
    },
    "properties": {
        "title": {"type": "string", "pattern": "^[A-Za-z0-9 _-]+$"},
        "items": {"items": {"$ref": "#/$defs/Item"}, "type": "array"},
        "total": {"type": "integer"},
    },
    "required": ["title", "items", "total"],
    "type": "object",
}
REPORT_VALUE = {
    "title": "quarterly report",
    "items": [
        {"id": i, "name": f"item {i}", "tags": ["a", "b"], "price": 1.5 if i % 2 else None}
        for i in range(10)
    ],
    "total": 10,
}


def cpu_per_call(fn: Callable[[], Any], rounds: int) -> float:
    fn()
    start = time.process_time()
    for _ in range(rounds):
        fn()
    return (time.process_time() - start) / rounds


def import_cost(module: str, after: str = "") -> float:
    """CPU seconds of ``import module`` in a fresh interpreter, once ``after`` (already
    imported: its share is not counted) is loaded."""
    first = f"import {after}; " if after else ""
    probe = f"import time; {first}t = time.process_time(); import {module}; "
    probe += "print(time.process_time() - t)"
    # byte-compiled once into a private cache (this machine may set PYTHONDONTWRITEBYTECODE,
    # and then every import would compile from source and the figure measure the compiler)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = os.path.join(tempfile.gettempdir(), "sansmcp-bench-pyc")
    for _ in range(2):  # the first run writes the cache
        done = subprocess.run(
            [sys.executable, "-c", probe], capture_output=True, text=True, check=True, env=env
        )
    return float(done.stdout)


def ours(schema: Any, value: Any, rounds: int) -> tuple[float, float]:
    compiled = compile_schema(schema, max_steps=STEPS, max_depth=DEPTH)
    assert compiled.validate(value, max_steps=STEPS, max_depth=DEPTH) is None
    compile_s = cpu_per_call(
        lambda: compile_schema(schema, max_steps=STEPS, max_depth=DEPTH), rounds
    )
    check_s = cpu_per_call(
        lambda: compiled.validate(value, max_steps=STEPS, max_depth=DEPTH), rounds
    )
    return compile_s, check_s


def theirs(schema: Any, value: Any, rounds: int) -> tuple[float, float]:
    import jsonschema

    validator = jsonschema.Draft202012Validator(schema)
    assert validator.is_valid(value)
    compile_s = cpu_per_call(lambda: jsonschema.Draft202012Validator(schema), rounds)
    check_s = cpu_per_call(lambda: validator.is_valid(value), rounds)
    return compile_s, check_s


def hostile() -> list[tuple[str, float, str]]:
    nested: Any = {"type": "string"}
    for _ in range(DEPTH + 36):
        nested = {"type": "object", "properties": {"n": nested}}
    cases = [
        (
            "pattern (a+)+$ on 64 KiB",
            {"type": "object", "properties": {"s": {"pattern": "(a+)+$"}}},
            {"s": "a" * 65_536 + "!"},
        ),
        (f"schema nested {DEPTH + 36} deep", nested, {}),
        (
            "anyOf of 200 contains, 20,000 items",
            {
                "properties": {
                    "v": {"anyOf": [{"contains": {"const": f"z{i}"}} for i in range(200)]}
                }
            },
            {"v": [0] * 20_000},
        ),
    ]
    out = []
    for name, schema, value in cases:
        start = time.process_time()
        try:
            compile_schema(schema, max_steps=STEPS, max_depth=DEPTH).validate(
                value, max_steps=STEPS, max_depth=DEPTH
            )
            ended = "conformed (!)"
        except (BudgetExhausted, DepthExceeded) as exc:
            ended = f"{type(exc).__name__}: {exc}"
        out.append((name, time.process_time() - start, ended))
    return out


def main() -> None:
    base = "sansmcp.io_adapters.asyncio"
    for module in ("sansmcp.core.schema.output", "jsonschema"):
        costs = sorted(import_cost(module, after=base) for _ in range(5))
        print(f"import {module} (after {base}): median {costs[2] * 1000:.1f} ms CPU of 5")
    costs = sorted(import_cost(base) for _ in range(5))
    print(f"import {base}: median {costs[2] * 1000:.1f} ms CPU of 5")
    for name, schema, value in (
        ("echo", ECHO, {"result": "hello"}),
        ("report", REPORT, REPORT_VALUE),
    ):
        (oc, ov), (tc, tv) = ours(schema, value, 2000), theirs(schema, value, 300)
        print(
            f"{name:7} compile: ours {oc * 1e6:7.1f} us, jsonschema {tc * 1e6:7.1f} us ({tc / oc:.1f}x) | "
            f"check: ours {ov * 1e6:7.1f} us, jsonschema {tv * 1e6:7.1f} us ({tv / ov:.1f}x)"
        )
    for name, cpu, ended in hostile():
        print(f"hostile {name}: {cpu * 1000:.1f} ms CPU, {ended}")


if __name__ == "__main__":
    main()
