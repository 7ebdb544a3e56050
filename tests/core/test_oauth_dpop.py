"""DPoP (RFC 9449) in the OAuth machine against a scripted world (pure): proofs, nonces, bounds."""

from __future__ import annotations

import base64
import hashlib
import json
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs

import pytest

from sansmcp.core.errors import CallerError, ConnectionFailed, Unauthorized
from sansmcp.core.http import HttpRequest, header_value
from sansmcp.core.mcp import Connected, StartExchange, ToolsListed
from sansmcp.core.oauth.dpop import htu_of, nonce_of
from sansmcp.core.oauth.store import MemoryTokenStore, OAuth, Tokens

from .fakemcp import Response, json_response
from .oauth_world import MCP, REDIRECT, Runner, World

WALL = 1_700_000_000.75


class Key:
    """A fake DPoP key: a fixed public JWK, a signature the world can check."""

    alg = "ES256"

    def __init__(self, jwk: object = None, signature: object = b"sig") -> None:
        self.jwk = {"kty": "EC", "crv": "P-256", "x": "x", "y": "y"} if jwk is None else jwk
        self.signature = signature
        self.signed: list[bytes] = []

    def sign(self, data: bytes) -> Any:
        self.signed.append(data)
        return self.signature

    def public_jwk(self) -> Any:
        return self.jwk


def _part(text: str) -> dict[str, Any]:
    return dict(json.loads(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))))


def decode(proof: bytes) -> tuple[dict[str, Any], dict[str, Any]]:
    head, body, signature = proof.decode().split(".")
    assert base64.urlsafe_b64decode(signature + "=" * (-len(signature) % 4)) == b"sig"
    return _part(head), _part(body)


def ath(token: str) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(token.encode()).digest()).rstrip(b"=").decode()


@dataclass
class DpopWorld(World):
    """The MCP server wants ``Authorization: DPoP`` with a proof; both servers may want a nonce."""

    as_nonces: list[str] = field(default_factory=list)  # the nonce a proof must carry
    rs_nonces: list[str] = field(default_factory=list)
    rotate: bool = False  # a new nonce on every challenge (never satisfied)
    token_type: str = "DPoP"
    token_proofs: list[tuple[dict[str, Any], dict[str, Any]]] = field(default_factory=list)
    mcp_proofs: list[tuple[dict[str, Any], dict[str, Any]]] = field(default_factory=list)
    rs_error: str = "use_dpop_nonce"

    def challenge_with(self, nonces: list[str], claims: dict[str, Any]) -> str | None:
        if not nonces or (not self.rotate and claims.get("nonce") == nonces[0]):
            return None
        return nonces.pop(0) if self.rotate else nonces[0]

    def token(self, request: HttpRequest) -> Response:
        proof = header_value(request.headers, b"dpop")
        assert proof is not None
        header, claims = decode(proof)
        self.token_proofs.append((header, claims))
        nonce = self.challenge_with(self.as_nonces, claims)
        if nonce is not None:
            return json_response(
                {"error": "use_dpop_nonce"}, 400, headers=[(b"dpop-nonce", nonce.encode())]
            )
        form = {k: v[0] for k, v in parse_qs(request.body.decode()).items()}
        self.forms.append(form)
        self.minted += 1
        token = f"t-{self.minted}"
        self.issued[token] = ""
        return json_response({"access_token": token, "token_type": self.token_type})

    def mcp_answer(self, request: HttpRequest) -> Response:
        raw = header_value(request.headers, b"authorization")
        proof = header_value(request.headers, b"dpop")
        if raw is None or not raw.startswith(b"DPoP ") or proof is None:
            value = b'DPoP realm="mcp"'
            return Response(status=401, headers=[(b"www-authenticate", value)])
        token = raw.decode()[5:]
        header, claims = decode(proof)
        self.mcp_proofs.append((header, claims))
        assert token in self.issued and claims["ath"] == ath(token)
        nonce = self.challenge_with(self.rs_nonces, claims)
        if nonce is not None:
            value = f'DPoP error="{self.rs_error}"'.encode()
            return Response(
                status=401,
                headers=[(b"www-authenticate", value), (b"dpop-nonce", nonce.encode())],
            )
        return self.mcp(request) or Response(status=202)


