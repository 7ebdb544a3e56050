"""A real distributed engine (issue 28): RQ workers run ``examples/fleet_rq.py``'s job
against a local MCP server, sharing one ``RedisStore`` on a real ``redis-server`` that
is also RQ's broker.

RQ's default worker forks a process for every job, so each job's ``Client`` starts
cold: whatever a job finds already known (the endpoint's era, its ``public`` listing)
came from the store.  The server's request log (by ``x-test-tag``) counts what the jobs
sent; every worker is started and stopped by its pid.
"""

from __future__ import annotations

import itertools
import os
import pathlib
import subprocess
import sys
from typing import Any

import pytest

from tests.e2e.conftest import Launcher, Server, launch  # noqa: F401
from tests.e2e.test_observe import requests_logged
from tests.redis_server import RedisServer

from .conftest import SECRET

ROOT = pathlib.Path(__file__).resolve().parents[2]
JOBS = 100
WORKERS = 2
_runs = itertools.count()


@pytest.fixture(scope="module")
def public(launch: Launcher) -> Server:  # noqa: F811
    return launch("--observe", "--cache-ttl", "60000", "--cache-scope", "public")


def rq_module() -> Any:
    try:
        import rq
    except ImportError:
        pytest.skip("rq not installed (the dev extra: pip install -e '.[dev]')")
    return rq


def run_workers(redis_url: str, queue: str, count: int) -> list[str]:
    """``count`` RQ workers (the default, forking one) in burst mode: each works until
    the queue is empty, then exits; their logs."""
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "FLEET_REDIS_URL": redis_url,
        "FLEET_SECRET": SECRET.decode(),
        "FLEET_ALLOW_LOOPBACK": "1",
    }
    command = [sys.executable, "-m", "rq.cli", "worker", "--burst", "--url", redis_url]
    command += ["--worker-class", "tests.stores.rq_quiet.QuietWorker"]
    workers = [
        subprocess.Popen(
            [*command, "--path", str(ROOT / "examples"), "--name", f"{queue}-{n}", queue],
            env=env,
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for n in range(count)
    ]
    try:
        logs = [worker.communicate(timeout=180)[0] for worker in workers]
    finally:
        for worker in workers:  # (a failure above leaves no process or pipe behind)
            if worker.poll() is None:
                os.kill(worker.pid, 9)
            worker.communicate()
    assert [worker.returncode for worker in workers] == [0] * count, logs
    return logs


def test_a_hundred_rq_jobs_list_the_server_once(public: Server, redis_server: RedisServer) -> None:
    rq = rq_module()
    import redis

    run = next(_runs)
    tag, queue_name = f"fleet-rq-{run}", f"fleet-{run}"
    with redis.Redis.from_url(redis_server.url) as broker:
        queue = rq.Queue(queue_name, connection=broker)
        jobs = [
            queue.enqueue(
                "fleet_rq.work_item", public.url(), i, 1000, {"x-test-tag": tag}, result_ttl=600
            )
            for i in range(JOBS)
        ]
        logs = run_workers(redis_server.url, queue_name, WORKERS)
        statuses = [job.get_status() for job in jobs]
        values = [job.return_value() for job in jobs]
    assert statuses == [rq.job.JobStatus.FINISHED] * JOBS, logs
    assert [value["sum"] for value in values] == [i + 1000 for i in range(JOBS)]
    names = {tuple(value["tools"]) for value in values}
    assert len(names) == 1 and "add" in next(iter(names))
    log = requests_logged(public, tag)
    rpcs = [entry["rpc"] for entry in log]
    assert rpcs.count("tools/call") == JOBS
    # every job is a new process: the listing and the era come from the store, loaded
    # once per fleet (one per worker at most, were the first two to start together past
    # Limits.store_load_wait)
    assert 1 <= rpcs.count("tools/list") <= WORKERS, rpcs.count("tools/list")
    assert sum(1 for value in values if value["cached"]) >= JOBS - WORKERS
    assert rpcs.count("server/discover") <= WORKERS, rpcs.count("server/discover")
