"""A connection-specific header in ``Config.headers`` is the caller's mistake on both wires.

``Connection``, ``Keep-Alive``, ``Proxy-Connection``, ``Transfer-Encoding``, ``Upgrade``
(and ``TE`` but ``trailers``) describe one HTTP/1.1 hop (RFC 9110 s7.6.1) and are
malformed in HTTP/2 (RFC 9113 s8.2.2).  sansmcp manages the connection itself, so such a
header is refused with ``CallerError`` when the Config is opened, before anything is
dialled or sent, whichever wire the endpoint would speak (before, HTTP/1.1 sent
``Keep-Alive`` and ``Proxy-Connection`` and HTTP/2 dropped them without a word).
"""

from __future__ import annotations

import pytest

from sansmcp import CallerError
from sansmcp.core.http import CONNECTION_FIELDS, header_value

from ..core.fakemcp import FakeServer
from ..core.test_driver import URL, Net, make

REFUSED = [
    ("Connection", "close"),
    ("connection", "keep-alive"),
    ("Keep-Alive", "timeout=5"),
    ("Proxy-Connection", "keep-alive"),
    ("Transfer-Encoding", "chunked"),
    ("UPGRADE", "h2c"),
    ("TE", "gzip"),
    ("te", "trailers, deflate"),
]


def net(server: FakeServer, wire: str) -> Net:
    if wire == "h2":
        return make(server, http2_prior_knowledge=True, h2c=True)
    return make(server)


def test_the_refused_names_are_the_rfcs_connection_specific_fields() -> None:
    assert {name.lower().encode() for name, _ in REFUSED} == CONNECTION_FIELDS | {b"te"}


@pytest.mark.parametrize("wire", ["h1", "h2"])
@pytest.mark.parametrize(("name", "value"), REFUSED)
def test_a_connection_specific_header_is_a_caller_error_before_any_io(
    wire: str, name: str, value: str
) -> None:
    network = net(FakeServer(), wire)
    with pytest.raises(CallerError) as caught:
        network.open(URL, headers={"X-Fine": "1", name: value})
    assert str(caught.value) == (
        f"header {name!r} is connection-specific: sansmcp manages the connection "
        "(HTTP/2 forbids it)"
    )
    assert network.log == []  # nothing dialled, nothing sent


@pytest.mark.parametrize("wire", ["h1", "h2"])
def test_names_that_only_look_alike_go_out_on_both_wires(wire: str) -> None:
    server = FakeServer()
    network = net(server, wire)
    headers = {"X-Connection": "a", "Keep-Alive-X": "b", "TE": "trailers"}
    view = network.open(URL, headers=headers)
    network.ok("connect", view)
    sent = server.requests[-1].headers
    assert header_value(sent, b"x-connection") == b"a"
    assert header_value(sent, b"keep-alive-x") == b"b"
    assert header_value(sent, b"te") is None  # `TE: trailers` is valid, and the machine's own