def dpop_runner(world: DpopWorld, key: Key | None = None, **kw: Any) -> Runner:
    oauth = OAuth(redirect_uri=REDIRECT, dpop_key=key or Key(), **kw)
    return Runner(world, oauth, wall_clock=lambda: WALL)


def test_proofs_at_the_token_endpoint_and_on_every_mcp_request() -> None:
    world = DpopWorld()
    runner = dpop_runner(world)
    assert isinstance(runner.run(runner.machine.connect), Connected)
    assert isinstance(runner.run(runner.machine.list_tools), ToolsListed)
    ((header, claims),) = world.token_proofs
    assert header == {"typ": "dpop+jwt", "alg": "ES256", "jwk": Key().jwk}
    assert claims["htm"] == "POST" and claims["htu"] == "https://auth.example.com/token"
    assert claims["iat"] == 1_700_000_000
    assert "ath" not in claims and "nonce" not in claims
    assert len(world.mcp_proofs) >= 2  # connect's and tools/list's
    for header, claims in world.mcp_proofs:
        assert header["typ"] == "dpop+jwt" and claims["htu"] == MCP
        assert claims["ath"] == ath("t-1") and "nonce" not in claims
    jtis = [c["jti"] for _, c in world.token_proofs + world.mcp_proofs]
    assert len(set(jtis)) == len(jtis)  # fresh per request
    stored = runner.oauth.store.tokens(MCP)
    assert isinstance(stored, Tokens) and stored.token_type == "DPoP"
    assert "t-1" not in repr(stored)
    sent = [o.request for o in runner.outputs if isinstance(o, StartExchange) and o.origin is None]
    assert all(b"Bearer" not in (header_value(r.headers, b"authorization") or b"") for r in sent)


def test_a_nonce_from_each_server_is_answered_by_one_retry() -> None:
    world = DpopWorld(as_nonces=["as-n"], rs_nonces=["rs-n"])
    runner = dpop_runner(world)
    assert isinstance(runner.run(runner.machine.connect), Connected)
    assert [c.get("nonce") for _, c in world.token_proofs] == [None, "as-n"]
    assert [c.get("nonce") for _, c in world.mcp_proofs][:2] == [None, "rs-n"]
    assert all(c.get("nonce") == "rs-n" for _, c in world.mcp_proofs[1:])
    assert len(world.forms) == 1 and runner.asked and len(runner.asked) == 1


def test_a_nonce_the_authorization_server_keeps_changing_is_token_failed() -> None:
    world = DpopWorld(as_nonces=["n1", "n2", "n3"], rotate=True)
    runner = dpop_runner(world)
    error = runner.fail(runner.run(runner.machine.connect))
    assert isinstance(error, Unauthorized) and error.cause == "token_failed"
    assert len(world.token_proofs) == 2  # the request, one retry


@pytest.mark.parametrize(
    "response",
    [
        json_response({"error": "use_dpop_nonce"}, 400),  # no DPoP-Nonce
        json_response({"error": "use_dpop_nonce"}, 400, headers=[(b"dpop-nonce", b"a b")]),
        json_response({"error": "use_dpop_nonce"}, 400, headers=[(b"dpop-nonce", b"n" * 513)]),
        json_response({"error": "invalid_grant"}, 400, headers=[(b"dpop-nonce", b"n")]),
        Response(status=400, headers=[(b"dpop-nonce", b"n")], chunks=[b"not json"]),
        json_response({"error": "use_dpop_nonce"}, 401, headers=[(b"dpop-nonce", b"n")]),
    ],
)
def test_no_retry_without_a_usable_nonce_challenge(response: Response) -> None:
    world = DpopWorld()
    calls: list[int] = []

    def token(request: HttpRequest) -> Response:
        calls.append(1)
        return response

    world.overrides["/token"] = token
    runner = dpop_runner(world)
    error = runner.fail(runner.run(runner.machine.connect))
    assert isinstance(error, Unauthorized) and error.cause == "token_failed"
    assert calls == [1]


