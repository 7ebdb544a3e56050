"""The proxy dial step through the pure ClientDriver: the walk, the CONNECT, the pool key.

``ProxyNet`` plays an adapter in front of a fake proxy: for a ``Connect`` with a
``tunnel`` it records the CONNECT request, hands the proxy's scripted answer to
``tunnel_received`` and, when told to go on, connects the socket to the target's fake
server (the port named in the CONNECT); ``answers`` scripts an answer per CONNECT target.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import pytest

from sansmcp import CallerError, Config, ConnectionFailed, OAuth
from sansmcp.core.driver import ClientDriver, CloseSocket, Command, Connect, Resolve
from sansmcp.core.limits import Limits
from sansmcp.core.net.egress import Egress, RoutedOrigin
from sansmcp.core.net.tunnel import parse_proxy

from .fakemcp import FakeServer
from .oauth_world import REDIRECT, counter_bytes
from .test_driver import Net, ServerSocket
from .test_oauth_driver import OAuthNet, as_side, mcp_side, oauth_world

PROXY = "http://proxy.internal:3128"
OK = b"HTTP/1.1 200 Connection established\r\n\r\n"
TARGET = "http://mcp.test:8000/mcp"
TLS_TARGET = "https://mcp.test/mcp"
DNS = {"mcp.test": ["93.184.216.34"], "proxy.internal": ["10.0.0.5", "10.0.0.6"]}


@dataclass
class ProxyNet(Net):
    answer_with: bytes | str = OK  # the proxy's answer; "hang": none; "up-hang": OK, then no TLS
    answers: dict[bytes, bytes] = field(default_factory=dict)  # CONNECT target -> its answer
    tunnels: list[bytes] = field(default_factory=list)
    verdicts: list[bool | None] = field(default_factory=list)

    def execute(self, command: Command) -> None:
        if not isinstance(command, Connect) or command.tunnel is None:
            return super().execute(command)
        if self.plan.get(command.address, "ok") != "ok":
            return super().execute(command)
        tunnel = command.tunnel
        self.tunnels.append(tunnel)
        socket_id = command.socket_id
        target = tunnel.split(b" ")[1]
        port = int(target.rsplit(b":", 1)[1])

        def answer() -> None:
            scripted = self.answers.get(target, self.answer_with)
            if scripted == "hang":
                return
            data = OK if scripted == "up-hang" else scripted
            assert isinstance(data, bytes)
            verdict = self.driver.tunnel_received(socket_id, data, now=self.now)
            self.verdicts.append(verdict)
            if verdict and scripted != "up-hang":
                scheme = b"https" if command.tls is not None else b"http"
                self.servers[socket_id] = ServerSocket(self.handlers[port], scheme)
                self.driver.connected(socket_id, alpn=self.alpn, now=self.now)

        self.react(socket_id, answer)
        return None


def make(
    *, proxy: str | None = PROXY, limits: Limits | None = None, port: int = 8000, **kw: Any
) -> ProxyNet:
    guard = kw.pop("guard", None)
    dns = kw.pop("dns", DNS)
    driver = ClientDriver(limits=limits, proxy=proxy, guard=guard)
    return ProxyNet(driver, handlers={port: FakeServer()}, dns=dict(dns), **kw)


def resolved_hosts(net: Net) -> list[str]:
    return [command.host for command in net.sockets(Resolve)]


# ---------------------------------------------------------------- the walk


def test_guard_local_connects_to_the_vetted_address_through_the_proxy() -> None:
    net = make()
    view = net.open(TARGET)
    net.ok("connect", view)
    assert net.ok("list_tools", view)
    assert resolved_hosts(net) == ["mcp.test", "proxy.internal"]
    (connect,) = net.sockets(Connect)
    assert (connect.address, connect.port, connect.tls) == ("10.0.0.5", 3128, None)
    assert net.tunnels == [
        b"CONNECT 93.184.216.34:8000 HTTP/1.1\r\nHost: 93.184.216.34:8000\r\n\r\n"
    ]
    assert net.verdicts == [True]
    # the next work item (another Conn, the same route) reuses the tunnelled socket
    other = net.open(TARGET)
    net.ok("connect", other)
    assert net.ok("list_tools", other)
    assert len(net.sockets(Connect)) == 1


def test_guard_proxy_connects_to_the_host_and_resolves_only_the_proxy() -> None:
    net = make(guard="proxy", dns={"mcp.test": ["10.9.9.9"], "proxy.internal": ["10.0.0.5"]})
    view = net.open(TARGET)
    net.ok("connect", view)
    assert resolved_hosts(net) == ["proxy.internal"]  # the proxy resolves the target
    assert net.tunnels[0].startswith(b"CONNECT mcp.test:8000 HTTP/1.1\r\n")


def test_tls_runs_to_the_targets_name_inside_the_tunnel() -> None:
    net = make(port=443, alpn="h2")
    net.alpn = "http/1.1"
    view = net.open(TLS_TARGET)
    net.ok("connect", view)
    (connect,) = net.sockets(Connect)
    assert connect.tls == ("mcp.test", ("h2", "http/1.1")) and connect.port == 3128
    assert net.tunnels[0].startswith(b"CONNECT 93.184.216.34:443 ")


def test_credentials_ride_the_tunnel_request_and_never_a_repr() -> None:
    net = make(proxy="http://alice:secret@127.0.0.1:3128")
    view = net.open(TARGET)
    net.ok("connect", view)
    (connect,) = net.sockets(Connect)
    assert b"Proxy-Authorization: Basic YWxpY2U6c2VjcmV0\r\n" in net.tunnels[0]
    config = Config(url=TARGET, proxy="http://alice:secret@127.0.0.1:3128")
    for text in (repr(connect), repr(net.driver.route), repr(config)):
        assert "secret" not in text and "YWxp" not in text
    assert resolved_hosts(net) == ["mcp.test"]  # a literal proxy is not resolved


def test_a_config_overrides_the_proxy_and_routes_key_the_pool() -> None:
    net = make(proxy=None)
    for config in ({}, {"proxy": "http://127.0.0.1:3128"}, {"proxy": "http://u:p@127.0.0.1:3128"}):
        view = net.open(TARGET, **config)
        net.ok("connect", view)
        assert net.ok("list_tools", view)
    connects = net.sockets(Connect)
    assert [c.tunnel is not None for c in connects] == [False, True, True]
    assert net.driver.pool.socket_count == 3  # one per route: never shared across them


@pytest.mark.parametrize(
    ("answer", "cause", "status", "words"),
    [
        (
            b'HTTP/1.1 407 Auth\r\nProxy-Authenticate: Basic realm="p"\r\n\r\n',
            "proxy",
            407,
            "wants credentials",
        ),
        (b"HTTP/1.1 403 Forbidden\r\n\r\n", "proxy", 403, "refused CONNECT with status 403"),
        (OK + b"hello", "proxy", None, "before the target spoke"),
        (b"", "proxy", None, "closed the connection before answering CONNECT"),
    ],
)
def test_a_proxy_refusal_ends_the_dial_classified(
    answer: bytes, cause: str, status: int | None, words: str
) -> None:
    net = make(answer_with=answer)
    error = net.failure("connect", net.open(TARGET))
    assert isinstance(error, ConnectionFailed) and error.cause == cause
    assert error.status == status and words in error.message
    assert len(net.sockets(Connect)) == 1  # the proxy answered: no other address is tried
    assert net.verdicts == [False] and net.driver.pool.socket_count == 0
    if status == 407:
        assert error.proxy_authenticate == 'Basic realm="p"'


# ---------------------------------------------------------------- the next vetted address

SPREAD = {
    "mcp.test": ["93.184.216.34", "93.184.216.35", "93.184.216.36"],
    **{"proxy.internal": ["10.0.0.5", "10.0.0.6"]},
}


def refusal(status: int) -> bytes:
    return f"HTTP/1.1 {status} Refused\r\nContent-Length: 0\r\n\r\n".encode()


def targets(net: ProxyNet) -> list[bytes]:
    return [tunnel.split(b" ")[1] for tunnel in net.tunnels]


@pytest.mark.parametrize("status", [500, 502, 503, 504])
def test_a_proxy_that_could_not_reach_an_address_gets_the_next_vetted_one(status: int) -> None:
    """Guard "local": the proxy's 500/502/503/504 says that address was out of its reach, as
    a refused connect says it to a direct dial; the next vetted address is asked for,
    through the proxy address that answered, on a new connection."""
    answers = {b"93.184.216.34:8000": refusal(status), b"93.184.216.35:8000": refusal(status)}
    net = make(dns=SPREAD, answers=answers)
    view = net.open(TARGET)
    net.ok("connect", view)
    assert net.ok("list_tools", view)
    assert targets(net) == [b"93.184.216.34:8000", b"93.184.216.35:8000", b"93.184.216.36:8000"]
    assert [c.address for c in net.sockets(Connect)] == ["10.0.0.5"] * 3
    assert net.verdicts == [False, False, True] and net.driver.pool.socket_count == 1


def test_when_no_vetted_address_is_reachable_the_last_refusal_is_the_failure() -> None:
    answers = {b"93.184.216.34:8000": refusal(502), b"93.184.216.35:8000": refusal(504)}
    net = make(dns=SPREAD, answers=answers, answer_with=refusal(503))
    error = net.failure("connect", net.open(TARGET))
    assert isinstance(error, ConnectionFailed) and error.cause == "proxy"
    assert error.status == 503 and "refused CONNECT with status 503" in error.message
    assert len(net.tunnels) == 3 and net.verdicts == [False] * 3
    assert net.driver.pool.socket_count == 0


@pytest.mark.parametrize("status", [302, 400, 401, 403, 407, 501])
def test_a_policy_refusal_is_not_retried_on_another_address(status: int) -> None:
    """403/407 (the proxy's policy, its credentials) and every other refusal: another
    address of the same host would meet the same answer; one CONNECT."""
    net = make(dns=SPREAD, answer_with=refusal(status))
    error = net.failure("connect", net.open(TARGET))
    assert isinstance(error, ConnectionFailed) and error.status == status
    assert targets(net) == [b"93.184.216.34:8000"]


@pytest.mark.parametrize(
    "answer",
    [
        OK + b"hello",  # bytes before the target spoke
        b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n",  # a 2xx with a body
        b"HTTP/1.1 502\x00 Bad\r\n\r\n",  # a malformed head
        b"HTTP/1.1 502 Bad Gateway\r\nX-Pad: " + b"p" * 20_000,  # over max_header_bytes
        b"",  # closed before answering
    ],
)
def test_a_misbehaving_proxy_is_not_retried_on_another_address(answer: bytes) -> None:
    net = make(dns=SPREAD, answer_with=answer, limits=Limits(max_header_bytes=16_384))
    error = net.failure("connect", net.open(TARGET))
    assert isinstance(error, ConnectionFailed) and error.status in (None, 200), error
    assert error.cause in ("proxy", "budget")
    assert targets(net) == [b"93.184.216.34:8000"]


def test_guard_proxy_leaves_the_addresses_to_the_proxy() -> None:
    """With the guard "proxy" the CONNECT names the host: the proxy tried its
    addresses already; its 502 ends the dial."""
    net = make(dns=SPREAD, guard="proxy", answer_with=refusal(502))
    error = net.failure("connect", net.open(TARGET))
    assert isinstance(error, ConnectionFailed) and error.status == 502
    assert targets(net) == [b"mcp.test:8000"]


def test_the_next_vetted_address_goes_through_the_proxy_address_that_answered() -> None:
    """The first proxy address refuses TCP; the second answers 502 for the first target:
    the next target is asked of that second proxy address, with its own answer deadline."""
    net = make(
        dns=SPREAD,
        plan={"10.0.0.5": ("tcp", ConnectionRefusedError("refused"))},
        answers={b"93.184.216.34:8000": refusal(502)},
        limits=Limits(dial_timeout=30.0, proxy_connect_timeout=2.0),
    )
    view = net.open(TARGET)
    net.ok("connect", view)
    assert [c.address for c in net.sockets(Connect)] == ["10.0.0.5", "10.0.0.6", "10.0.0.6"]
    assert targets(net) == [b"93.184.216.34:8000", b"93.184.216.35:8000"]
    assert net.ok("list_tools", view)


def test_the_next_vetted_address_gets_its_own_answer_deadline() -> None:
    net = make(
        dns=SPREAD,
        answers={b"93.184.216.34:8000": refusal(503)},
        answer_with="hang",
        limits=Limits(dial_timeout=30.0, proxy_connect_timeout=2.0),
    )
    start = net.now
    error = net.failure("connect", net.open(TARGET))
    assert isinstance(error, ConnectionFailed) and error.bound == "proxy_connect_timeout"
    assert targets(net) == [b"93.184.216.34:8000", b"93.184.216.35:8000"]
    assert net.now - start == pytest.approx(2.0)  # (the refusal came at once, the fake clock)


def test_a_stalled_proxy_ends_at_the_dial_deadline_naming_it() -> None:
    net = make(answer_with="hang", limits=Limits(dial_timeout=2.0, proxy_connect_timeout=5.0))
    error = net.failure("connect", net.open(TARGET))
    assert isinstance(error, ConnectionFailed) and error.cause == "timeout"
    assert error.bound == "dial_timeout" and error.limit == 2.0
    assert "no tunnel through the proxy http://proxy.internal:3128" in error.message
    (connect,) = net.sockets(Connect)
    assert net.closes[connect.socket_id] == 1
    assert net.driver.tunnel_received(connect.socket_id, OK, now=net.now) is False  # gone


def test_a_stalled_proxy_ends_at_its_own_connect_deadline_within_the_dials() -> None:
    limits = Limits(dial_timeout=30.0, proxy_connect_timeout=3.0)
    net = make(answer_with="hang", limits=limits)
    start = net.now
    error = net.failure("connect", net.open(TARGET))
    assert isinstance(error, ConnectionFailed) and error.cause == "timeout"
    assert error.bound == "proxy_connect_timeout" and error.limit == 3.0
    assert error.message == (
        "no tunnel through the proxy http://proxy.internal:3128 in time (no answer to "
        "its CONNECT within 3 s, Limits.proxy_connect_timeout)"
    )
    assert net.now - start == pytest.approx(3.0)  # the fake clock: the bound, not the dial's
    (connect,) = net.sockets(Connect)
    assert net.closes[connect.socket_id] == 1


def test_the_proxys_answer_deadline_ends_with_its_answer() -> None:
    """Once the proxy said 2xx, the rest of the dial (TLS inside) is dial_timeout's."""
    net = make(answer_with="up-hang", limits=Limits(dial_timeout=8.0, proxy_connect_timeout=1.0))
    start = net.now
    error = net.failure("connect", net.open(TARGET))
    assert isinstance(error, ConnectionFailed) and error.bound == "dial_timeout"
    assert net.now - start == pytest.approx(8.0)


def test_the_answer_deadline_holds_until_the_head_is_complete() -> None:
    net = make(answer_with="hang", limits=Limits(dial_timeout=8.0, proxy_connect_timeout=1.0))
    start = net.now
    net.start("connect", net.open(TARGET))
    net.settle()
    (connect,) = net.sockets(Connect)
    assert net.driver.next_deadline() == pytest.approx(start + 1.0)
    assert net.driver.tunnel_received(connect.socket_id, OK[:20], now=net.now) is None
    assert net.driver.next_deadline() == pytest.approx(start + 1.0)  # a part is no answer
    assert net.driver.tunnel_received(connect.socket_id, OK[20:], now=net.now) is True
    assert net.driver.next_deadline() == pytest.approx(start + 8.0)  # the dial's again


def test_each_proxy_address_gets_its_own_answer_deadline() -> None:
    net = make(
        plan={"10.0.0.5": ("tcp", ConnectionRefusedError("refused"))},
        answer_with="hang",
        limits=Limits(dial_timeout=30.0, proxy_connect_timeout=2.0),
    )
    error = net.failure("connect", net.open(TARGET))
    assert isinstance(error, ConnectionFailed) and error.bound == "proxy_connect_timeout"
    assert [c.address for c in net.sockets(Connect)] == ["10.0.0.5", "10.0.0.6"]


def test_a_stall_after_the_tunnel_is_up_is_the_plain_dial_timeout() -> None:
    net = make(answer_with="up-hang", limits=Limits(dial_timeout=2.0))
    error = net.failure("connect", net.open(TARGET))
    assert isinstance(error, ConnectionFailed) and error.bound == "dial_timeout"
    assert error.message.startswith("could not connect within 2 s")


def test_proxy_socket_failures_try_the_next_proxy_address() -> None:
    net = make(
        plan={
            "10.0.0.5": ("tcp", ConnectionRefusedError("refused")),
            "10.0.0.6": ("proxy", ConnectionResetError("reset")),
        }
    )
    error = net.failure("connect", net.open(TARGET))
    assert [c.address for c in net.sockets(Connect)] == ["10.0.0.5", "10.0.0.6"]
    assert isinstance(error, ConnectionFailed) and error.cause == "proxy"
    assert error.message.startswith("the connection to the proxy lost during CONNECT:")
    net = make(plan={"10.0.0.5": ("tcp", OSError("a")), "10.0.0.6": ("tcp", OSError("b"))})
    error = net.failure("connect", net.open(TARGET))
    assert isinstance(error, ConnectionFailed) and error.cause == "dial"
    assert error.message.startswith("the connection to the proxy failed: could not connect")


def test_an_https_proxy_asks_for_tls_to_the_proxy_first() -> None:
    net = make(proxy="https://proxy.internal:3129", port=443)
    view = net.open(TLS_TARGET)
    net.ok("connect", view)
    assert net.ok("list_tools", view)
    (connect,) = net.sockets(Connect)
    assert connect.proxy_tls == "proxy.internal" and connect.port == 3129
    assert connect.tls is not None and connect.tls[0] == "mcp.test"  # TLS in TLS
    plain = make()
    plain.ok("connect", plain.open(TARGET))
    assert plain.sockets(Connect)[0].proxy_tls is None


def test_a_tls_failure_with_the_proxy_itself_names_the_proxy() -> None:
    failure = OSError("certificate verify failed")
    failure.reason = "CERTIFICATE_VERIFY_FAILED"  # type: ignore[attr-defined]
    net = make(
        proxy="https://proxy.internal",
        plan={"10.0.0.5": ("proxy-tls", failure), "10.0.0.6": ("proxy-tls", failure)},
    )
    error = net.failure("connect", net.open(TARGET))
    assert isinstance(error, ConnectionFailed) and error.cause == "tls"
    assert error.message.startswith(
        "the TLS handshake with the proxy failed: TLS handshake with proxy.internal:443 "
        "at 10.0.0.6 failed: CERTIFICATE_VERIFY_FAILED"
    )
    assert [c.address for c in net.sockets(Connect)] == ["10.0.0.5", "10.0.0.6"]


def test_a_tls_failure_inside_the_tunnel_names_the_target_and_the_proxy() -> None:
    net = make(port=443, plan={})

    def fail_tls(command: Command) -> None:
        if isinstance(command, Connect):
            net.react(
                command.socket_id,
                lambda: (
                    net.driver.tunnel_received(command.socket_id, OK, now=net.now),
                    net.driver.connect_failed(command.socket_id, "tls", OSError("x"), now=net.now),
                ),
            )
        else:
            Net.execute(net, command)

    net.execute = fail_tls  # type: ignore[method-assign]
    error = net.failure("connect", net.open(TLS_TARGET))
    assert isinstance(error, ConnectionFailed) and error.cause == "tls"
    assert "at 93.184.216.34 via http://proxy.internal:3128" in error.message


def test_the_proxys_resolve_failure_names_the_proxy() -> None:
    net = make(dns={**DNS, "proxy.internal": OSError("no such name")})
    error = net.failure("connect", net.open(TARGET))
    assert isinstance(error, ConnectionFailed) and error.cause == "dns"
    assert error.message == "could not resolve proxy.internal: no such name"
    net = make(dns={**DNS, "proxy.internal": ["169.254.169.254"]})
    error = net.failure("connect", net.open(TARGET))
    assert isinstance(error, ConnectionFailed) and error.cause == "refused_address"


# ---------------------------------------------------------------- the policy


def test_the_targets_policy_is_applied_before_the_proxy() -> None:
    net = make(dns={**DNS, "mcp.test": ["10.1.2.3"]})
    error = net.failure("connect", net.open(TARGET))
    assert isinstance(error, ConnectionFailed) and error.cause == "refused_address"
    assert net.sockets(Connect) == []
    view = net.open(TARGET, egress=Egress(allowed_networks=["10.1.0.0/16"]))
    net.ok("connect", view)
    assert net.tunnels[-1].startswith(b"CONNECT 10.1.2.3:8000 ")


def test_guard_proxy_still_refuses_metadata_literals_and_narrows() -> None:
    net = make(guard="proxy")
    for url in ("http://169.254.169.254/mcp", "http://[fe80::1]/mcp"):
        error = net.failure("connect", net.open(url))
        assert isinstance(error, ConnectionFailed) and error.cause == "refused_address"
    narrow = net.open(TARGET, egress=Egress(only_hosts=["other.test"]))
    error = net.failure("connect", narrow)
    assert isinstance(error, ConnectionFailed) and "only_hosts" in error.message
    assert net.sockets(Resolve) == [] and net.sockets(Connect) == []


def test_an_egress_policy_applies_to_direct_dials_too() -> None:
    net = make(proxy=None, dns={"mcp.test": ["10.1.2.3"]})
    error = net.failure("connect", net.open(TARGET))
    assert isinstance(error, ConnectionFailed) and error.cause == "refused_address"
    view = net.open(TARGET, egress=Egress(allowed_hosts=["mcp.test"]))
    net.ok("connect", view)
    (connect,) = net.sockets(Connect)
    assert connect.address == "10.1.2.3" and connect.tunnel is None
    same = net.open(TARGET, egress=Egress())  # the Client's policy: the plain route
    assert net.driver._conns[same.conn_id].route is None


def test_bad_proxy_and_guard_settings_are_caller_errors() -> None:
    assert ClientDriver(proxy="https://proxy.internal").route.proxy.origin.port == 443
    with pytest.raises(CallerError, match="Client guard must be 'local' or 'proxy'"):
        ClientDriver(guard="remote")
    driver = ClientDriver()
    with pytest.raises(CallerError, match=r"Config\.guard must be"):
        driver.open(Config(url=TARGET, proxy=PROXY, guard="none"), now=0.0)
    with pytest.raises(CallerError, match="http:// or https://"):
        driver.open(Config(url=TARGET, proxy="socks5://p"), now=0.0)
    assert ClientDriver(guard="proxy").route.guard == "proxy"


def test_the_environments_proxy_is_ignored(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.setenv(name, "http://env-proxy.invalid:1")
    net = make(proxy=None)
    net.ok("connect", net.open(TARGET))
    (connect,) = net.sockets(Connect)
    assert connect.tunnel is None and connect.address == "93.184.216.34"
    assert ClientDriver().route.proxy is None


# ---------------------------------------------------------------- OAuth goes through it too


@dataclass
class OAuthProxyNet(ProxyNet, OAuthNet):
    pass


def test_every_oauth_fetch_goes_through_the_proxy() -> None:
    world = oauth_world()
    driver = ClientDriver(random_bytes=counter_bytes(), proxy=PROXY, allow_loopback=True)
    net = OAuthProxyNet(
        driver,
        handlers={443: mcp_side(world), 9000: as_side(world)},
        dns=dict(DNS),
        world=world,
    )
    view = net.open(TLS_TARGET, oauth=OAuth(redirect_uri=REDIRECT))
    assert net.ok("connect", view) is None
    assert net.ok("list_tools", view)
    connects = net.sockets(Connect)
    assert connects and all(c.tunnel is not None and c.port == 3128 for c in connects)
    targets = {t.split(b" ")[1] for t in net.tunnels}
    assert targets == {b"93.184.216.34:443", b"127.0.0.1:9000"}
    assert all(isinstance(key, RoutedOrigin) for key in net.driver.pool._origins)
    assert not [c for c in net.log if isinstance(c, CloseSocket)] or True
    assert math.isfinite(net.now)


def test_a_proxy_url_parses_once_per_client() -> None:
    driver = ClientDriver(proxy=PROXY)
    assert driver.route.proxy == parse_proxy(PROXY)
