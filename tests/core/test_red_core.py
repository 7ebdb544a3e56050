"""Red-team cases in the pure core (issue 10, adversarial review): promises tried from outside.

Each test names the attack; the real-socket twins are in ``tests/hostile`` (the
``red_*`` cases and ``test_red.py``).
"""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sansmcp.core.config import Config, conn_settings
from sansmcp.core.errors import CallerError
from sansmcp.core.fieldvalue import echoable
from sansmcp.core.limits import Limits
from sansmcp.core.mcp import ToolCalled
from sansmcp.core.sse import SseParser
from sansmcp.core.wire.h2 import H2Connection

from .fakemcp import Driver, FakeServer


def test_a_long_event_id_is_decoded_once_not_once_per_dispatch() -> None:
    """A 400 KB ``id:`` line then 500,000 empty lines made every empty dispatch decode the
    id again (8-16 s of CPU on one loop through real sockets); the decoded id is now the
    same object until another ``id`` line arrives."""
    parser = SseParser(max_event_bytes=8 << 20)
    assert parser.feed(b"id: " + b"x" * 400_000 + b"\n\n") == []
    first = parser.last_event_id
    assert first is not None and len(first) == 400_000
    for _ in range(3):
        assert parser.feed(b"\n" * 10_000) == []
        assert parser.last_event_id is first
    events = parser.feed(b"data: 1\n\n")
    assert [event.id for event in events] == [first] and events[0].id is first
    parser.feed(b"id: y\n\n")
    assert parser.last_event_id == "y"
    parser.feed(b"id\n\n")  # an empty id clears it, even right after a kept one
    assert parser.last_event_id is None


def test_an_empty_id_line_after_the_start_leaves_the_id_absent() -> None:
    parser = SseParser(max_event_bytes=1024)
    parser.feed(b"id:\ndata: a\n\n")
    assert parser.last_event_id is None
    parser.finish()  # a resumption re-encodes the kept id: still absent
    assert parser.feed(b"data: b\n\n")[0].id is None


class _CountingStr(str):
    encodes = 0

    def encode(self, encoding: str = "utf-8", errors: str = "strict") -> bytes:
        type(self).encodes += 1
        return super().encode(encoding, errors)


def test_echoable_refuses_an_over_long_value_before_copying_it() -> None:
    """The id check ran on every body chunk and copied the whole id first: 10,000 one-byte
    chunks after a 16 KiB id cost ~6.5 s.  An id over the limit is refused by its length."""
    _CountingStr.encodes = 0
    assert echoable(_CountingStr("x" * 100_000), 64) is None
    assert _CountingStr.encodes == 0
    assert echoable(_CountingStr("x" * 64), 64) == b"x" * 64
    assert _CountingStr.encodes == 1
    assert echoable(b"x" * 65, 64) is None
    assert echoable("", 64) is None and echoable(b"", 64) is None


def test_echoable_checks_every_inner_byte_at_c_speed() -> None:
    for bad in (b"a\x00b", b"a\x7fb", b"a\xffb", b"a\rb", b"a\nb"):
        assert echoable(bad, 64) is None, bad
    assert echoable(b"a b\tc", 64) == b"a b\tc"
    assert echoable(b"a b", 64, spaces=False) is None
    assert echoable(b"a\tb", 64, spaces=False) is None
    assert echoable("a\u00e9b", 64) is None


