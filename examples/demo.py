"""``make demo``: a real MCP server on loopback, and the ``sansmcp`` command line against it.

Starts ``examples/demo_server.py`` (the official ``mcp`` package; tools served two per
page) on a free loopback port, waits for its ``READY`` line, then runs ``sansmcp
tools`` and ``sansmcp call`` in both protocol eras -- 2026-07-28 (the default) and
2025-11-25 (by restricting the versions) -- on both backends, printing each command,
its output and its exit status.  Every step checks what it printed (the negotiated
version, the exit status), so the demo fails loudly if sansmcp misbehaves.  The server
is stopped whatever happens.
"""

from __future__ import annotations

import contextlib
import json
import select
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

HERE = Path(__file__).resolve().parent
BIN = Path(sys.executable).parent
SANSMCP = BIN / "sansmcp"
READY_TIMEOUT = 30.0
STEP_TIMEOUT = 60.0


@contextlib.contextmanager
def demo_server() -> Iterator[str]:
    """Run the demo server; yield its URL; stop it (also on failure or Ctrl-C)."""
    with tempfile.TemporaryFile() as log:
        proc = subprocess.Popen(
            [sys.executable, str(HERE / "demo_server.py"), "0"],
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
        )
        try:
            assert proc.stdout is not None
            deadline = time.monotonic() + READY_TIMEOUT
            line = ""
            while not line:
                remaining = deadline - time.monotonic()
                ready, _, _ = select.select([proc.stdout], [], [], max(remaining, 0))
                if not ready:
                    raise SystemExit(f"demo: the server printed no READY in {READY_TIMEOUT:.0f} s")
                line = proc.stdout.readline()
                if not line:  # EOF: the server died
                    log.seek(0)
                    sys.stderr.write(log.read().decode(errors="replace"))
                    raise SystemExit(f"demo: the server exited with status {proc.wait()}")
            word, _, url = line.strip().partition(" ")
            if word != "READY" or not url:
                raise SystemExit(f"demo: unexpected first line from the server: {line!r}")
            print(f"demo server (official mcp package, pid {proc.pid}) listening at {url}\n")
            yield url
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            if proc.stdout is not None:
                proc.stdout.close()
            print(f"\ndemo server (pid {proc.pid}) stopped")


def run(args: list[str], *, expect_status: int = 0, expect_version: str | None = None) -> str:
    shown = " ".join(a if a.isprintable() and " " not in a else repr(a) for a in args)
    print(f"$ sansmcp {shown}")
    done = subprocess.run(
        [str(SANSMCP), *args], capture_output=True, text=True, timeout=STEP_TIMEOUT, check=False
    )
    sys.stdout.write(done.stdout)
    sys.stdout.write(done.stderr)
    print(f"(exit status {done.returncode})\n")
    if done.returncode != expect_status:
        raise SystemExit(f"demo: expected exit status {expect_status}, got {done.returncode}")
    if expect_version is not None:
        if done.stdout.startswith("{"):
            version = json.loads(done.stdout)["protocol_version"]
        else:
            version = done.stdout.split()[1]  # "protocol <version> · ..."
        if version != expect_version:
            raise SystemExit(f"demo: negotiated {version}, expected {expect_version}")
    return done.stdout


def main() -> int:
    if not SANSMCP.exists():
        raise SystemExit(f"demo: {SANSMCP} is missing; run 'make demo' (it installs sansmcp)")
    with demo_server() as url:
        loopback = ["--allow-loopback"]
        modern = "2026-07-28"
        legacy = ["--protocol-version", "2025-11-25"]

        print(f"=== protocol {modern} (the default: sansmcp offers it first) ===\n")
        run(["tools", url, *loopback], expect_version=modern)
        run(["tools", url, *loopback, "--backend", "trio"], expect_version=modern)
        run(["call", url, "echo", '{"text": "hello from sansmcp"}', *loopback])
        run(
            [
                "call",
                url,
                "weather",
                '{"city": "Lisbon", "days": 2}',
                *loopback,
                "--backend",
                "trio",
            ]
        )
        run(["call", url, "pixel", *loopback, "--json"])

        print("=== protocol 2025-11-25 (legacy era: initialize, session, DELETE on close) ===\n")
        run(["tools", url, *loopback, *legacy, "--backend", "trio"], expect_version="2025-11-25")
        run(["tools", url, *loopback, *legacy, "--json"], expect_version="2025-11-25")
        run(["call", url, "add", '{"a": 2, "b": 40}', *loopback, *legacy])
        run(["call", url, "fail", *loopback, *legacy, "--backend", "trio"], expect_status=1)

        print("=== failures are classified (exit status 2..5) ===\n")
        run(["call", url, "no_such_tool", *loopback], expect_status=5)
        run(["tools", url], expect_status=3)  # loopback is refused by default
        run(["call", url, "add", "[1, 2]", *loopback], expect_status=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
