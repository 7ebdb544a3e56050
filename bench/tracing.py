"""Tracing off vs on: ``python -m bench.tracing URL [--quick]``.

The 10-tool modern work item (asyncio adapter, warm pool and era cache) with
``telemetry`` off, then on (``sansmcp.otel.Telemetry`` over the real
``opentelemetry-sdk``: a tracer provider exporting to memory through a simple span
processor, a meter provider with an in-memory reader, an active span per item so the
trace context is propagated), alternated in blocks in this one process.  CPU is
``time.process_time`` per item (waiting on the server costs nothing); prints one JSON
line with the medians of the blocks and their ratio.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import sys
import time
from typing import Any

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from sansmcp import Config
from sansmcp.io_adapters.asyncio import Client
from sansmcp.otel import Telemetry

ARGS = b'{"text": "hi"}'


async def _block(client: Client, config: Config, n: int, tracer: Any) -> float:
    """CPU seconds per work item over ``n`` items."""
    start = time.process_time()
    for _ in range(n):
        if tracer is None:
            async with client.connect(config) as conn:
                await conn.list_tools()
                await conn.call_tool("echo", ARGS)
        else:
            with tracer.start_as_current_span("work item"):
                async with client.connect(config) as conn:
                    await conn.list_tools()
                    await conn.call_tool("echo", ARGS)
    return (time.process_time() - start) / n


def main() -> None:
    url = sys.argv[1]
    quick = "--quick" in sys.argv
    blocks, n = (4, 25) if quick else (10, 50)
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    reader = InMemoryMetricReader()
    telemetry = Telemetry(
        tracer_provider=tracer_provider, meter_provider=MeterProvider(metric_readers=[reader])
    )
    tracer = tracer_provider.get_tracer("bench")
    config = Config(url=url)

    async def run() -> dict[str, Any]:
        off: list[float] = []
        on: list[float] = []
        async with (
            Client(allow_loopback=True) as plain,
            Client(allow_loopback=True, telemetry=telemetry) as traced,
        ):
            await _block(plain, config, 10, None)  # warm-up: pools, era caches, imports
            await _block(traced, config, 10, tracer)
            for _ in range(blocks):
                off.append(await _block(plain, config, n, None))
                on.append(await _block(traced, config, n, tracer))
                exporter.clear()
        off_us = 1e6 * statistics.median(off)
        on_us = 1e6 * statistics.median(on)
        return {
            "items_per_block": n,
            "blocks": blocks,
            "off_us_per_item": off_us,
            "on_us_per_item": on_us,
            "on_over_off": on_us / off_us,
        }

    print(json.dumps(asyncio.run(run())), flush=True)


if __name__ == "__main__":
    main()