def test_a_count_sent_as_an_http2_setting_must_fit_32_bits() -> None:
    """``Limits(h2_max_concurrent_streams=2**31)`` and ``max_header_bytes=2**32`` validated,
    then the HTTP/2 machine's first SETTINGS frame raised ``struct.error`` out of
    ``Client.connect`` (both backends).  They are refused at construction now, and the
    largest accepted value builds a machine whose preface carries it."""
    for name in ("max_header_bytes", "h2_max_concurrent_streams"):
        with pytest.raises(CallerError) as caught:
            Limits(**{name: 2**32})
        assert str(caught.value) == (
            f"Limits.{name} must be an int >= 1 and <= 4,294,967,295; got 4294967296"
        )
    top = Limits(max_header_bytes=2**32 - 1, h2_max_concurrent_streams=2**32 - 1)
    machine = H2Connection(limits=top, now=0.0)
    preface = machine.data_to_send()
    assert preface.startswith(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
    assert preface.count(b"\xff\xff\xff\xff") >= 2  # both settings, as 32-bit values


def test_a_huge_negative_int_is_refused_as_caller_error_not_value_error() -> None:
    """``repr`` of an int past 4,300 digits raises ``ValueError``; the refusal message
    used it, so ``Limits(max_tools=-(10**5000))`` raised ``ValueError``."""
    for name, value in (("max_tools", -(10**5000)), ("max_stream_retries", -(10**5000))):
        with pytest.raises(CallerError) as caught:
            Limits(**{name: value})
        assert str(caught.value).endswith(f"got a negative int of {value.bit_length():,} bits")
    with pytest.raises(CallerError) as caught:
        Limits(max_header_bytes=10**5000)
    assert str(caught.value).endswith(f"got an int of {(10**5000).bit_length():,} bits")
    with pytest.raises(CallerError, match=r"got -5$"):
        Limits(max_tools=-5)


@pytest.mark.parametrize("arguments", ['{"text": "hi"}', None, {"text": "hi"}, 7, ["{}"]])
def test_call_arguments_of_another_type_are_a_caller_error_and_the_conn_stays_usable(
    arguments: Any,
) -> None:
    """``call_tool("echo", '{}')`` (a str) passed the JSON check, raised ``TypeError`` while
    the request was built, and left the Conn busy: every later operation, close included,
    raised ``RuntimeError`` (both backends)."""
    server = FakeServer()
    driver = Driver(server)
    driver.ok(driver.connect())
    sent = len(server.requests)
    with pytest.raises(CallerError, match="tool arguments must be bytes"):
        driver.machine.call_tool("echo", arguments, now=0.0)
    assert not driver.machine.busy
    assert len(server.requests) == sent  # no I/O for the refused call
    outcome = driver.ok(driver.call("echo", b'{"text": "hi"}'))
    assert isinstance(outcome, ToolCalled)


@pytest.mark.parametrize("arguments", [bytearray(b'{"text":"hi"}'), memoryview(b'{"text":"hi"}')])
def test_call_arguments_may_be_any_bytes_like(arguments: Any) -> None:
    server = FakeServer()
    driver = Driver(server)
    driver.ok(driver.connect())
    outcome = driver.ok(driver.call("echo", arguments))
    assert isinstance(outcome, ToolCalled)
    call = next(b for b in server.bodies if isinstance(b, dict) and b.get("method") == "tools/call")
    assert call["params"]["arguments"] == {"text": "hi"}


def _settings(config: Config, **kwargs: Any) -> Any:
    return conn_settings(
        config,
        client_info=kwargs.get("client_info"),
        capabilities=kwargs.get("capabilities"),
        era_hint=None,
    )


URL_OK = "http://127.0.0.1:9/mcp"


@pytest.mark.parametrize(
    ("config", "extra", "message"),
    [
        # h11 refused these in the middle of connect (LocalProtocolError, a RuntimeError)
        (Config(url=URL_OK, headers={"X-A": " a"}), {}, "whitespace at the start or end"),
        (Config(url=URL_OK, headers={"X-A": "a\t"}), {}, "whitespace at the start or end"),
        (Config(url=URL_OK, headers={"X-A": "a\x01b"}), {}, "control character"),
        (Config(url=URL_OK, headers={"X-A": "a\x7fb"}), {}, "control character"),
        # AttributeError / TypeError before
        (Config(url=URL_OK, headers={"X-A": 5}), {}, "must be str"),  # type: ignore[dict-item]
        (Config(url=URL_OK, headers={5: "a"}), {}, "must be str"),  # type: ignore[dict-item]
        (Config(url=URL_OK, bearer_token=5), {}, "must be a str"),  # type: ignore[arg-type]
        # RecursionError before
        (Config(url=URL_OK, tool_schemas={"t": b"[" * 100_000}), {}, "is not JSON"),
        # JsonError in the middle of the operation before, leaving the Conn busy for good
        (Config(url=URL_OK, meta={"x": math.nan}), {}, "Config.meta cannot be sent as JSON"),
        (Config(url=URL_OK, meta={"x": {1}}), {}, "Config.meta cannot be sent as JSON"),
        (Config(url=URL_OK), {"client_info": {"name": {1}}}, "client_info cannot be sent"),
        (Config(url=URL_OK), {"capabilities": {"x": math.inf}}, "capabilities cannot be sent"),
    ],
)
def test_config_mistakes_are_caller_errors_before_any_io(
    config: Config, extra: dict[str, Any], message: str
) -> None:
    with pytest.raises(CallerError, match=message):
        _settings(config, **extra)


def test_config_values_that_are_fine_stay_fine() -> None:
    made = _settings(Config(url=URL_OK, headers={"X-A": "a b\tc", "X-B": ""}, meta={"k": [1]}))
    assert made.headers == ((b"x-a", b"a b\tc"), (b"x-b", b""))


_LINES = st.one_of(
    st.builds(
        lambda v: b"id: " + v, st.sampled_from([b"", b"a", b"b", b"x" * 50, b"\xff", b"a\x00"])
    ),
    st.just(b"id"),
    st.builds(lambda v: b"data: " + v, st.sampled_from([b"", b"1", b"\xe2\x82"])),
    st.just(b""),
    st.just(b": comment"),
    st.builds(lambda v: b"retry: " + v, st.sampled_from([b"5", b"x"])),
)


def _reference(lines: list[bytes]) -> list[tuple[str, str | None]]:
    """WHATWG dispatch, written out plainly: (data, last id) of each non-empty event."""
    out: list[tuple[str, str | None]] = []
    data: list[bytes] = []
    id_buffer = b""
    for line in lines:
        name, _, value = line.partition(b":")
        value = value[1:] if value.startswith(b" ") else value
        if not line:
            last = id_buffer.decode("utf-8", "replace") or None
            text = b"\n".join(data).decode("utf-8", "replace") if data else ""
            data = []
            if text:
                out.append((text, last))
        elif line.startswith(b":"):
            continue
        elif name == b"data":
            data.append(value)
        elif name == b"id" and b"\x00" not in value:
            id_buffer = value
    return out


@given(st.lists(_LINES, max_size=40), st.integers(min_value=1, max_value=7))
def test_the_id_cache_changes_nothing_the_parser_reports(lines: list[bytes], step: int) -> None:
    """Property (red team, for the once-per-id-line decode): however the stream is split,
    the events and their ids are WHATWG's -- the cache changes nothing that is reported."""
    stream = b"".join(line + b"\n" for line in lines) + b"\n"
    parser = SseParser(max_event_bytes=1 << 20)
    events = []
    for start in range(0, len(stream), step):
        events += parser.feed(stream[start : start + step])
    assert [(event.data, event.id) for event in events] == _reference([*lines, b""])
