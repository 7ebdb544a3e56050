"""The official TypeScript "everything" server (``@modelcontextprotocol/server-everything``,
pinned in ``tests/interop/package.json``) as a real process on loopback, for the e2e tests
of its task tool ``simulate-research-query`` (issue 30: the 2025-11-25 task shape).

:func:`find` names Node (the suite's Node 22 in ``.conformance/`` if installed, else
``node`` on ``PATH``) and the server's entry point, or says which of them is missing
(``make test`` installs both: its ``unit`` target depends on the npm stamps);
:class:`EverythingServer` starts it on a free port and stops it by its pid.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

__all__ = ["EverythingServer", "find"]

REPO = Path(__file__).resolve().parents[1]
INTEROP = REPO / "tests" / "interop"
PACKAGE = "@modelcontextprotocol/server-everything"
ENTRY = INTEROP / "node_modules" / PACKAGE / "dist" / "index.js"
MIN_NODE = 20  # the SDK's floor
READY_ATTEMPTS = 1_000  # connects 20 ms apart before a start counts as failed


def find() -> tuple[str, Path] | str:
    """``(node, entry point)``, or the reason one is missing (naming it)."""
    bundled = Path(os.environ.get("CONFORMANCE_DIR", REPO / ".conformance"))
    candidate = bundled / "node_modules" / ".bin" / "node"
    node = str(candidate) if candidate.exists() else shutil.which("node")
    if node is None:
        return "node not found (.conformance/node_modules/.bin/node, PATH); `make test` installs it"
    version = subprocess.run(
        [node, "--version"], capture_output=True, text=True, timeout=30, check=False
    ).stdout.strip()
    major = version.lstrip("v").split(".")[0]
    if not major.isdigit() or int(major) < MIN_NODE:
        return f"node {version or '(no version)'} at {node} is older than {MIN_NODE}"
    if not ENTRY.exists():
        return f"{PACKAGE} not installed in tests/interop/node_modules (`make test` installs it)"
    return node, ENTRY


class EverythingServer:
    """One everything server (Streamable HTTP, sessions) on ``127.0.0.1:port``."""

    def __init__(self, node: str, entry: Path, log: Path) -> None:
        self.node, self.entry, self.log = node, entry, log
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self.port = int(sock.getsockname()[1])
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    def start(self) -> None:
        with self.log.open("wb") as sink:
            self.process = subprocess.Popen(
                [self.node, str(self.entry), "streamableHttp"],
                cwd=INTEROP,
                env={**os.environ, "PORT": str(self.port)},
                stdin=subprocess.DEVNULL,
                stdout=sink,
                stderr=subprocess.STDOUT,
            )
        for _ in range(READY_ATTEMPTS):
            if self.process.poll() is not None:
                break
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                time.sleep(0.02)
        self.stop()
        raise RuntimeError(f"the everything server did not start: {self.log.read_text()[-2000:]}")

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        os.kill(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.kill(process.pid, signal.SIGKILL)
            process.wait(timeout=10)
