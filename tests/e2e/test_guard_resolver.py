"""The resolver hook's answers on real adapters: untrusted, vetted, dialled numerically.

A sentinel listens on 127.0.0.1 and ::1 at one port and never answers; every
answer below would reach it if it were dialled as text, so "never dialled" is
observed.  Both backends.
"""

from __future__ import annotations

import contextlib
import ipaddress
import socket
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from sansmcp import Config, ConnectionFailed
from sansmcp.core.net import dial
from sansmcp.core.url import parse_endpoint
from tests.tiers import examples

from ..core.test_guard_props import TRICKY_TEXT
from .conftest import Backend, Relay, Server, resolver_for
from .test_guard import relays_on_one_port

HOST = "mix.test"  # a name the test server accepts in Host


@pytest.fixture
def sentinels(relay: Callable[..., Relay]) -> tuple[Relay, Relay]:
    v4, v6 = relays_on_one_port(relay, ("", 0), [("127.0.0.1", False), ("::1", False)])
    return v4, v6


def _hook(value: Callable[[], Any]) -> Any:
    async def resolve(host: str, port: int) -> Any:
        return value()

    return resolve


@pytest.mark.parametrize("allow_loopback", [False, True])
def test_bytes_answer_is_refused_and_never_dialled(
    backend: Backend, sentinels: tuple[Relay, Relay], allow_loopback: bool
) -> None:
    """The issue's case: b"127.000000000001" is 16 bytes (a packed global IPv6 address) and,
    as text, 127.0.0.1 to a resolver.  Refused by type, whatever the settings."""
    v4, v6 = sentinels

    async def main() -> None:
        hook = _hook(lambda: [b"127.000000000001"])
        async with backend.Client(allow_loopback=allow_loopback, resolver=hook) as client:
            with pytest.raises(ConnectionFailed) as failed:
                async with client.connect(Config(url=v4.url(host=HOST))):
                    raise AssertionError("dialled a bytes answer")
            assert failed.value.cause == "dns"
            assert "b'127.000000000001'" in failed.value.message
            assert client.pool.socket_count == 0

    backend.run(main)
    assert (v4.accepts, v6.accepts) == (0, 0)


def test_a_hook_exception_is_a_dns_failure_chained(
    backend: Backend, sentinels: tuple[Relay, Relay]
) -> None:
    v4, _ = sentinels
    raised = LookupError("the embedder's directory is down")

    async def broken(host: str, port: int) -> list[str]:
        raise raised

    async def main() -> None:
        async with backend.Client(allow_loopback=True, resolver=broken) as client:
            with pytest.raises(ConnectionFailed) as failed:
                async with client.connect(Config(url=v4.url(host=HOST))):
                    raise AssertionError("unreachable")
            assert failed.value.cause == "dns"
            assert failed.value.__cause__ is raised
            assert "LookupError: the embedder's directory is down" in failed.value.message

    backend.run(main)
    assert v4.accepts == 0


