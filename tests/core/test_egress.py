"""Egress policy and the guard modes: tables, and the promise that no policy admits
what the guard refuses whatever the settings."""

from __future__ import annotations

import ipaddress

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sansmcp.core.errors import CallerError, ConnectionFailed
from sansmcp.core.net.egress import (
    GUARD_MODES,
    Egress,
    Policy,
    check_target,
    egress_policy,
    vet_target,
)
from sansmcp.core.net.guard import refusal_reason
from sansmcp.core.url import Origin
from tests.tiers import examples


def origin(host: str) -> Origin:
    return Origin(scheme="https", host=host, port=443)


def policy(egress: Egress | None = None, *, private: bool = False) -> Policy:
    return egress_policy(egress, allow_private=private, allow_loopback=False)


def test_no_egress_is_the_clients_guard() -> None:
    assert policy() == Policy()
    assert egress_policy(None, allow_private=True, allow_loopback=True) == Policy(
        allow_private=True, allow_loopback=True
    )
    assert vet_target(policy(), origin("mcp.example.com"), ["93.184.215.14"]) == ["93.184.215.14"]
    with pytest.raises(ConnectionFailed, match="unless allow_private") as caught:
        vet_target(policy(), origin("mcp.example.com"), ["10.0.0.1"])
    assert caught.value.cause == "refused_address"


def test_egress_widens_allow_private_and_can_narrow_it_back() -> None:
    wide = policy(Egress(allow_private=True))
    assert vet_target(wide, origin("mcp.corp"), ["10.0.0.1"]) == ["10.0.0.1"]
    narrow = policy(Egress(allow_private=False), private=True)
    with pytest.raises(ConnectionFailed, match="unless allow_private"):
        vet_target(narrow, origin("mcp.corp"), ["10.0.0.1"])
    inherit = policy(Egress(), private=True)
    assert inherit.allow_private


def test_allowed_hosts_admit_their_private_addresses_only() -> None:
    tenant = policy(Egress(allowed_hosts=["MCP.Tenant.Example."]))
    assert tenant.hosts == frozenset({"mcp.tenant.example"})
    assert vet_target(tenant, origin("mcp.tenant.example"), ["10.1.2.3"]) == ["10.1.2.3"]
    with pytest.raises(ConnectionFailed, match="unless allow_private"):
        vet_target(tenant, origin("other.example"), ["10.1.2.3"])


def test_allowed_networks_admit_only_their_addresses() -> None:
    tenant = policy(Egress(allowed_networks=["10.1.0.0/16", "fd00:1::/32"]))
    answers = ["10.2.0.1", "10.1.0.5", "93.184.215.14", "fd00:1::5"]
    assert vet_target(tenant, origin("mcp.corp"), answers) == [
        "10.1.0.5",
        "93.184.215.14",
        "fd00:1::5",
    ]
    with pytest.raises(ConnectionFailed, match=r"not in Egress\.allowed_networks") as caught:
        vet_target(tenant, origin("mcp.corp"), [f"10.2.0.{i}" for i in range(1, 7)])
    assert caught.value.cause == "refused_address"
    assert "10.2.0.1" in caught.value.message and "2 more refused" in caught.value.message
    with pytest.raises(ConnectionFailed, match=r"^refusing to connect: 10\.2\.0\.1"):
        vet_target(tenant, origin("10.2.0.1"), ["10.2.0.1"])
    # metadata and link-local stay refused even inside an allowed network
    everything = policy(Egress(allowed_networks=["169.254.0.0/16", "0.0.0.0/0"]))
    with pytest.raises(ConnectionFailed, match="refused whatever the settings") as caught:
        vet_target(everything, origin("mcp.corp"), ["169.254.169.254", "169.254.1.1"])
    assert caught.value.cause == "refused_address"
    # the resolver's faults are reported as without a policy
    with pytest.raises(ConnectionFailed, match="unusable") as caught:
        vet_target(tenant, origin("mcp.corp"), 42)
    assert caught.value.cause == "dns"


