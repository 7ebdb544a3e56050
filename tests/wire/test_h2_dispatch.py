"""The HTTP/2 machine's dispatch of h2 events on a stream it no longer tracks.

A GOAWAY refuses a stream without resetting it, so h2 still passes on what the server
sends there; every such event is dropped, its bytes count as unowned, and the streams
the server kept still finish.
"""

from __future__ import annotations

from hyperframe.frame import GoAwayFrame

from sansmcp.core.http import ExchangeFailed, ResponseEnded, ResponseReceived

from .test_h2 import Pair, drain, feed_whole, raw


def test_events_on_a_refused_stream_are_dropped_and_unowned() -> None:
    pair = Pair()
    pair.handshake()
    kept, refused = pair.start(1), pair.start(2)
    feed_whole(pair.client, raw(GoAwayFrame(0, last_stream_id=kept, error_code=0)))
    events = drain(pair.client)
    assert [type(e) for e in events] == [ExchangeFailed] and events[0].exchange_id == 2
    before = pair.client.unowned_bytes
    # the server answers the stream it refused anyway: a 1xx head, the final head, body,
    # trailers ending the stream -- h2 reports each, the machine drops each
    pair.server.send_headers(refused, [(b":status", b"103"), (b"link", b"</a>")])
    pair.server.send_headers(refused, [(b":status", b"200")])
    pair.server.send_data(refused, b"body")
    pair.server.send_headers(refused, [(b"x-trailer", b"1")], end_stream=True)
    stray = pair.server.data_to_send()
    feed_whole(pair.client, stray)
    assert drain(pair.client) == []
    assert pair.client.unowned_bytes - before == len(stray)
    # the kept stream still finishes
    pair.server.send_headers(kept, [(b":status", b"200")], end_stream=True)
    feed_whole(pair.client, pair.server.data_to_send())
    tail = drain(pair.client)
    assert [type(e) for e in tail] == [ResponseReceived, ResponseEnded]
    assert all(e.exchange_id == 1 for e in tail)


def test_a_reset_of_a_refused_stream_is_dropped() -> None:
    pair = Pair()
    pair.handshake()
    kept, refused = pair.start(1), pair.start(2)
    feed_whole(pair.client, raw(GoAwayFrame(0, last_stream_id=kept, error_code=0)))
    assert [e.exchange_id for e in drain(pair.client)] == [2]
    pair.server.reset_stream(refused, error_code=0x2)
    feed_whole(pair.client, pair.server.data_to_send())
    assert drain(pair.client) == []
    assert not pair.client.is_broken and not pair.client.is_idle  # the kept stream lives on