def test_the_vetted_text_is_never_resolved_again(
    backend: Backend, plain: Server, relay: Callable[..., Relay], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Any getaddrinfo call made while dialling has numeric-host semantics, for the vetted
    text exactly; the hook's name is never given to the system resolver."""
    proxy = relay(plain.address)
    calls: list[tuple[Any, int]] = []
    real = socket.getaddrinfo

    def recording(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        if port != plain.port:  # not the relay's own connection to the server
            calls.append((host, kwargs.get("flags", args[3] if len(args) > 3 else 0)))
        return real(host, port, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", recording)
    resolver = resolver_for({HOST: ["::ffff:127.0.0.1", "127.0.0.1"]})

    async def main() -> None:
        async with (
            backend.Client(allow_loopback=True, resolver=resolver) as client,
            client.connect(Config(url=proxy.url(host=HOST))) as conn,
        ):
            await conn.call_tool("echo", b'{"text": "numeric"}')

    backend.run(main)
    for host, flags in calls:  # the adapters parse with inet_pton: there may be none
        assert flags & socket.AI_NUMERICHOST, (host, flags)
        assert host in ("::ffff:7f00:1", "127.0.0.1")
    assert proxy.accepts == 1


@pytest.mark.parametrize("text", ["127.1", "localhost", "127.000000000001", "0x7f000001"])
def test_the_adapter_itself_never_resolves_what_it_dials(
    backend: Backend,
    sentinels: tuple[Relay, Relay],
    monkeypatch: pytest.MonkeyPatch,
    text: str,
) -> None:
    """Numeric-host semantics in the adapter, checked apart from ``vet``: were ``vet`` to
    hand it a name or a non-canonical spelling of 127.0.0.1, the dial fails in the TCP
    phase without a resolver ever turning the text into the sentinel's address."""
    v4, v6 = sentinels
    monkeypatch.setattr(dial, "vet", lambda *args, **kwargs: [text])

    async def main() -> None:
        async with backend.Client(allow_loopback=True) as client:
            with pytest.raises(ConnectionFailed) as failed:
                async with client.connect(Config(url=v4.url(host="127.0.0.1"))):
                    raise AssertionError("connected")
            assert failed.value.cause == "dial", failed.value.message
            assert f"at {text}: OSError: illegal IP address string" in failed.value.message

    backend.run(main)
    assert (v4.accepts, v6.accepts) == (0, 0)


# -- any value a hook may return --------------------------------------------------------

leaf: st.SearchStrategy[Any] = st.one_of(
    st.sampled_from(TRICKY_TEXT),
    st.sampled_from(TRICKY_TEXT).map(str.encode),
    st.sampled_from(TRICKY_TEXT).map(
        lambda t: ipaddress.ip_address(t.strip("[]")) if ":" in t else t
    ),
    st.integers(),
    st.none(),
    st.text(max_size=20),
    st.from_type(type).flatmap(st.from_type),
)
plain_values = st.recursive(
    leaf,
    lambda children: st.one_of(
        st.lists(children, max_size=40), st.tuples(children), st.dictionaries(st.text(), children)
    ),
    max_leaves=12,
)


def _shaped(value: Any, shape: str) -> Callable[[], Any]:
    """What the hook returns, built afresh on each call."""
    if shape == "iterator":
        return lambda: iter(value) if isinstance(value, list | tuple) else value

    def endless() -> Iterator[Any]:
        while True:
            yield value

    if shape == "endless":
        return endless
    if shape == "raises":

        def boom() -> Any:
            raise RuntimeError(f"hook failed on {type(value).__name__}")

        return boom
    return lambda: value


@settings(
    max_examples=examples(200, 20),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(plain_values, st.sampled_from(["as-is", "iterator", "endless", "raises"]))
def test_any_hook_value_never_dials_loopback(
    backend: Backend, sentinels: tuple[Relay, Relay], value: Any, shape: str
) -> None:
    v4, v6 = sentinels
    origin = parse_endpoint(v4.url(host=HOST)).origin
    # the same items, checked purely first: an answer the guard would dial (a global
    # address drawn by chance) is not sent anywhere -- this suite stays on loopback
    probe = _shaped(value, shape if shape != "raises" else "as-is")
    with contextlib.suppress(ConnectionFailed):
        assume(not dial.vet(origin, probe(), allow_private=False, allow_loopback=False))

    async def main() -> None:
        async with backend.Client(resolver=_hook(_shaped(value, shape))) as client:
            with pytest.raises(ConnectionFailed) as failed:
                async with client.connect(Config(url=v4.url(host=HOST))):
                    raise AssertionError("connected")
            assert failed.value.cause in ("dns", "refused_address")
            assert client.pool.socket_count == 0

    backend.run(main)
    assert (v4.accepts, v6.accepts) == (0, 0)