def test_a_bearer_token_type_is_refused_when_dpop_was_asked() -> None:
    world = DpopWorld(token_type="Bearer")
    runner = dpop_runner(world)
    error = runner.fail(runner.run(runner.machine.connect))
    assert isinstance(error, ConnectionFailed) and error.cause == "bad_document"
    assert "is not DPoP" in str(error)


def test_a_dpop_token_type_is_refused_without_a_dpop_key() -> None:
    world = World()
    world.overrides["/token"] = lambda r: json_response({"access_token": "t", "token_type": "DPoP"})
    runner = Runner(world)
    error = runner.fail(runner.run(runner.machine.connect))
    assert isinstance(error, ConnectionFailed) and "is not Bearer" in str(error)


def test_a_resource_server_nonce_that_keeps_changing_stops_at_max_auth_attempts() -> None:
    world = DpopWorld(rs_nonces=[f"n{i}" for i in range(20)], rotate=True)
    runner = dpop_runner(world)
    error = runner.fail(runner.run(runner.machine.connect))
    assert isinstance(error, Unauthorized) and error.cause == "token_rejected"
    assert len(world.mcp_proofs) <= 3 * 3  # bounded by Limits.max_auth_attempts
    assert "t-1" not in str(error) and "t-1" not in repr(error)


def test_a_401_with_a_nonce_but_another_error_reauthorizes() -> None:
    world = DpopWorld(rs_nonces=["n1"], rs_error="invalid_token")
    runner = dpop_runner(world)
    assert isinstance(runner.run(runner.machine.connect), Connected)
    assert len(world.forms) == 2  # no nonce retry: a second authorization
    assert world.mcp_proofs[-1][1]["nonce"] == "n1"


def test_a_nonce_on_a_success_is_used_without_a_retry() -> None:
    world = DpopWorld()
    inner = world.mcp_answer

    def answer(request: HttpRequest) -> Response:
        response = inner(request)
        if response.status != 401:
            response.headers.append((b"dpop-nonce", b"next"))
        return response

    world.mcp_answer = answer  # type: ignore[method-assign]
    runner = dpop_runner(world)
    assert isinstance(runner.run(runner.machine.connect), Connected)
    assert isinstance(runner.run(runner.machine.list_tools), ToolsListed)
    nonces = [c.get("nonce") for _, c in world.mcp_proofs]
    assert nonces[0] is None and nonces[-1] == "next"


@pytest.mark.parametrize(
    ("token_type", "key", "scheme"),
    [("DPoP", True, b"DPoP "), ("Bearer", True, b"Bearer "), ("DPoP", False, b"Bearer ")],
)
def test_a_stored_token_goes_with_its_type(token_type: str, key: bool, scheme: bytes) -> None:
    store = MemoryTokenStore()
    store.save_tokens(MCP, Tokens(access_token="kept", token_type=token_type))
    oauth = OAuth(redirect_uri=REDIRECT, store=store, dpop_key=Key() if key else None)
    runner = Runner(World(), oauth, wall_clock=lambda: WALL)
    runner.machine.connect(now=0.0)
    first = runner.machine.next_output()
    assert isinstance(first, StartExchange)
    raw = header_value(first.request.headers, b"authorization")
    assert raw is not None and raw.startswith(scheme)
    assert (header_value(first.request.headers, b"dpop") is not None) == (scheme == b"DPoP ")


@pytest.mark.parametrize(
    ("key", "match"),
    [
        (Key(jwk=["not", "a", "mapping"]), "public JWK"),
        (Key(jwk={"kty": "EC", "d": "private"}), "public JWK"),
        (Key(signature="text"), "signature as bytes"),
    ],
)
def test_a_bad_key_is_a_caller_error(key: Key, match: str) -> None:
    runner = dpop_runner(DpopWorld(), key)
    with pytest.raises(CallerError, match=match):
        runner.run(runner.machine.connect)


def test_htu_and_nonce_parsing() -> None:
    assert htu_of("https://h/p?q=1#f") == "https://h/p"
    assert htu_of("https://h/p#f?x") == "https://h/p"
    assert nonce_of(((b"dpop-nonce", b"abc"),)) == "abc"
    assert nonce_of(((b"dpop-nonce", b""),)) is None
    assert nonce_of(()) is None
