"""One contender in its own process: ``python -m bench.child SPEC_JSON``.

For each phase of the spec: set the contender up, run warm-up work items (checking
each one listed the expected number of tools and got its echo back), print
``{"event": "warm"}`` and wait for ``go`` on stdin (the harness resets the server's
counters meanwhile), run the measured work items, tear the contender down, print
``{"event": "done", ...}`` with the figures and wait for ``next`` (the harness reads
the server's counters meanwhile, so the next phase's traffic cannot leak into them).

Figures: client CPU from ``getrusage(RUSAGE_SELF)`` (user + sys, all threads) over
the measured items only; wall time per item; peak RSS (``VmHWM``); RSS and open
file descriptors before and after the measured items (a leak shows as growth); and
errors.  Phase kinds: ``seq`` (one item after another), ``conc`` (``concurrency``
items in flight at once), ``mem`` (Python heap held per idle pooled connection,
measured with tracemalloc after ``concurrency`` simultaneous items left their
sockets in the pool).

A ``seq`` phase with ``rounds`` R > 1 (the paired issue-12 section, ``bench.run``'s
``paired``) keeps its contender open and repeats the protocol R times: ``warm``, ``go``,
``done``, ``next``, ``warm``, ``go``, ... the same n items each round (chosen from the
warm-up, unless the harness says ``go N``), each round's block preceded, after ``go``, by
``rewarm`` untimed items (caches and pooled sockets warm again after the other contenders'
blocks; an error is counted in the block's, as a timed item's is).  Nothing runs
between ``done`` and the next ``go``, so blocks of several children alternated by the
harness never overlap.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import os
import resource
import sys
import threading
import time
import tracemalloc
from collections.abc import Awaitable, Callable
from typing import Any

from .contenders import RUNTIME, Contender, make
from .procs import peak_rss_kib

_PAGE = os.sysconf("SC_PAGE_SIZE")


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _rss_kb() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * _PAGE // 1024


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def _emit(message: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def _go(n: int) -> int:
    """Wait for ``go`` (run ``n`` items) or ``go N`` (run N: a repeated phase's harness
    re-sizes its blocks from the first round's wall time)."""
    line = sys.stdin.readline()
    word, _, count = line.strip().partition(" ")
    if word != "go" or (count and not count.isdigit()):
        raise SystemExit(f"expected 'go' from the harness, got {line!r}")
    return int(count) if count else n


def _wait_for(word: str) -> None:
    line = sys.stdin.readline()
    if line.strip() != word:
        raise SystemExit(f"expected {word!r} from the harness, got {line!r}")


class Phase:
    def __init__(self, name: str, spec: dict[str, Any]) -> None:
        self.name = name
        self.spec = spec
        self.runtime = RUNTIME[name]
        self.contender: Contender = make(
            name, spec["url"], spec["era"], spec["http"], spec.get("ca")
        )
        self.errors: list[str] = []
        self.error_count = 0
        self.went = False  # the harness said "go": it now waits for our figures
        self.rounds = int(spec.get("rounds", 1))
        self.rewarm = int(spec.get("rewarm", 0))

    def check(self, outcome: tuple[int, str]) -> None:
        count, text = outcome
        if count != self.spec["expect_tools"] or text != "hi":
            raise RuntimeError(f"wrong work item result: {count} tools, echo {text!r}")

    def failed(self, exc: BaseException) -> None:
        self.error_count += 1
        if len(self.errors) < 5:
            self.errors.append(f"{type(exc).__name__}: {exc}"[:500])

    def pick_n(self, warm_walls: list[float]) -> int:
        spec = self.spec
        if spec.get("n"):
            return int(spec["n"])
        steady = sorted(warm_walls[1:] or warm_walls)
        per_item = max(steady[len(steady) // 2], 1e-5)
        if spec["kind"] == "conc":
            per_item /= spec["concurrency"]
        wanted = int(spec["budget"] / per_item)
        return max(spec["n_min"], min(spec["n_max"], wanted))

    def next_round(self, done: dict[str, Any], index: int) -> None:
        """Between two rounds of a repeated phase: hand over this round's figures, then wait
        for the harness (it reads the server's counters and runs the other contenders)."""
        if index:
            done["round"] = index - 1
            _emit(done)
            _wait_for("next")

    def result(self, n: int, cpu: float, walls: list[float], elapsed: float) -> dict[str, Any]:
        errors, samples = self.error_count, self.errors
        self.error_count, self.errors = 0, []  # a repeated phase counts each round's own
        return {
            "event": "done",
            "n": n,
            "rewarm": self.rewarm,  # untimed items the server also answered
            "cpu_s": cpu,
            "elapsed_s": elapsed,
            "walls_s": walls,
            "errors": errors,
            "error_samples": samples,
            "maxrss_kb": peak_rss_kib(),
        }


# -- async runtimes -------------------------------------------------------------


async def _timed(item: Callable[[], Awaitable[tuple[int, str]]], phase: Phase) -> float:
    start = time.perf_counter()
    try:
        await item()
    except Exception as exc:
        phase.failed(exc)
    return time.perf_counter() - start


async def _run_async(phase: Phase, gather: Callable[..., Any], sleep: Any) -> dict[str, Any]:
    spec = phase.spec
    contender = phase.contender
    await contender.open()
    warm_walls = []
    for _ in range(spec["warmup"]):
        start = time.perf_counter()
        phase.check(await contender.item())
        warm_walls.append(time.perf_counter() - start)
    n = phase.pick_n(warm_walls)
    concurrency = spec.get("concurrency", 1)
    if spec["kind"] == "mem":
        return await _measure_memory(phase, gather, sleep, concurrency)
    out: dict[str, Any] = {}
    for index in range(phase.rounds):
        phase.next_round(out, index)
        out = await _block_async(phase, gather, sleep, n, concurrency)
    await contender.close()
    return out


async def _block_async(
    phase: Phase, gather: Callable[..., Any], sleep: Any, n: int, concurrency: int
) -> dict[str, Any]:
    """One measured block: ``warm``, wait for ``go``, the re-warm items, n measured items."""
    contender = phase.contender
    gc.collect()
    rss0, fds0 = _rss_kb(), _fds()
    _emit({"event": "warm", "n": n})
    phase.went = True
    n = _go(n)
    for _ in range(phase.rewarm):
        try:
            outcome = await contender.item()
        except Exception as exc:
            phase.failed(exc)  # counted in the block's errors, like a timed item's
        else:
            phase.check(outcome)
    walls: list[float] = []
    cpu0, t0 = _cpu(), time.perf_counter()
    if phase.spec["kind"] == "seq":
        for _ in range(n):
            walls.append(await _timed(contender.item, phase))
    else:
        remaining = [n]

        async def worker() -> None:
            while remaining[0] > 0:
                remaining[0] -= 1
                walls.append(await _timed(contender.item, phase))

        await gather(worker, concurrency)
    cpu1, t1 = _cpu(), time.perf_counter()
    out = phase.result(n, cpu1 - cpu0, walls, t1 - t0)
    gc.collect()
    if phase.rounds == 1:  # let closing sockets close before the RSS and fd figures
        await sleep(0.05)
    out.update(rss_before_kb=rss0, rss_after_kb=_rss_kb(), fds_before=fds0, fds_after=_fds())
    return out


async def _measure_memory(
    phase: Phase, gather: Callable[..., Any], sleep: Any, concurrency: int
) -> dict[str, Any]:
    contender = phase.contender
    gc.collect()
    tracemalloc.start()
    await sleep(0.05)
    gc.collect()
    base = tracemalloc.get_traced_memory()[0]
    fds0 = _fds()
    _emit({"event": "warm", "n": concurrency})
    phase.went = True
    _wait_for("go")

    async def one() -> None:
        phase.check(await contender.item())

    await gather(one, concurrency)
    await sleep(0.1)  # let closing sockets finish closing; pooled ones stay
    gc.collect()
    held = tracemalloc.get_traced_memory()[0] - base
    fds1 = _fds()
    tracemalloc.stop()
    out = phase.result(concurrency, 0.0, [], 0.0)
    out.update(heap_delta_bytes=held, fds_before=fds0, fds_after=fds1)
    await contender.close()
    return out


async def _asyncio_gather(fn: Callable[[], Awaitable[None]], count: int) -> None:
    await asyncio.gather(*(fn() for _ in range(count)))


async def _trio_gather(fn: Callable[[], Awaitable[None]], count: int) -> None:
    import trio

    async with trio.open_nursery() as nursery:
        for _ in range(count):
            nursery.start_soon(fn)


# -- the blocking floor -----------------------------------------------------------


def _run_sync(phase: Phase) -> dict[str, Any]:
    """The blocking runtime: sequential items, or ``concurrency`` threads sharing the
    contender (the blocking adapter; the floor runs sequential phases only)."""
    spec = phase.spec
    contender = phase.contender
    asyncio.run(contender.open())
    item = contender.item_sync  # type: ignore[attr-defined]
    warm_walls = []
    for _ in range(spec["warmup"]):
        start = time.perf_counter()
        phase.check(item())
        warm_walls.append(time.perf_counter() - start)
    if spec["kind"] == "mem" or (spec["kind"] == "conc" and phase.name != "sansmcp-sync"):
        raise SystemExit(f"{phase.name} has no {spec['kind']} phase")
    n = phase.pick_n(warm_walls)
    out: dict[str, Any] = {}
    for index in range(phase.rounds):
        phase.next_round(out, index)
        out = _block_sync(phase, item, n)
    asyncio.run(contender.close())
    return out


def _block_sync(phase: Phase, item: Callable[[], tuple[int, str]], n: int) -> dict[str, Any]:
    """One measured block on the blocking runtime (see :func:`_block_async`)."""
    spec = phase.spec
    gc.collect()
    rss0, fds0 = _rss_kb(), _fds()
    _emit({"event": "warm", "n": n})
    phase.went = True
    n = _go(n)
    for _ in range(phase.rewarm):
        try:
            outcome = item()
        except Exception as exc:
            phase.failed(exc)  # counted in the block's errors, like a timed item's
        else:
            phase.check(outcome)
    walls: list[float] = []
    remaining = [n]
    lock = threading.Lock()

    def worker() -> None:
        while True:
            with lock:
                if remaining[0] <= 0:
                    return
                remaining[0] -= 1
            start = time.perf_counter()
            try:
                item()
            except Exception as exc:
                phase.failed(exc)
            walls.append(time.perf_counter() - start)

    cpu0, t0 = _cpu(), time.perf_counter()
    if spec["kind"] == "seq":
        worker()
    else:
        threads = [threading.Thread(target=worker) for _ in range(spec["concurrency"])]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    cpu1, t1 = _cpu(), time.perf_counter()
    out = phase.result(n, cpu1 - cpu0, walls, t1 - t0)
    gc.collect()
    out.update(rss_before_kb=rss0, rss_after_kb=_rss_kb(), fds_before=fds0, fds_after=_fds())
    return out


def main() -> None:
    spec = json.loads(sys.argv[1])
    name = spec["contender"]
    if spec.get("cpu") is not None:
        with contextlib.suppress(OSError):
            os.sched_setaffinity(0, {spec["cpu"]})
    for phase_spec in spec["phases"]:
        phase = Phase(name, phase_spec)
        try:
            if phase.runtime == "sync":
                out = _run_sync(phase)
            elif phase.runtime == "trio":
                import trio

                out = trio.run(_run_async, phase, _trio_gather, trio.sleep)
            else:
                out = asyncio.run(_run_async(phase, _asyncio_gather, asyncio.sleep))
        except Exception as exc:
            out = {"event": "failed", "error": f"{type(exc).__name__}: {exc}"[:2000]}
        _emit(out)
        if phase.went:
            # The harness reads the server's counters now: nothing of the next phase
            # may reach the server before it says so.
            _wait_for("next")


if __name__ == "__main__":
    main()
