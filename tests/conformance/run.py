"""Run the official MCP conformance suite's client scenarios against sansmcp.

Usage: ``python tests/conformance/run.py [--only SCENARIO] [--timeout SECONDS] [--keep DIR]``
(``make conformance`` installs the suite into ``.conformance/`` and runs this).

Each (scenario, revision) below is one run of ``conformance client`` with
``tests/conformance/client.py`` as the client: the 13 non-auth runs (``NON_AUTH_RUNS``), then
the 50 ``auth/*`` runs of 0.2.0-alpha.12 (``AUTH_RUNS``: 39 required -- 14 at
2025-11-25, 25 at 2026-07-28 --, 5 unscored, 6 extensions, which run without
``--spec-version``); the closing lines count each group.  A run PASSES only when all of these
hold, because the suite's own verdict has traps:

* the suite exited 0 and wrote its ``checks.json``;
* at least one check is ``SUCCESS`` (a client that sends nothing can get a vacuous
  "PASSED" with 0 checks);
* no check is ``FAILURE`` or ``WARNING`` (the suite fails warnings too).

Runs listed in ``expected-failures.txt`` (a known gap in the core, with the reason)
print as XFAIL and do not fail the whole; a listed run that passes prints XPASS and
does fail it, so the list cannot go stale.  ``--strict`` ignores the list.

The client is started with ``exec`` so that, on a timeout, the suite's kill reaches
the Python process and not only the shell wrapper around it; each run also has an
outer timeout here.  One line is printed per run, then a ``N passed, N failed``
closing line; the exit status is 1 if any run failed.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
CLIENT = Path(__file__).resolve().with_name("client.py")
EXPECTED_FAILURES = Path(__file__).resolve().with_name("expected-failures.txt")

LEGACY = "2025-11-25"
MODERN = "2026-07-28"

#: (scenario, revision) of the non-auth runs, in the order they run.
NON_AUTH_RUNS: tuple[tuple[str, str], ...] = (
    ("initialize", LEGACY),
    ("tools_call", LEGACY),
    ("sse-retry", LEGACY),
    ("elicitation-sep1034-client-defaults", LEGACY),
    ("json-schema-2020-12-preservation", LEGACY),
    ("tools_call", MODERN),
    ("request-metadata", MODERN),
    ("http-standard-headers", MODERN),
    ("http-custom-headers", MODERN),
    ("http-invalid-tool-headers", MODERN),
    ("json-schema-ref-no-deref", MODERN),
    ("json-schema-2020-12-preservation", MODERN),
    ("sep-2322-client-request-state", MODERN),
)

V0618 = "2025-06-18"
V0326 = "2025-03-26"
EXTENSION = "extension"
_BOTH = (LEGACY, MODERN)

#: (scenario, revision, kind) of every auth run: "required" (14 at 2025-11-25, 25 at
#: 2026-07-28), "unscored" (5) or "extension" (6), as conformance 0.2.0-alpha.12 lists them.
AUTH_RUNS: tuple[tuple[str, str, str], ...] = (
    *(
        (f"auth/{name}", revision, "required")
        for name in (
            "metadata-default",
            "metadata-var1",
            "metadata-var2",
            "metadata-var3",
            "basic-cimd",
            "scope-from-www-authenticate",
            "scope-from-scopes-supported",
            "scope-omitted-when-undefined",
            "scope-step-up",
            "scope-retry-limit",
            "pre-registration",
            "token-endpoint-auth-basic",
            "token-endpoint-auth-post",
            "token-endpoint-auth-none",
        )
        for revision in _BOTH
    ),
    *(
        (f"auth/{name}", MODERN, "required")
        for name in (
            "resource-mismatch",
            "offline-access-scope",
            "offline-access-not-supported",
            "authorization-server-migration",
            "iss-supported",
            "iss-not-advertised",
            "iss-supported-missing",
            "iss-wrong-issuer",
            "iss-unexpected",
            "iss-normalized",
            "metadata-issuer-mismatch",
        )
    ),
    ("auth/token-endpoint-auth-basic", V0618, "unscored"),
    ("auth/token-endpoint-auth-post", V0618, "unscored"),
    ("auth/token-endpoint-auth-none", V0618, "unscored"),
    ("auth/2025-03-26-oauth-metadata-backcompat", V0326, "unscored"),
    ("auth/2025-03-26-oauth-endpoint-fallback", V0326, "unscored"),
    *(
        (f"auth/{name}", EXTENSION, "extension")
        for name in (
            "client-credentials-jwt",
            "client-credentials-basic",
            "enterprise-managed-authorization",
            "dpop",
            "dpop-nonce",
            "wif-jwt-bearer",
        )
    ),
)
#: every (scenario, revision), in the order they run.
RUNS: tuple[tuple[str, str], ...] = NON_AUTH_RUNS + tuple((s, r) for s, r, _ in AUTH_RUNS)
KIND = {(s, r): kind for s, r, kind in AUTH_RUNS}


@dataclass
class Outcome:
    scenario: str
    revision: str
    passed: bool = False
    succeeded: int = 0
    problems: list[str] = field(default_factory=list)  # "check-id (STATUS): message"
    notes: list[str] = field(default_factory=list)  # why the run itself failed
    client_stderr: str = ""
    suite_output: str = ""

    def line(self, expected: str | None = None) -> str:
        verdict = "PASS" if self.passed else "FAIL"
        if expected is not None:
            verdict = "XPASS" if self.passed else "XFAIL"
        head = f"{self.scenario:<38} {self.revision}  {verdict}  {self.succeeded} checks ok"
        failing = [p.split(":", 1)[0] for p in self.problems] + self.notes
        line = head + (f"; failing: {', '.join(failing)}" if failing else "")
        if expected is not None:
            line += f" [expected to fail: {expected}]"
            if self.passed:
                line += " -- now passes: remove it from expected-failures.txt"
        return line


def expected_failures(path: Path = EXPECTED_FAILURES) -> dict[tuple[str, str], str]:
    """(scenario, revision) -> why it is expected to fail."""
    known: dict[tuple[str, str], str] = {}
    for raw in path.read_text().splitlines():
        text = raw.strip()
        if not text or text.startswith("#"):
            continue
        scenario, revision, *why = text.split(None, 2)
        known[scenario, revision] = why[0] if why else "(no reason given)"
    return known


def node_bin_dir() -> Path:
    return Path(os.environ.get("CONFORMANCE_DIR", REPO / ".conformance")) / "node_modules" / ".bin"


def run_one(scenario: str, revision: str, timeout: float, keep: Path | None) -> Outcome:
    outcome = Outcome(scenario, revision)
    bin_dir = node_bin_dir()
    suite = bin_dir / "conformance"
    if not suite.exists():
        outcome.notes.append(f"suite not installed at {suite} (run `make conformance`)")
        return outcome
    # The suite splits --command on spaces and runs it through a shell.
    command = f"exec {sys.executable} -X dev -W error {CLIENT}"
    if any(" " in str(part) for part in (sys.executable, CLIENT)):
        outcome.notes.append("a path contains a space; the suite cannot run the client")
        return outcome
    env = dict(os.environ)
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"  # node >= 22 first
    with tempfile.TemporaryDirectory(prefix="conformance-") as tmp:
        out_dir = keep / f"{scenario.replace('/', '_')}-{revision}" if keep else Path(tmp)
        out_dir.mkdir(parents=True, exist_ok=True)
        argv = [
            str(suite),
            "client",
            "--command",
            command,
            "--scenario",
            scenario,
            *(() if revision == EXTENSION else ("--spec-version", revision)),
            "--timeout",
            str(int(timeout * 1000)),
            "-o",
            str(out_dir),
        ]
        try:
            proc = subprocess.run(
                argv,
                env=env,
                cwd=REPO,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=timeout + 30,
            )
        except subprocess.TimeoutExpired:
            outcome.notes.append(f"suite did not finish within {timeout + 30:.0f}s")
            return outcome
        outcome.suite_output = proc.stdout + proc.stderr
        results = sorted(out_dir.glob("**/checks.json"))
        if not results:
            outcome.notes.append("no checks.json written")
            return outcome
        checks = json.loads(results[-1].read_text())
        stderr_file = results[-1].with_name("stderr.txt")
        if stderr_file.exists():
            outcome.client_stderr = stderr_file.read_text()
    judge(outcome, proc.returncode, checks)
    return outcome


def judge(outcome: Outcome, returncode: int, checks: list[dict[str, Any]]) -> None:
    """Fill in ``outcome``'s verdict from the suite's exit status, checks and output."""
    for check in checks:
        status = check.get("status")
        if status == "SUCCESS":
            outcome.succeeded += 1
        elif status in ("FAILURE", "WARNING"):
            message = check.get("errorMessage") or check.get("description") or ""
            outcome.problems.append(f"{check.get('id')} ({status}): {message}")
    if returncode != 0 and not outcome.problems:
        outcome.notes.append(f"suite exit status {returncode}")
    if "CLIENT TIMED OUT" in outcome.suite_output:
        outcome.notes.append("client timed out")
    elif "Client exited with code" in outcome.suite_output:
        # the suite tolerates this in some scenarios; our client must always finish
        outcome.notes.append("client exited with an error")
    if outcome.succeeded == 0:
        outcome.notes.append("no successful check (vacuous run)")
    outcome.passed = returncode == 0 and not outcome.problems and not outcome.notes


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", action="append", help="run only this scenario (repeatable)")
    parser.add_argument("--timeout", type=float, default=20.0, help="seconds per run")
    parser.add_argument("--keep", type=Path, help="keep the suite's results under this folder")
    parser.add_argument("--verbose", action="store_true", help="print the suite's output")
    parser.add_argument("--strict", action="store_true", help="ignore expected-failures.txt")
    args = parser.parse_args()
    runs = [run for run in RUNS if not args.only or run[0] in args.only]
    if not runs:
        print(f"no scenario matches {args.only}", file=sys.stderr)
        return 2
    known = {} if args.strict else expected_failures()
    passed = failed = xfailed = 0
    tally: dict[str, list[int]] = {}  # group -> [passed, runs]
    for scenario, revision in runs:
        outcome = run_one(scenario, revision, args.timeout, args.keep)
        expected = known.get((scenario, revision))
        print(outcome.line(expected), flush=True)
        kind = KIND.get((scenario, revision), "non-auth")
        group = f"auth {kind} {revision}" if kind == "required" else f"{kind}"
        counts = tally.setdefault(group, [0, 0])
        counts[0] += outcome.passed
        counts[1] += 1
        if outcome.passed and expected is None:
            passed += 1
        elif not outcome.passed and expected is not None:
            xfailed += 1
        else:
            failed += 1
        if not outcome.passed or args.verbose:
            for problem in outcome.problems:
                print(f"    {problem}")
            tail = outcome.client_stderr.strip().splitlines()[-15:]
            for text in tail:
                print(f"    client| {text}")
            if args.verbose or not (outcome.problems or tail):
                for text in outcome.suite_output.strip().splitlines()[-40:]:
                    print(f"    suite| {text}")
    for group, (ok, total) in tally.items():
        print(f"conformance: {group}: {ok}/{total} pass")
    if xfailed:
        print(f"conformance: {xfailed} expected failures (tests/conformance/expected-failures.txt)")
    print(f"conformance: {passed} passed, {failed} failed")
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
