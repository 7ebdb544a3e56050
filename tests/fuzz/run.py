"""``make fuzz``: each target of :mod:`tests.fuzz.targets` under atheris (libFuzzer).

    python -m tests.fuzz.run [--seconds N] [TARGET ...]

Why atheris: it is libFuzzer driving Python with coverage feedback (it instruments the
bytecode of the modules imported under ``atheris.instrument_imports``, here
``sansmcp`` only), so inputs that reach new branches of the parsers are kept and
mutated further; hypothesis' ``fuzz_one_input`` replays inputs into a test but steers
by no coverage of its own.  atheris ships manylinux wheels for CPython 3.11 (no
compiler, no toolchain download); it is in the ``fuzz`` extra, not ``dev``, so
``make test`` does not need it: the saved inputs replay without it.

Each target runs in its own process for N seconds (``-max_total_time``).  The
working corpus grows in ``.fuzz/<target>/`` (ignored by git), seeded from
``tests/fuzz/corpus/<target>/``; an input that breaks the target's invariant is
written there as ``crash-<sha1>`` (libFuzzer's ``-artifact_prefix``), the run fails,
and ``tests/fuzz/test_corpus.py`` replays it in ``make test`` from then on: fix the
core, keep the file.  A summary line per target gives executions, coverage (``cov``:
instrumented edges reached) and features (``ft``).
"""

from __future__ import annotations

import argparse
import os
import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
CORPUS = ROOT / "tests" / "fuzz" / "corpus"
WORK = ROOT / ".fuzz"
NAMES = ("h1", "h2", "sse", "json", "regex")


def child(name: str, args: list[str]) -> None:
    import atheris

    with atheris.instrument_imports(include=["sansmcp"]):
        from tests.fuzz.targets import TARGETS
    target = TARGETS[name]
    atheris.Setup([sys.argv[0], *args], target)
    atheris.Fuzz()


def main() -> int:
    if sys.argv[1:2] == ["--child"]:  # one target, in its own process: libFuzzer's args
        child(sys.argv[2], sys.argv[3:])
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=int, default=20)
    parser.add_argument("targets", nargs="*", default=list(NAMES), help=", ".join(NAMES))
    options = parser.parse_args()
    unknown = set(options.targets) - set(NAMES)
    if unknown:
        parser.error(f"no such target: {', '.join(sorted(unknown))}")
    failed = []
    for name in options.targets:
        work = WORK / name
        seeds = CORPUS / name
        work.mkdir(parents=True, exist_ok=True)
        seeds.mkdir(parents=True, exist_ok=True)
        args = [
            f"-max_total_time={options.seconds}",
            f"-artifact_prefix={seeds}/",
            "-timeout=10",
            "-rss_limit_mb=2048",
            "-max_len=4096",
            "-print_final_stats=1",
            str(work),
            str(seeds),
        ]
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        run = subprocess.run(
            [sys.executable, "-m", "tests.fuzz.run", "--child", name, *args],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        log = run.stderr
        (WORK / f"{name}.log").write_text(log)
        done = re.findall(r"#(\d+)\s+DONE\s+cov: (\d+) ft: (\d+) corp: (\d+)", log)
        execs = re.findall(r"stat::number_of_executed_units: (\d+)", log)
        if run.returncode == 0 and done:
            n, cov, ft, corp = done[-1]
            print(f"fuzz {name}: {int(execs[-1] if execs else n):,} executions in "
                  f"{options.seconds} s, cov {cov}, ft {ft}, corpus {corp}")  # fmt: skip
        else:
            failed.append(name)
            print(f"fuzz {name}: FAILED (exit {run.returncode}); log in {WORK / name}.log")
            print("\n".join(log.splitlines()[-30:]))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