def test_only_hosts_narrow_in_both_modes() -> None:
    narrow = policy(Egress(only_hosts=["mcp.example.com", "*.tools.example"]), private=True)
    for mode in GUARD_MODES:
        check_target(narrow, mode, origin("mcp.example.com"))
        check_target(narrow, mode, origin("a.b.tools.example"))
        for host in ("tools.example", "evil.example", "mcp.example.com.evil", "93.184.215.14"):
            with pytest.raises(ConnectionFailed, match="only_hosts") as caught:
                check_target(narrow, mode, origin(host))
            assert caught.value.cause == "refused_address"
    check_target(policy(), "local", origin("mcp.example.com"))


@pytest.mark.parametrize(
    ("host", "refused"),
    [
        ("169.254.169.254", True),
        ("169.254.1.1", True),
        ("fe80::1", True),
        ("::ffff:169.254.169.254", True),
        ("0.0.0.0", True),
        ("10.0.0.1", False),  # the proxy enforces
        ("127.0.0.1", False),
        ("93.184.215.14", False),
        ("mcp.example.com", False),
    ],
)
def test_proxy_mode_refuses_only_hard_refused_literals(host: str, refused: bool) -> None:
    if refused:
        with pytest.raises(ConnectionFailed, match="refused whatever the settings") as caught:
            check_target(policy(), "proxy", origin(host))
        assert caught.value.cause == "refused_address"
    else:
        check_target(policy(), "proxy", origin(host))
    check_target(policy(), "local", origin(host))  # local: the vet after resolve decides


@pytest.mark.parametrize(
    ("egress", "words"),
    [
        ("x", "must be an Egress"),
        (Egress(allow_private=1), "must be a bool"),  # type: ignore[arg-type]
        (Egress(allowed_networks="10.0.0.0/8"), "list of str"),
        (Egress(allowed_networks=[10]), "list of str, not of int"),  # type: ignore[list-item]
        (Egress(allowed_networks=["10.0.0.1/8"]), "not a CIDR"),
        (Egress(allowed_networks=["x"] * 1001), "at most 1,000"),
        (Egress(allowed_hosts=["a/b"]), "not a host name"),
        (Egress(allowed_hosts=["*.a"]), "not a host name"),
        (Egress(allowed_hosts=[""]), "not a host name"),
        (Egress(only_hosts=["a b"]), "not a host name"),
        (Egress(only_hosts=["h:443"]), "not a host name"),
        (Egress(only_hosts=None, allowed_hosts=None), "list of str"),  # type: ignore[arg-type]
    ],
)
def test_bad_egress_is_a_caller_error(egress: object, words: str) -> None:
    with pytest.raises(CallerError, match=words):
        egress_policy(egress, allow_private=False, allow_loopback=False)


ADDRESSES = st.one_of(
    st.ip_addresses(v=4).map(str),
    st.ip_addresses(v=6).map(str),
    st.sampled_from(["169.254.169.254", "fd00:ec2::254", "169.254.3.3", "fe80::9", "10.9.9.9"]),
)
NETWORKS = st.sampled_from(["0.0.0.0/0", "::/0", "169.254.0.0/16", "10.0.0.0/8", "fe80::/10"])


@settings(max_examples=examples(300))
@given(
    answers=st.lists(ADDRESSES, min_size=1, max_size=6),
    networks=st.lists(NETWORKS, max_size=3),
    private=st.booleans(),
    named=st.booleans(),
)
def test_no_policy_admits_what_is_refused_whatever_the_settings(
    answers: list[str], networks: list[str], private: bool, named: bool
) -> None:
    egress = Egress(
        allow_private=private,
        allowed_networks=networks,
        allowed_hosts=["mcp.corp"] if named else [],
    )
    checked = egress_policy(egress, allow_private=False, allow_loopback=True)
    try:
        admitted = vet_target(checked, origin("mcp.corp"), answers)
    except ConnectionFailed as failure:
        assert failure.cause == "refused_address"
        return
    assert admitted
    for address in admitted:
        ipaddress.ip_address(address)
        assert refusal_reason(address, allow_private=True, allow_loopback=True) is None
