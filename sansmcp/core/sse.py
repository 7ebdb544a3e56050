"""An incremental, bounded ``text/event-stream`` parser (WHATWG rules).

Theory of operation
-------------------
:class:`SseParser` takes the body bytes of one SSE response in whatever chunks the
HTTP layer delivers (:meth:`SseParser.feed`) and returns the events completed by
those bytes.  The same bytes give the same events however they are split.

Lines end with CRLF, LF or CR.  A CR that ends one chunk is remembered, and an LF
that starts the next chunk is swallowed, so a CRLF split across chunks is one line
end.  A UTF-8 byte order mark at the very start of the stream is skipped (even when
it arrives split).  Each complete line is interpreted at once (WHATWG "interpret
as an event stream"):

* an empty line dispatches the pending event: the last event id in force is
  updated from the id buffer; if the data buffer is empty nothing is returned,
  otherwise its trailing LF is removed and, **if the data is then non-empty**, an
  :class:`SseEvent` is returned.  An event whose data is ``""`` (a 2025-11-25
  priming event ``id: x`` / ``data:``) is *not* returned (WHATWG would dispatch
  it; MCP says to skip it) -- it only updates :attr:`SseParser.last_event_id`;
* a line starting with ``:`` is a comment (``:`` keep-alives included);
* ``field:value`` (one leading space of the value dropped) or ``field`` alone
  (empty value): ``data`` appends the value and an LF to the data buffer;
  ``event`` sets the event type; ``id`` sets the id buffer unless the value
  contains NUL (an empty ``id:`` clears it); ``retry`` sets :attr:`retry_ms`
  when the value is ASCII digits only (saturating at 10**18 - 1); other fields
  are ignored.

Values are decoded from UTF-8 with ``errors="replace"`` (line ends are ASCII, so
this is what the WHATWG stream decoder produces): field values one line at a time,
the data buffer -- kept as bytes, so many short ``data:`` lines cost their bytes and
not a string object each -- once per event, and the id buffer once per ``id`` line (not
per dispatch: a long id followed by many empty lines would otherwise cost the id's
length per line).

Bounds.  The parser holds, for the event being assembled, the pending
(incomplete) line, the data buffer (value bytes plus one per data line) and the
event type.  :attr:`SseParser.buffered` is that sum, and it never exceeds
``max_event_bytes``: :meth:`feed` raises :class:`SseError` as soon as a fed byte
would push it over, before buffering anything of that chunk past the previous
line end.  (The last event id, at most one line, is kept across events and is not
counted.)  Work is O(bytes fed): the pending line is a ``bytearray`` appended to,
and the data buffer is decoded once per event.  A chunk that cannot cross the bound
whatever it holds (``buffered`` + its length <= ``max_event_bytes``, the usual case)
is split into lines at C speed with ``bytes.splitlines``; otherwise lines are found
one compiled-regex search at a time, checking the bound before each.

After :class:`SseError` the parser is broken: every later :meth:`feed` raises
``SseError`` again.  :meth:`finish` (end of body) discards a partial event and leaves the parser
ready for the next stream of the same logical event source (a resumption), with
:attr:`last_event_id` and :attr:`retry_ms` kept.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .jsonvalue import decoded_size

__all__ = ["SseError", "SseEvent", "SseParser"]

_BOM = b"\xef\xbb\xbf"
_LINE_END = re.compile(rb"[\r\n]")
_RETRY_MAX = 10**18 - 1


@dataclass(frozen=True, slots=True, kw_only=True)
class SseEvent:
    """One dispatched event with non-empty data."""

    data: str
    """The data lines joined with ``"\\n"`` (no trailing newline)."""
    event: str | None
    """The ``event`` field, or ``None`` when absent or empty."""
    id: str | None
    """The last event id in force when this event was dispatched (``None`` if none)."""


class SseError(ValueError):
    """One SSE line or event is larger than the parser may hold.

    ``limit`` is ``max_event_bytes``; ``observed`` the bytes the event would have
    held with this chunk's bytes up to the next line end (or the chunk's end).
    ``events`` holds the events the same :meth:`SseParser.feed` call completed
    before the bound was crossed (so no event is lost to the chunking: fed byte
    by byte, those would have been returned by earlier calls).
    """

    def __init__(
        self,
        message: str,
        *,
        limit: int,
        observed: int,
        events: tuple[SseEvent, ...] = (),
        reason: str = "event",
    ) -> None:
        super().__init__(message)
        self.limit = limit
        self.observed = observed
        self.events = events
        self.reason = reason  # "event": bytes over max_event_bytes; "text": decoded size


class SseParser:
    """Incremental ``text/event-stream`` parser; see the module docstring."""

    def __init__(self, *, max_event_bytes: int) -> None:
        if max_event_bytes < 1:
            raise ValueError(f"max_event_bytes must be >= 1, got {max_event_bytes}")
        self._max = max_event_bytes
        # what one event's decoded text may occupy: 3 x its bytes' bound, so the text and
        # the value a consumer builds from it stay within 6 x (a character beyond U+FFFF
        # makes the whole text 4 bytes a character)
        self._max_text = 3 * max_event_bytes
        self._line = bytearray()
        self._data = bytearray()  # each data line's value and an LF, decoded at dispatch
        self._event_type = b""
        self._id_buffer = b""
        self._last_id: str | None = None
        self._last_id_from: bytes | None = None  # the id buffer _last_id was decoded from
        self._retry_ms: int | None = None
        self._skip_lf = False
        self._at_start = True
        self._head = b""
        self._error: tuple[str, int] | None = None  # (message, observed) once broken

    @property
    def last_event_id(self) -> str | None:
        """The last event id as of the last dispatch (blank line); ``None`` if none/empty."""
        return self._last_id

    @property
    def retry_ms(self) -> int | None:
        """The last valid ``retry`` value in milliseconds, if any arrived."""
        return self._retry_ms

    @property
    def buffered(self) -> int:
        """Bytes held for the event being assembled; always ``<= max_event_bytes``."""
        return len(self._head) + len(self._line) + len(self._data) + len(self._event_type)

    def feed(self, data: bytes) -> list[SseEvent]:
        """Consume body bytes; return the events they complete, in order.

        Raises :class:`SseError` when a line or an event outgrows
        ``max_event_bytes``; the events this call completed before that are on
        the error's ``events``.
        """
        events: list[SseEvent] = []
        try:
            self._feed(data, events)
        except SseError as exc:
            exc.events = tuple(events)
            raise
        return events

    def _feed(self, data: bytes, events: list[SseEvent]) -> None:
        if self._error is not None:
            message, observed = self._error
            raise SseError(message, limit=self._max, observed=observed)
        if self._at_start:
            data = self._strip_bom(data)
        end = len(data)
        pos = 0
        if self._skip_lf and end:
            self._skip_lf = False
            if data[0] == 0x0A:
                pos = 1
        last = max(data.rfind(b"\n", pos), data.rfind(b"\r", pos))
        if last >= 0 and self.buffered + (end - pos) <= self._max:
            self._feed_lines(data, pos, last, events)
            return
        search = _LINE_END.search
        while pos < end:
            match = search(data, pos)
            if match is None:
                self._check(end - pos)
                self._line += data[pos:end]
                break
            eol = match.start()
            self._check(eol - pos)
            if self._line:
                self._line += data[pos:eol]
                line = bytes(self._line)
                self._line.clear()
            else:
                line = data[pos:eol]
            pos = eol + 1
            if data[eol] == 0x0D:
                if pos == end:
                    self._skip_lf = True
                elif data[pos] == 0x0A:
                    pos += 1
            event = self._process(line)
            if event is not None:
                events.append(event)

    def _feed_lines(self, data: bytes, pos: int, last: int, events: list[SseEvent]) -> None:
        """The fast path: ``data[pos:]`` cannot cross the bound, whatever its lines hold.

        (A line of ``n`` bytes adds at most ``n + 1`` to :attr:`buffered` and takes at
        least ``n + 1`` bytes with its line end, so ``buffered + len(data[pos:])`` bounds
        every intermediate figure.)  Its complete lines are split at C speed
        (``bytes.splitlines`` splits on CRLF, LF and CR, exactly the SSE line ends).
        """
        end = len(data)
        lines = data[pos : last + 1].splitlines()
        if self._line:
            self._line += lines[0]
            lines[0] = bytes(self._line)
            self._line.clear()
        if data[last] == 0x0D and last + 1 == end:
            self._skip_lf = True  # a CRLF may be split across chunks
        process = self._process
        for line in lines:
            event = process(line)
            if event is not None:
                events.append(event)
        if last + 1 < end:
            self._line += data[last + 1 : end]

    def finish(self) -> None:
        """End of the body: discard any partial line and event (WHATWG).

        The parser is then ready for a new stream (BOM handling included); the
        last event id and retry value are kept.
        """
        self._line.clear()
        self._data.clear()
        self._event_type = b""
        self._skip_lf = False
        self._at_start = True
        self._head = b""
        id_text = self._last_id or ""
        self._id_buffer = id_text.encode("utf-8", "surrogatepass")

    # -- internals ---------------------------------------------------------

    def _strip_bom(self, data: bytes) -> bytes:
        head = self._head + data
        if len(head) < len(_BOM) and _BOM.startswith(head):
            self._check(len(data))
            self._head = head
            return b""
        self._at_start = False
        self._head = b""
        if head.startswith(_BOM):
            return head[len(_BOM) :]
        return head

    def _check(self, incoming: int) -> None:
        held = self.buffered + incoming
        if held > self._max:
            message = (
                f"SSE event is {held:,} bytes (pending line, data and event type) "
                f"before it ends; the limit is {self._max:,} bytes"
            )
            self._error = (message, held)
            raise SseError(message, limit=self._max, observed=held)

    def _process(self, line: bytes) -> SseEvent | None:
        if not line:
            return self._dispatch()
        if line[0] == 0x3A:  # ":" comment
            return None
        colon = line.find(b":")
        if colon < 0:
            name, value = line, b""
        else:
            name = line[:colon]
            value = line[colon + 1 :]
            if value[:1] == b" ":
                value = value[1:]
        if name == b"data":
            self._data += value
            self._data.append(0x0A)
        elif name == b"event":
            self._event_type = value
        elif name == b"id":
            if b"\x00" not in value:
                self._id_buffer = value
        elif name == b"retry" and value.isdigit():
            digits = value.lstrip(b"0")
            self._retry_ms = _RETRY_MAX if len(digits) > 18 else int(digits or b"0")
        return None

    def _dispatch(self) -> SseEvent | None:
        if self._id_buffer is not self._last_id_from:  # decoded once per id line, not per event
            self._last_id_from = self._id_buffer
            self._last_id = self._id_buffer.decode("utf-8", "replace") or None
        event_type = self._event_type.decode("utf-8", "replace") or None
        self._event_type = b""
        if not self._data:
            return None
        # One decode per event: the LFs between lines are ASCII, so this is what decoding
        # each line on its own gives (an invalid sequence never spans a line end).
        del self._data[-1]  # the last LF (no copy)
        held = len(self._data)
        if 4 * held > self._max_text and (size := decoded_size(self._data)) > self._max_text:
            message = (
                f"an event of {held:,} bytes would decode to up to {size:,} bytes (characters"
                f" beyond U+FFFF take 4 bytes each); the limit is {self._max_text:,}"
            )
            self._error = (message, size)
            raise SseError(message, limit=self._max_text, observed=size, reason="text")
        data = self._data.decode("utf-8", "replace")
        self._data.clear()
        if not data:
            return None
        return SseEvent(data=data, event=event_type, id=self._last_id)
