"""Subprocess plumbing for the harness: line-oriented pipes with deadlines; the bench CA."""

from __future__ import annotations

import contextlib
import json
import os
import queue
import subprocess
import sys
import threading
from pathlib import Path
from typing import IO, Any

ROOT = Path(__file__).resolve().parent.parent


def peak_rss_kib() -> int:
    """This process's peak RSS (``VmHWM``).  Not ``ru_maxrss``: Linux carries that across
    ``exec`` from the parent, so a small child of the harness reported the harness's peak."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return 0  # pragma: no cover - not Linux


def cache_bytecode() -> None:
    """Children of this process keep their byte code, as an installed package does.

    This machine's environment sets ``PYTHONDONTWRITEBYTECODE``: every child would compile
    every module it imports, and the compiler's transient memory would land in the peak
    RSS figures.  The ``.pyc`` files go under ``PYTHONPYCACHEPREFIX`` in the temporary
    directory, so the worktree stays clean.
    """
    import tempfile

    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    prefix = Path(tempfile.gettempdir()) / "sansmcp-bench-pycache"
    os.environ.setdefault("PYTHONPYCACHEPREFIX", str(prefix))


class LineProcess:
    """A child speaking lines on stdin/stdout; every read has a deadline."""

    def __init__(self, args: list[str], *, log: IO[str], cpu: int | None = None) -> None:
        self.args = args
        self.proc = subprocess.Popen(
            [sys.executable, *args],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
            bufsize=1,
        )
        if cpu is not None:
            with contextlib.suppress(OSError):
                os.sched_setaffinity(self.proc.pid, {cpu})
        self._lines: queue.Queue[str | None] = queue.Queue()
        self._thread = threading.Thread(target=self._pump, daemon=True)
        self._thread.start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._lines.put(line)
        self._lines.put(None)

    def readline(self, timeout: float) -> str:
        try:
            line = self._lines.get(timeout=timeout)
        except queue.Empty:
            raise TimeoutError(f"{self.args[:3]} said nothing for {timeout:.0f} s") from None
        if line is None:
            code = self.proc.wait(timeout=10)
            raise EOFError(f"{self.args[:3]} exited ({code})")
        return line.rstrip("\n")

    def read_json(self, timeout: float) -> dict[str, Any]:
        while True:
            line = self.readline(timeout)
            if line.startswith("{"):
                message: dict[str, Any] = json.loads(line)
                return message

    def send(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def stop(self, grace: float = 5.0) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(OSError):
                self.send("quit")
            try:
                self.proc.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                self.proc.terminate()
                try:
                    self.proc.wait(timeout=grace)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait(timeout=grace)
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()


def make_tls(directory: Path) -> dict[str, str]:
    """A trustme CA and a certificate for 127.0.0.1 in ``directory``: the PEM paths."""
    import trustme

    directory.mkdir(parents=True, exist_ok=True)
    ca = trustme.CA()
    issued = ca.issue_cert("127.0.0.1")
    paths = {name: str(directory / f"{name}.pem") for name in ("ca", "cert", "key")}
    ca.cert_pem.write_to_path(paths["ca"])
    issued.private_key_pem.write_to_path(paths["key"])
    issued.cert_chain_pems[0].write_to_path(paths["cert"])
    for extra in issued.cert_chain_pems[1:]:
        extra.write_to_path(paths["cert"], append=True)
    return paths


class Server(LineProcess):
    """``bench.server`` for one configuration; counters read over its stdin."""

    def __init__(
        self,
        *,
        http: str,
        body: str,
        tools: int,
        log: IO[str],
        cpu: int | None,
        tls: tuple[str, str] | None = None,
    ) -> None:
        args = ["-m", "bench.server", "--tools", str(tools)]
        if body == "json":
            args.append("--json")
        if tls is not None:
            args += ["--tls", *tls]
        elif http == "h2":
            args.append("--h2c")
        super().__init__(args, log=log, cpu=cpu)
        self.http, self.body, self.tools = http, body, tools
        ready = self.readline(timeout=60)
        if not ready.startswith("READY "):
            raise RuntimeError(f"the bench server said {ready!r}")
        _, port, path = ready.split()
        self.port = int(port)
        self.path = path
        scheme = "https" if tls is not None else "http"
        self.url = f"{scheme}://127.0.0.1:{self.port}{path}"

    def reset(self) -> None:
        self.send("reset")
        self.read_json(timeout=30)

    def stats(self) -> dict[str, Any]:
        self.send("stats")
        return self.read_json(timeout=30)
