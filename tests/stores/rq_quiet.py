"""The RQ worker class of ``test_rq_fleet.py``: RQ's ``SimpleWorker`` (every job in the
worker's own process, no fork per job) without its command channel.

A worker subscribes to a Redis pub/sub channel for ``rq`` commands (shutdown, stop a
job) and, at exit, joins that channel's thread, which with redis-py 8 may sleep out its
60 s poll first (rq/rq#1613): a burst worker then lingers a minute after its last job.
The tests send no commands (a worker ends when the queue is empty, or by its pid), so
this one never subscribes.
"""

from __future__ import annotations

from rq.worker import SimpleWorker


class QuietWorker(SimpleWorker):
    """``SimpleWorker`` that takes no ``rq`` commands (see the module docstring)."""

    def subscribe(self) -> None:
        self.log.info("Worker %s: no command channel (tests)", self.name)
