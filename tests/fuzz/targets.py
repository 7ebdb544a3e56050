"""The fuzz targets: one function per parser, each checking "only documented outcomes".

Each target takes one input (bytes) and raises ``AssertionError`` -- or lets any other
exception out -- only for an outcome the code under test does not document:

* ``h1`` / ``h2``: the wire machines (``sansmcp.core.wire``) fed the input as server
  bytes, whole and in pieces the input's first bytes choose.  Only
  ``sansmcp.core.http`` events come out; a failure is ``ConnectionFailed`` with a
  documented cause, and a budget failure names its bound, limit and an observed figure
  past it; one terminal event per exchange and nothing after it; every byte received is
  charged once (``charged + unowned + unsettled``); ``buffered_bytes()`` stays bounded;
  the pieces give the same heads, body and end as the whole.
* ``sse``: :class:`~sansmcp.core.sse.SseParser` -- only ``SseEvent`` values or
  ``SseError`` (with its limit and an observed figure past it); ``buffered`` never past
  ``max_event_bytes``; the same events however the input is split (up to an error).
* ``json``: :func:`~sansmcp.core.jsonvalue.parse_json` raises only ``JsonError`` (with
  a documented reason); a value it returns holds at most ``value_bound`` values and
  nests no deeper than ``max_depth``.
* ``regex``: :func:`~sansmcp.core.schema.regex.compile_pattern` and ``Program.search``
  raise only ``PatternError`` / ``BudgetExhausted``, and a search spends at most
  ``2 * len(program) * (len(text) + 1) + 1 + len(program) // 16`` steps (the
  linear-time promise, as ``regex.py`` states it).

The same functions replay the saved inputs under ``tests/fuzz/corpus/<target>/`` in
``make test`` (``test_corpus.py``) and are what ``make fuzz`` drives with atheris
(``run.py``).  Nothing here imports atheris.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sansmcp.core.errors import ConnectionFailed
from sansmcp.core.http import (
    DataReceived,
    ExchangeEvent,
    ExchangeFailed,
    HttpRequest,
    InformationalReceived,
    ResponseEnded,
    ResponseReceived,
    TrailersReceived,
    charged_bytes,
)
from sansmcp.core.jsonvalue import JsonError, parse_json, value_bound
from sansmcp.core.limits import Limits
from sansmcp.core.schema.budget import Budget, BudgetExhausted
from sansmcp.core.schema.regex import PatternError, compile_pattern
from sansmcp.core.sse import SseError, SseEvent, SseParser
from sansmcp.core.wire.h1 import H1Connection
from sansmcp.core.wire.h2 import H2Connection

__all__ = ["TARGETS"]

# the causes the wire machines document (``sansmcp.core.wire``)
_CAUSES = {"framing", "budget", "reset", "refused"}
_EVENTS = (
    DataReceived,
    ExchangeFailed,
    InformationalReceived,
    ResponseEnded,
    ResponseReceived,
    TrailersReceived,
)
_REQUESTS = [
    HttpRequest(method=b"POST", scheme=b"http", authority=b"h:1", target=b"/mcp", body=b"{}"),
    HttpRequest(method=b"GET", scheme=b"http", authority=b"h:1", target=b"/mcp"),
    HttpRequest(method=b"HEAD", scheme=b"http", authority=b"h:1", target=b"/"),
]
# small bounds, so that every budget is within a fuzzer's reach
_LIMITS = [
    Limits(),
    Limits(
        max_header_bytes=300,
        max_informational=2,
        h1_max_small_chunks=6,
        h2_max_control_frames=8,
        h2_max_small_data_frames=6,
        h2_max_header_frames=3,
        max_unowned_bytes_per_socket=2000,
    ),
]


def _pieces(data: bytes, seed: int) -> list[bytes]:
    """``data`` cut at points a seed byte chooses: whole, byte by byte, or strides."""
    if seed % 4 == 0:
        return [data]
    if seed % 4 == 1:
        return [data[i : i + 1] for i in range(len(data))]
    stride = seed // 4 + 1
    return [data[i : i + stride] for i in range(0, len(data), stride)]


def _summary(events: list[ExchangeEvent]) -> list[Any]:
    """What must not depend on how reads were cut: heads, body bytes, trailers, end."""
    out: list[Any] = []
    body: dict[int, bytes] = {}
    for event in events:
        if isinstance(event, DataReceived):
            body[event.exchange_id] = body.get(event.exchange_id, b"") + event.data
            continue
        if isinstance(event, ExchangeFailed):
            out.append((event.exchange_id, "failed", event.error.cause, event.error.bound))
        elif isinstance(event, ResponseEnded):
            out.append((event.exchange_id, "ended", body.pop(event.exchange_id, b"")))
        else:
            out.append(event)
    return out


def _drive(wire: Any, pieces: list[bytes], eof: bool, limits: Limits) -> list[ExchangeEvent]:
    """Feed ``pieces`` (then EOF), draining events after each; check every invariant."""
    events: list[ExchangeEvent] = []
    fed = charged = 0
    ended: set[int] = set()
    bound = 2 * limits.max_header_bytes + 2 * (1 << 20) + 70_000

    def take() -> None:
        nonlocal charged
        while (event := wire.next_event()) is not None:
            assert isinstance(event, _EVENTS), event
            assert event.exchange_id not in ended, f"an event after the end: {event}"
            if isinstance(event, ResponseEnded | ExchangeFailed):
                ended.add(event.exchange_id)
            if isinstance(event, ExchangeFailed):
                error = event.error
                assert type(error) is ConnectionFailed and error.cause in _CAUSES, error
                if error.cause == "budget":
                    assert error.bound is not None and error.limit is not None
                    assert error.observed is not None and error.observed > error.limit, error
            charged += charged_bytes(event)
            events.append(event)
        assert fed == charged + wire.unowned_bytes + wire.unsettled_bytes, "a byte lost"

    for piece in pieces:
        fed += len(piece)
        wire.receive_data(piece, now=0.0)
        assert wire.buffered_bytes() <= bound + len(piece), wire.buffered_bytes()
        take()
        wire.data_to_send()
    if eof:
        wire.receive_eof(now=1.0)
        take()
        assert wire.is_broken
    return events


def h1(data: bytes) -> None:
    if len(data) < 2:
        return
    mode, seed, body = data[0], data[1], data[2:]
    request = _REQUESTS[mode % 3]
    limits = _LIMITS[mode // 3 % 2]
    eof = bool(mode & 0x10)
    summaries = []
    for pieces in ([body], _pieces(body, seed)):
        wire = H1Connection(limits=limits, now=0.0)
        wire.start(1, request, now=0.0)
        wire.data_to_send()
        summaries.append(_summary(_drive(wire, pieces, eof, limits)))
    assert summaries[0] == summaries[1], "the split changed the outcome"


_SETTINGS_FRAME = b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"


def h2(data: bytes) -> None:
    if len(data) < 2:
        return
    mode, seed, body = data[0], data[1], data[2:]
    limits = _LIMITS[mode % 2]
    eof = bool(mode & 0x10)
    if mode & 0x20:  # the server's SETTINGS first, so that the fuzzer need not find it
        body = _SETTINGS_FRAME + body
    summaries = []
    for pieces in ([body], _pieces(body, seed)):
        wire = H2Connection(limits=limits, now=0.0)
        for exchange in range(1 + (mode >> 2 & 1)):  # streams 1 (and 3)
            wire.start(exchange, _REQUESTS[(mode >> 3 & 1) + exchange % 2], now=0.0)
        wire.data_to_send()
        summaries.append(_summary(_drive(wire, pieces, eof, limits)))
    assert summaries[0] == summaries[1], "the split changed the outcome"


def _sse_run(parser: SseParser, pieces: list[bytes], limit: int) -> tuple[list[SseEvent], bool]:
    events: list[SseEvent] = []
    for piece in pieces:
        try:
            got = parser.feed(piece)
        except SseError as exc:
            assert exc.limit in (limit, 3 * limit), exc
            assert exc.observed > exc.limit, exc
            events += exc.events
            return events, True
        assert all(type(e) is SseEvent for e in got)
        assert parser.buffered <= limit, (parser.buffered, limit)
        events += got
    return events, False


def sse(data: bytes) -> None:
    if not data:
        return
    seed, body = data[0], data[1:]
    limit = (64, 1024, 1 << 20)[seed % 3]
    whole, failed = _sse_run(SseParser(max_event_bytes=limit), [body], limit)
    split, split_failed = _sse_run(SseParser(max_event_bytes=limit), _pieces(body, seed), limit)
    if not failed and not split_failed:
        assert whole == split, "the split changed the events"
    else:  # the events before the bound was crossed: one a prefix of the other
        shorter = min(len(whole), len(split))
        assert whole[:shorter] == split[:shorter]


_REASONS = {"utf8", "syntax", "constant", "number", "depth", "values", "text"}


def _values_and_depth(value: Any) -> tuple[int, int]:
    if isinstance(value, dict):
        inner = [_values_and_depth(v) for v in value.values()]
    elif isinstance(value, list):
        inner = [_values_and_depth(v) for v in value]
    else:
        return 1, 0
    return 1 + sum(n for n, _ in inner), 1 + max((d for _, d in inner), default=0)


def json(data: bytes) -> None:
    if not data:
        return
    seed, text = data[0], data[1:]
    max_depth = (4, 64, 512)[seed % 3]
    max_values = (None, 16, 128_000)[seed // 3 % 3]
    max_text = (None, 64)[seed // 9 % 2]
    bound = value_bound(text)
    try:
        value = parse_json(text, max_depth=max_depth, max_values=max_values,
                           max_text_bytes=max_text)  # fmt: skip
    except JsonError as exc:
        assert exc.reason in _REASONS, exc.reason
        if exc.reason == "values":
            assert max_values is not None and exc.observed == bound > max_values
        return
    values, depth = _values_and_depth(value)
    assert values <= bound, (values, bound)
    assert depth <= max_depth, (depth, max_depth)
    assert max_values is None or bound <= max_values


def regex(data: bytes) -> None:
    if not data:
        return
    cut = data.find(b"\x00")
    pattern_bytes, text_bytes = (data, b"") if cut < 0 else (data[:cut], data[cut + 1 :])
    pattern = pattern_bytes.decode("utf-8", "replace")
    text = text_bytes.decode("utf-8", "replace")
    try:
        program = compile_pattern(pattern, Budget(100_000))
    except (PatternError, BudgetExhausted):
        return
    size = len(program.ops)
    steps = 2 * size * (len(text) + 1) + 1 + size // 16  # regex.py's documented bound
    budget = Budget(steps)
    result = program.search(text, budget)  # BudgetExhausted here breaks the promise
    assert isinstance(result, bool)
    assert budget.spent <= steps


TARGETS: dict[str, Callable[[bytes], None]] = {
    "h1": h1,
    "h2": h2,
    "sse": sse,
    "json": json,
    "regex": regex,
}
