"""The conformance runner's verdicts (the suite's traps) and the client's embedder.

The suite itself runs under ``make conformance``; these are the pure parts of the
two scripts, checked without Node.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from tests.conformance import client, run


def verdict(statuses: list[str], *, returncode: int = 0, output: str = "") -> run.Outcome:
    outcome = run.Outcome("tools_call", "2026-07-28", suite_output=output)
    checks: list[dict[str, Any]] = [
        {"id": f"check-{i}", "status": s, "errorMessage": f"m{i}"} for i, s in enumerate(statuses)
    ]
    run.judge(outcome, returncode, checks)
    return outcome


def test_success_with_skipped_and_info_checks_passes() -> None:
    outcome = verdict(["SUCCESS", "SKIPPED", "INFO", "SUCCESS"])
    assert outcome.passed
    assert outcome.succeeded == 2
    assert outcome.line().split()[2] == "PASS"


@pytest.mark.parametrize(
    ("statuses", "returncode", "output", "why"),
    [
        ([], 0, "", "no successful check (vacuous run)"),
        (["INFO", "SKIPPED"], 0, "", "no successful check (vacuous run)"),
        (["SUCCESS", "WARNING"], 0, "", "check-1 (WARNING): m1"),
        (["SUCCESS", "FAILURE"], 1, "", "check-1 (FAILURE): m1"),
        (["SUCCESS"], 1, "", "suite exit status 1"),
        (["SUCCESS"], 0, "\n⚠️  CLIENT TIMED OUT - Test incomplete", "client timed out"),
        (["SUCCESS"], 0, "\nClient exited with code 1\n", "client exited with an error"),
    ],
)
def test_traps_fail_the_run(statuses: list[str], returncode: int, output: str, why: str) -> None:
    outcome = verdict(statuses, returncode=returncode, output=output)
    assert not outcome.passed
    assert why in outcome.problems + outcome.notes
    assert outcome.line().split()[2] == "FAIL"


def test_expected_failure_lines() -> None:
    failing = verdict(["FAILURE"], returncode=1)
    assert failing.line("a known gap").split()[2] == "XFAIL"
    passing = verdict(["SUCCESS"])
    line = passing.line("a known gap")
    assert line.split()[2] == "XPASS" and "remove it from expected-failures.txt" in line


def test_expected_failures_file(tmp_path: Path) -> None:
    listed = tmp_path / "expected.txt"
    listed.write_text("# comment\n\nsse-retry 2025-11-25  why it fails\ninitialize 2025-11-25\n")
    assert run.expected_failures(listed) == {
        ("sse-retry", "2025-11-25"): "why it fails",
        ("initialize", "2025-11-25"): "(no reason given)",
    }
    # the shipped list names only runs that run.py makes
    assert set(run.expected_failures()) <= set(run.RUNS)


def test_every_run_has_a_scenario_in_the_client() -> None:
    assert {scenario for scenario, _ in run.RUNS} == set(client.SCENARIOS)


def test_elicitation_answered_with_the_schema_defaults() -> None:
    schema = {
        "type": "object",
        "properties": {
            "name": {"type": "string", "default": "John Doe"},
            "age": {"type": "integer", "default": 30},
            "verified": {"type": "boolean", "default": True},
            "confirmed": {"type": "boolean"},
        },
    }
    requests = {
        "a": {
            "method": "elicitation/create",
            "params": {"message": "?", "requestedSchema": schema},
        },
        "b": {"method": "elicitation/create", "params": {"message": "?"}},
    }
    answers = asyncio.run(client.answer_with_defaults(requests))
    assert answers == {
        "a": {"action": "accept", "content": {"name": "John Doe", "age": 30, "verified": True}},
        "b": {"action": "accept", "content": {}},
    }
    # a request this embedder has no surface for leaves the whole round unanswered
    sampling = {"s": {"method": "sampling/createMessage", "params": {}}}
    assert asyncio.run(client.answer_with_defaults({**requests, **sampling})) is None
