"""``sansmcp call`` shows progress on a terminal and prints server log messages (issue 14).

The CLI runs in a subprocess whose stderr is a pseudo-terminal (``pty``), against the
official SDK server's ``report`` tool: the progress line appears (a gauge), is redrawn
in place and is cleared before the command ends; with stderr not a terminal nothing
is drawn unless ``--progress`` forces it; ``--log-level`` prints the log messages.
"""

from __future__ import annotations

import os
import pty
import select
import subprocess
import sys
import time

import pytest

from sansmcp.cli import ProgressLine

from .conftest import REPO, Launcher

CLEAR = "\r\x1b[K"
CHILD_TIMEOUT = 60  # s: a safety net for the child CLI on a loaded machine, not an assertion
pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="pty needs a POSIX system")


def run_cli(args: list[str], *, tty: bool) -> tuple[int, str, str]:
    command = [sys.executable, "-m", "sansmcp.cli", *args]
    if not tty:
        done = subprocess.run(command, cwd=REPO, capture_output=True, timeout=CHILD_TIMEOUT)
        return done.returncode, done.stdout.decode(), done.stderr.decode()  # \r kept
    master, slave = pty.openpty()
    try:
        process = subprocess.Popen(
            command, cwd=REPO, stdout=subprocess.PIPE, stderr=slave, stdin=subprocess.DEVNULL
        )
        os.close(slave)
        chunks: list[bytes] = []
        end = time.monotonic() + CHILD_TIMEOUT
        while time.monotonic() < end:
            ready, _, _ = select.select([master], [], [], 0.1)
            if ready:
                try:
                    data = os.read(master, 65536)
                except OSError:  # EIO: the child closed its end
                    break
                if not data:
                    break
                chunks.append(data)
            elif process.poll() is not None:
                break
        out = process.stdout.read().decode() if process.stdout else ""
        process.wait(timeout=10)
        if process.stdout:
            process.stdout.close()
        return process.returncode, out, b"".join(chunks).decode()
    finally:
        os.close(master)


def test_progress_on_a_terminal_appears_and_clears(launch: Launcher) -> None:
    server = launch("--observe")
    code, out, err = run_cli(
        ["call", server.url(), "report", '{"steps": 4}', "--allow-loopback"], tty=True
    )
    assert code == 0, err
    assert "reported 4" in out
    assert f"{CLEAR}[#####---------------]  25%  step 1" in err
    assert f"{CLEAR}[####################] 100%  step 4" in err
    assert err.endswith(CLEAR)  # cleared at the end: nothing left on the line
    assert err.count(CLEAR) == 5  # four draws, one clear


def test_no_progress_without_a_terminal_unless_forced(launch: Launcher) -> None:
    server = launch("--observe")
    args = ["call", server.url(), "report", '{"steps": 2, "with_total": false}', "--allow-loopback"]
    code, out, err = run_cli(args, tty=False)
    assert code == 0 and err == "" and "reported 2" in out
    code, _out, err = run_cli([*args, "--progress"], tty=False)
    assert code == 0
    assert err == f"{CLEAR}progress 1  step 1{CLEAR}progress 2  step 2{CLEAR}"
    code, _out, err = run_cli([*args, "--no-progress"], tty=True)
    assert code == 0 and CLEAR not in err


@pytest.mark.parametrize("era", [(), ("--legacy-only",)])
def test_log_level_prints_server_log_messages(launch: Launcher, era: tuple[str, ...]) -> None:
    server = launch("--observe", *era)
    args = ["call", server.url(), "report", '{"steps": 1}', "--allow-loopback"]
    code, _out, err = run_cli([*args, "--log-level", "warning"], tty=False)
    assert code == 0
    assert err.splitlines() == [
        'sansmcp: server log [warning] report: {"level": "warning", "n": 1}',
        'sansmcp: server log [error] report: {"level": "error", "n": 1}',
    ]


def test_progress_line_escapes_and_clips_the_server_message() -> None:
    class Sink:
        def __init__(self) -> None:
            self.text = ""

        def write(self, text: str) -> None:
            self.text += text

        def flush(self) -> None:
            pass

    sink = Sink()
    line = ProgressLine(sink, width=40)  # type: ignore[arg-type]
    line.show(1, 2, "\x1b[31mred\u202e" + "x" * 100)
    shown = sink.text.removeprefix(CLEAR)
    assert "\x1b" not in shown and "\u202e" not in shown
    assert len(shown) <= 39 and shown.startswith("[##########----------]  50%  \\x1b[31m")
    line.above("a log line")
    assert sink.text.endswith("a log line\n" + shown)
