"""``sansmcp call --tasks`` against the extension's tasks server (issue 30).

The CLI runs in a subprocess (its stderr a pseudo-terminal where the status line is
wanted, as in ``test_cli_observe.py``): the task's status is drawn on one line while it
waits and cleared at the end; ``--json`` carries the task's id; without ``--tasks``
nothing is declared and the server's ``-32021`` is the exit status of a
``ServerAnswered``.
"""

from __future__ import annotations

import json
import re
import sys

import pytest

from sansmcp.cli import EXIT_SERVER_ANSWERED

from .conftest import MODES, Launcher, Server
from .test_cli_observe import CLEAR, run_cli

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="pty needs a POSIX system")
RESEARCH = ["research", '{"topic": "cli", "polls": 2}', "--allow-loopback"]


@pytest.fixture(scope="module")
def tasks_server(launch: Launcher) -> Server:
    return launch(*MODES["stateless-json"], "--tasks")


def test_the_tasks_status_is_one_line_on_a_terminal(tasks_server: Server) -> None:
    code, out, err = run_cli(["call", tasks_server.url(), *RESEARCH, "--tasks"], tty=True)
    assert code == 0, err
    first = out.splitlines()[0]
    found = re.fullmatch(r"protocol 2026-07-28 · research → ok · task (task-\d+)", first)
    assert found is not None, first
    task_id = found.group(1)
    assert "researched cli" in out
    # drawn when the server answered with the task, redrawn once when it changed
    assert err == f"{CLEAR}task {task_id} working{CLEAR}task {task_id} completed{CLEAR}"


@pytest.mark.parametrize("backend", ["sync", "asyncio", "trio"])
def test_json_carries_the_task_id_and_no_line_off_a_terminal(
    tasks_server: Server, backend: str
) -> None:
    args = ["call", tasks_server.url(), *RESEARCH, "--tasks", "--json", "--backend", backend]
    code, out, err = run_cli(args, tty=False)
    assert code == 0 and err == ""
    document = json.loads(out)
    assert re.fullmatch(r"task-\d+", document["task_id"])
    assert document["content"][0]["text"] == "researched cli"


def test_without_tasks_the_server_asks_for_the_capability(tasks_server: Server) -> None:
    code, out, err = run_cli(["call", tasks_server.url(), *RESEARCH, "--json"], tty=False)
    assert code == EXIT_SERVER_ANSWERED
    assert json.loads(out)["error"]["code"] == -32021 and "task_id" not in out
    assert err.rstrip("\n").endswith("(next: call it again with --tasks)")
