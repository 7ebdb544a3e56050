"""Every bound sansmcp enforces, in one value.

Defaults follow DESIGN.md's bounds table (and, through it, the reference design).
Times are seconds; sizes are bytes.

Theory of operation
-------------------
A ``Limits`` checks itself when it is built (``__post_init__``): each field has one
entry in ``_RULES`` (below the class) saying what kind of number it is and its
minimum, and a value outside it raises :class:`~sansmcp.core.errors.CallerError`
naming the field, so no machine ever sees a NaN deadline or a negative budget.
The kinds are:

* a *time* (``float``): a finite number ``> 0`` -- ``int`` or ``float``, not ``bool``;
* a *wait* (``float``): a finite number ``>= 0`` (``0`` means "do not wait");
* a *count* (``int``): an ``int`` (not a ``bool``, not a ``float``) ``>= 1``;
* an *allowance* (``int``): an ``int`` ``>= 0`` -- retries, idle sockets, optional
  extras, where ``0`` means "none";
* a *setting* (``int``): a count that HTTP/2 also sends as a SETTINGS value
  (``max_header_bytes``, ``h2_max_concurrent_streams``), so also ``<= 2**32 - 1``.

A field added without a ``_RULES`` entry is checked by its declared type (a time
or a count, the strict kinds) and ``tests/core/test_limits.py`` fails until the entry
is written.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from .errors import CallerError

__all__ = ["Limits"]


@dataclass(frozen=True, slots=True)
class _Rule:
    """What one field may hold: an ``int`` or any real number, and its minimum."""

    integer: bool
    minimum: int
    inclusive: bool
    maximum: int | None = None  # inclusive; None: no maximum

    def describe(self) -> str:
        kind = "an int" if self.integer else "a finite number"
        text = f"{kind} {'>=' if self.inclusive else '>'} {self.minimum}"
        return text if self.maximum is None else f"{text} and <= {self.maximum:,}"

    def check(self, name: str, value: Any) -> None:
        if isinstance(value, bool) or not isinstance(value, int | float):
            got = f"a {type(value).__name__}"
        elif self.integer and not isinstance(value, int):
            got = f"the float {value!r}"
        elif not self.integer and not _finite(value):
            got = repr(value) if isinstance(value, float) else "an int too large for a float"
        elif self.maximum is not None and value > self.maximum:
            got = _shown(value)
        elif value > self.minimum or (self.inclusive and value == self.minimum):
            return
        else:
            got = _shown(value)
        raise CallerError(f"Limits.{name} must be {self.describe()}; got {got}")


def _shown(value: int | float) -> str:
    """``repr(value)``, except an int too long to print (``repr`` of an int past 4,300
    digits raises ``ValueError``): then its sign and bit length."""
    if isinstance(value, int) and abs(value) >= 10**30:
        sign = "a negative" if value < 0 else "an"
        return f"{sign} int of {value.bit_length():,} bits"
    return repr(value)


def _finite(value: int | float) -> bool:
    try:
        return math.isfinite(value)
    except OverflowError:  # an int beyond float range: no deadline can be computed from it
        return False


_TIME = _Rule(integer=False, minimum=0, inclusive=False)
_WAIT = _Rule(integer=False, minimum=0, inclusive=True)
_COUNT = _Rule(integer=True, minimum=1, inclusive=True)
_ALLOWANCE = _Rule(integer=True, minimum=0, inclusive=True)
# A count the HTTP/2 machine also sends as a SETTINGS value: 32 bits on the wire
# (RFC 9113 6.5.1), so a larger value could not be sent and must not validate.
_SETTING = _Rule(integer=True, minimum=1, inclusive=True, maximum=2**32 - 1)
# A nesting depth the schema validator recurses on (a few frames a level): capped well
# under the interpreter's recursion limit.
_DEPTH = _Rule(integer=True, minimum=1, inclusive=True, maximum=128)

# One entry per field of Limits, in field order (tests/core/test_limits.py fails when one
# is missing): a field added to Limits needs its line here.
_RULES: dict[str, _Rule] = {
    "dial_timeout": _TIME,
    "proxy_connect_timeout": _TIME,
    "connect_timeout": _TIME,
    "list_timeout": _TIME,
    "call_timeout": _TIME,
    "close_timeout": _TIME,
    "client_close_timeout": _TIME,
    "cancel_grace": _WAIT,
    "stream_end_wait": _WAIT,
    "max_response_bytes": _COUNT,
    "max_header_bytes": _SETTING,  # SETTINGS_MAX_HEADER_LIST_SIZE
    "max_responses": _COUNT,
    "max_tool_pages": _COUNT,
    "max_stream_retries": _ALLOWANCE,
    "max_call_attempts": _COUNT,
    "max_tool_bytes": _COUNT,
    "max_echo_bytes": _COUNT,
    "max_server_requests": _ALLOWANCE,
    "max_informational": _ALLOWANCE,
    "h2_max_control_frames": _COUNT,
    "h2_control_window": _TIME,
    "h2_max_small_data_frames": _COUNT,
    "h2_max_concurrent_streams": _SETTING,  # SETTINGS_MAX_CONCURRENT_STREAMS
    "h2_max_header_frames": _COUNT,
    "pool_idle_timeout": _TIME,
    "pool_max_idle_per_origin": _ALLOWANCE,
    "pool_max_sockets": _COUNT,
    "max_json_depth": _COUNT,
    "pool_max_sockets_per_origin": _COUNT,
    "max_json_values": _COUNT,
    "max_tools": _COUNT,
    "max_recorded_skips": _ALLOWANCE,
    "max_unowned_bytes_per_socket": _COUNT,
    "h1_max_small_chunks": _COUNT,
    "max_cache_entries": _ALLOWANCE,
    "max_cache_bytes": _ALLOWANCE,
    "max_compiled_schemas": _ALLOWANCE,
    "max_compiled_schema_bytes": _ALLOWANCE,
    "max_validation_steps": _COUNT,
    "max_validation_depth": _DEPTH,
    "max_notifications": _ALLOWANCE,
    "auth_timeout": _TIME,
    "max_auth_attempts": _COUNT,
    "max_auth_document_bytes": _COUNT,
    "task_timeout": _TIME,
    "min_task_poll_interval": _TIME,
    "max_task_poll_interval": _TIME,
    "max_task_polls": _COUNT,
    "max_store_value_bytes": _COUNT,
    "store_timeout": _TIME,
    "store_lease_expiry": _TIME,
    "store_load_wait": _WAIT,
}


@dataclass(frozen=True, slots=True, kw_only=True)
class Limits:
    """The bounds of one ``Client``; see the module docstring for what each may be.

    Raises ``CallerError`` (naming the field) when a value is not of its kind or is
    under its minimum; the minimum is given beside each field.

    The pool's defaults were chosen together, from ``bench/inflight.py`` (1 / 100 / 500
    / 1,000 work items in flight against one fast origin, issue 16):
    ``pool_max_sockets_per_origin = 64`` and ``pool_max_idle_per_origin = 64`` (equal,
    so a steady load never closes a socket only to dial it again), under
    ``pool_max_sockets = 256`` (four origins at their cap, so one stalling origin holds a
    quarter of the pool at most).  With 16 per origin and 8 idle (the old defaults) the
    p99 latency at 1,000 in flight was ~3x the same-runtime floor's and a quarter of the
    first sockets were closed and dialled again; at 64 it is ~2x, CPU per item stays
    within 1.5x the sequential figure and peak RSS within 50 KiB per in-flight item.
    """

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            rule = _RULES.get(field.name)
            if rule is None:  # a field without an entry: the strict kind of its type
                rule = _TIME if field.type in ("float", float) else _COUNT
            rule.check(field.name, getattr(self, field.name))

    # deadlines
    dial_timeout: float = 30.0  # > 0
    # through an egress proxy: its TCP connect and its answer to CONNECT, within the
    # dial's (the effective bound is the sooner of the two)
    proxy_connect_timeout: float = 10.0  # > 0
    connect_timeout: float = 30.0  # > 0
    list_timeout: float = 120.0  # > 0
    call_timeout: float = 120.0  # > 0
    close_timeout: float = 2.0  # > 0
    # closing an asyncio Client: how long aclose waits for its dials to end and its
    # sockets to close
    client_close_timeout: float = 1.0  # > 0
    cancel_grace: float = 1.0  # >= 0
    # after an answer arrives on an event stream, how long to wait for that stream to end
    # (so its socket can carry the next request) before moving on anyway
    stream_end_wait: float = 0.05  # >= 0
    # budgets per Conn
    max_response_bytes: int = 8 << 20  # >= 1
    max_header_bytes: int = 64 << 10  # >= 1, <= 2**32 - 1
    max_responses: int = 256  # >= 1
    # listing and calls
    max_tool_pages: int = 100  # >= 1
    max_stream_retries: int = 3  # >= 0
    max_call_attempts: int = 10  # >= 1
    max_tool_bytes: int = 256 << 10  # >= 1
    max_echo_bytes: int = 64 << 10  # >= 1
    max_server_requests: int = 16  # >= 0
    max_informational: int = 8  # >= 0
    # HTTP/2 floods: control frames per connection per window, tiny DATA frames per response
    h2_max_control_frames: int = 1000  # >= 1
    h2_control_window: float = 10.0  # > 0
    h2_max_small_data_frames: int = 10_000  # >= 1
    h2_max_concurrent_streams: int = 100  # >= 1, <= 2**32 - 1
    # frames (HEADERS + CONTINUATION) in one HTTP/2 header block; h2 itself refuses more than 64
    h2_max_header_frames: int = 32  # >= 1
    # pool
    pool_idle_timeout: float = 30.0  # > 0
    pool_max_idle_per_origin: int = 64  # >= 0 (see the class docstring)
    pool_max_sockets: int = 256  # >= 1
    # JSON parsing: nesting depth
    max_json_depth: int = 512  # >= 1
    # pool fairness: sockets (dialling or open) one origin may hold, so a stalling server
    # cannot take every socket of the pool while work for other origins waits; a value
    # at or above pool_max_sockets is clamped to pool_max_sockets - 1 (1 for a pool of
    # one socket), so one socket is always left to another origin
    pool_max_sockets_per_origin: int = 64  # >= 1
    # parsed size: what one message may become once decoded, and the listing's
    # bookkeeping.
    # JSON values in one message (a JSON body or one SSE event), counted from above by its
    # structural bytes `[ { ,` before it is decoded.  Sized for the default
    # max_response_bytes: a value costs up to ~230 bytes of heap, so the costliest accepted
    # 8 MiB body of narrow (Latin-1) text peaks at ~45 MiB (< 6 x the budget); with a
    # smaller budget, lower it in proportion (one value per 64 bytes of max_response_bytes
    # keeps that ratio).  Not bounded by it: the width of the text.  One astral character
    # in an ASCII body makes the decoded text and the string holding it 4 bytes a
    # character: an 8 MiB body of one such string peaks at +64 MiB (bench.parsed_size)
    max_json_values: int = 128_000  # >= 1
    # tool entries (valid or skipped) in one listing, all pages together; past it the
    # listing fails (ServerAnswered, reason "max_tools") before the page is validated
    max_tools: int = 10_000  # >= 1
    # skipped entries recorded with their details per listing; the rest are only counted
    max_recorded_skips: int = 100  # >= 0
    # bytes a server sends on one socket that no live exchange is charged for: HTTP/2
    # control frames, frames of unknown types, frames on streams we reset or that ended,
    # the server's preface; HTTP/1.1 bytes outside a response.  Past it the socket closes
    # and its exchanges fail (cause "budget", bound "max_unowned_bytes_per_socket")
    max_unowned_bytes_per_socket: int = 1 << 20  # >= 1
    # HTTP/1.1 chunks of under 16 body bytes in one response (each costs a parser event,
    # ~30 us: the twin of h2_max_small_data_frames, lower because one 64 KiB read holds
    # ~10,000 of them and is parsed in one step); past it the exchange fails as a budget
    h1_max_small_chunks: int = 4_096  # >= 1
    # the Client-wide cache of listings (spec ttlMs / cacheScope): entries (one per
    # tools/list page or server/discover result) and their estimated bytes; the least
    # recently used goes first; 0 turns the cache off.  Bytes are UTF-8 bytes of the
    # strings, schemas and cursors kept (plus overheads), never characters
    max_cache_entries: int = 1024  # >= 0
    max_cache_bytes: int = 16 << 20  # >= 0
    # the Client-wide compiled output schemas (a server's, kept by their bytes so the next
    # Conn does not compile them again): schemas, and the heap they hold, estimated at 128
    # bytes per source byte plus 128 per step its compile spent (sansmcp.core.mcp.compiled);
    # the least recently used goes first, a schema whose estimate is over the bytes alone
    # is not kept; 0 keeps none.  The bytes bound one Conn's too (beside the one in use).
    max_compiled_schemas: int = 64  # >= 0
    max_compiled_schema_bytes: int = 16 << 20  # >= 0
    # structuredContent against outputSchema: steps one compilation, and one check of one
    # result, may take (a subschema applied, a keyword checked, a value compared, a
    # pattern thread advanced by one character; ~0.2-0.5 us each), past which the call
    # fails (ServerAnswered, reason "validation_budget").  A typical result takes ~10-100
    max_validation_steps: int = 500_000  # >= 1
    # schemas applied inside one another (and nested, when compiled) before the same
    max_validation_depth: int = 64  # >= 1, <= 128
    # notifications (progress, log messages, list-changed...) delivered per request; past
    # it they are dropped and counted (Conn.notifications_dropped), never fatal
    max_notifications: int = 1_000  # >= 0
    # OAuth (Config.oauth): all machine-to-machine fetches of one authorization (the
    # embedder's own authorization step is outside it), authorizations per operation
    # (step-up, re-authorization), bytes of one metadata / registration / token document
    # (its body's bytes on the wire: chunked or DATA-frame framing counts too)
    auth_timeout: float = 30.0  # > 0
    max_auth_attempts: int = 3  # >= 1
    max_auth_document_bytes: int = 64 << 10  # >= 1
    # tasks (Config(tasks=True)): one call_tool as a whole, a task polled to its end
    # included (it replaces call_timeout there; each request stays within call_timeout,
    # and a task given up is sent tasks/cancel); the pause between two polls,
    # the server's pollIntervalMs clamped into [min, max] (the minimum wins if they cross;
    # 0, negative or absurd values land on a bound); tasks/get requests of one task
    task_timeout: float = 600.0  # > 0
    min_task_poll_interval: float = 0.1  # > 0
    max_task_poll_interval: float = 30.0  # > 0
    max_task_polls: int = 200  # >= 1
    # the shared store (issue 28; sansmcp.core.store): bytes of one stored value (a
    # larger record is not stored, a larger value read back is a miss), the deadline of
    # each store operation, how long a lease holds (a worker killed while holding one
    # delays the others by at most this), and how long a worker waits for another's load
    # of a cold key before it loads it itself (0: it never waits)
    max_store_value_bytes: int = 1 << 20  # >= 1
    store_timeout: float = 1.0  # > 0
    store_lease_expiry: float = 15.0  # > 0
    store_load_wait: float = 2.0  # >= 0
