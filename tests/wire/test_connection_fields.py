"""A connection-specific header in ``Config.headers`` is dropped alike on both wires.

``Connection``, ``Keep-Alive``, ``Proxy-Connection``, ``Transfer-Encoding``, ``Upgrade``
and ``TE`` describe one HTTP/1.1 hop (RFC 9110 s7.6.1) and are malformed in HTTP/2 (RFC
9113 s8.2.2).  sansmcp manages the connection itself, so a caller's such header is
dropped, as a protocol header of the caller's is: a header dict copied from curl or a
browser (``Connection: keep-alive``) keeps working.  Before, HTTP/1.1 sent
``Keep-Alive`` and ``Proxy-Connection`` and HTTP/2 dropped them.
"""

from __future__ import annotations

import pytest

from sansmcp.core.http import CONNECTION_FIELDS, header_value

from ..core.fakemcp import FakeServer
from ..core.test_driver import URL, Net, make

DROPPED = [
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


def test_the_dropped_names_are_the_rfcs_connection_specific_fields() -> None:
    assert {name.lower().encode() for name, _ in DROPPED} == CONNECTION_FIELDS | {b"te"}


@pytest.mark.parametrize("wire", ["h1", "h2"])
@pytest.mark.parametrize(("name", "value"), DROPPED)
def test_a_connection_specific_header_is_dropped_on_both_wires(
    wire: str, name: str, value: str
) -> None:
    server = FakeServer()
    network = net(server, wire)
    view = network.open(URL, headers={"X-Fine": "1", name: value})
    network.ok("connect", view)
    sent = server.requests[-1].headers
    assert header_value(sent, b"x-fine") == b"1"
    assert header_value(sent, name.lower().encode()) is None


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
