"""A real ``redis-server`` for the store tests (issue 28), on a Unix socket in a temporary
directory, without persistence, started and stopped by its pid.

``RedisServer.find()`` names the binary (``$SANSMCP_REDIS_SERVER``, else ``redis-server``
on ``PATH``, else ``/usr/bin/redis-server``); the tests skip, naming it, only when none
is found (``.ci/run`` installs Debian's package, so CI always has one).
"""

from __future__ import annotations

import os
import pathlib
import shutil
import signal
import socket
import subprocess
import time

__all__ = ["RedisServer"]

READY_ATTEMPTS = 500  # PINGs 10 ms apart before a start counts as failed


class RedisServer:
    """One ``redis-server`` process; ``stop()`` / ``start()`` restart it on the same socket.

    ``maxmemory`` (Redis's form: ``"2mb"``): a server that refuses writes once its used
    memory is over it (``maxmemory-policy noeviction``: nothing is evicted), a full Redis.
    """

    def __init__(
        self, binary: str, directory: pathlib.Path, *, maxmemory: str | None = None
    ) -> None:
        self.binary = binary
        self.directory = directory
        self.maxmemory = maxmemory
        self.socket = directory / "redis.sock"
        self.process: subprocess.Popen[bytes] | None = None

    @staticmethod
    def find() -> str | None:
        named = os.environ.get("SANSMCP_REDIS_SERVER")
        if named:
            return named if os.access(named, os.X_OK) else None
        found = shutil.which("redis-server")
        if found:
            return found
        return "/usr/bin/redis-server" if os.access("/usr/bin/redis-server", os.X_OK) else None

    @property
    def url(self) -> str:
        return f"unix://{self.socket}"

    @property
    def pid(self) -> int:
        assert self.process is not None, "the server is not running"
        return self.process.pid

    def start(self) -> None:
        assert self.process is None, "already running"
        memory: list[str] = []
        if self.maxmemory is not None:
            memory = ["--maxmemory", self.maxmemory, "--maxmemory-policy", "noeviction"]
        self.process = subprocess.Popen(
            [
                self.binary,
                "--port", "0",
                "--unixsocket", str(self.socket),
                "--unixsocketperm", "700",
                "--save", "",
                "--appendonly", "no",
                "--dir", str(self.directory),
                "--daemonize", "no",
                "--loglevel", "warning",
                "--logfile", str(self.directory / "redis.log"),
                *memory,
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        for _ in range(READY_ATTEMPTS):
            if self.process.poll() is not None:
                break
            if self.ping():
                return
            time.sleep(0.01)
        log = (self.directory / "redis.log").read_text(errors="replace")[-2000:]
        self.stop()
        raise RuntimeError(f"redis-server did not start ({self.binary}): {log}")

    def ping(self) -> bool:
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
                sock.settimeout(1.0)
                sock.connect(str(self.socket))
                sock.sendall(b"PING\r\n")
                return sock.recv(64).startswith(b"+PONG")
        except OSError:
            return False

    def signal(self, number: int) -> None:
        """Send ``number`` to the server, by its pid (SIGSTOP: a Redis that does not answer)."""
        os.kill(self.pid, number)

    def stop(self) -> None:
        """Stop the server by its pid (SIGKILL if SIGTERM is not enough) and reap it."""
        process, self.process = self.process, None
        if process is None:
            return
        if process.poll() is None:
            os.kill(process.pid, signal.SIGCONT)  # a stopped process cannot handle SIGTERM
            os.kill(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.kill(process.pid, signal.SIGKILL)
                process.wait()
        self.socket.unlink(missing_ok=True)
