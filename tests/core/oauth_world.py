"""A pure fake world for the OAuth machine: an MCP server that wants a bearer token, its
protected resource metadata and an authorization server, all scripted (pure tests only).

``World`` answers every ``StartExchange`` (routed by the exchange's ``origin``: None is
the MCP server) and plays the person at the authorization endpoint: ``person(url)``
returns the redirect the authorization server would send.  Tests bend it through its
attributes (documents, status overrides per path, the redirect's parameters).
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

from sansmcp.core.errors import ConnectionFailed
from sansmcp.core.fleet_auth import SharedAuth
from sansmcp.core.http import (
    DataReceived,
    ExchangeFailed,
    HttpRequest,
    ResponseEnded,
    ResponseReceived,
    header_value,
)
from sansmcp.core.mcp import (
    CancelExchange,
    Closed,
    Connected,
    ConnSettings,
    McpMachine,
    OperationFailed,
    Output,
    StartExchange,
    ToolCalled,
    ToolsListed,
)
from sansmcp.core.oauth.machine import OAuthMachine
from sansmcp.core.oauth.store import AuthorizationNeeded, OAuth, StoreWanted
from sansmcp.core.store import MemoryStore, StoreAnswer, StoreCommand
from sansmcp.core.url import parse_endpoint

from .fakemcp import FakeServer, Response, json_response

MCP = "https://mcp.example.com/mcp"
AS = "https://auth.example.com"
REDIRECT = "http://127.0.0.1:9/callback"


def counter_bytes() -> Callable[[int], bytes]:
    state = [0]

    def random_bytes(n: int) -> bytes:
        state[0] += 1
        return bytes([state[0] % 256]) * n

    return random_bytes


@dataclass
class World:
    mcp: FakeServer = field(default_factory=FakeServer)
    resource: str = MCP
    authorization_servers: list[Any] = field(default_factory=lambda: [AS])
    issuer: str = AS
    as_url: str = AS  # where the metadata's endpoints are
    prm_extra: dict[str, Any] = field(default_factory=dict)
    meta_extra: dict[str, Any] = field(default_factory=dict)
    challenge: str = 'Bearer realm="mcp"'
    named_prm: bool = False  # the challenge names the PRM URL
    needed_scope: str | None = None  # a 403 insufficient_scope until a token has it
    overrides: dict[str, Callable[[HttpRequest], Response]] = field(default_factory=dict)
    redirect_extra: dict[str, str] = field(default_factory=dict)
    drop: tuple[str, ...] = ()  # redirect parameters left out
    refresh_token: str | None = "r-1"
    issued: dict[str, str] = field(default_factory=dict)  # token -> scope
    log: list[tuple[str, str, str]] = field(default_factory=list)  # host, method, path
    bodies: list[bytes] = field(default_factory=list)
    last_query: dict[str, str] = field(default_factory=dict)
    forms: list[dict[str, str]] = field(default_factory=list)
    refuse_tokens: bool = False  # the MCP server 401s every token
    grant_scopes: bool = True  # False: tokens carry no scope, whatever was asked
    minted: int = 0

    # -------------------------------------------------------------- routing

    def __call__(self, start: StartExchange) -> Response:
        request = start.request
        host = request.authority.decode()
        path = request.target.decode().split("?", 1)[0]
        self.log.append((host, request.method.decode(), path))
        self.bodies.append(request.body)
        override = self.overrides.get(path)
        if override is not None:
            return override(request)
        if start.origin is None:
            return self.mcp_answer(request)
        if path.startswith("/.well-known/oauth-protected-resource"):
            return json_response(
                {"resource": self.resource, "authorization_servers": self.authorization_servers}
                | self.prm_extra
            )
        if path == "/.well-known/oauth-authorization-server":
            return json_response(self.metadata())
        if path == "/token":
            return self.token(request)
        if path == "/register":
            return json_response({"client_id": "dcr-client"}, 201)
        return Response(status=404)

    def metadata(self) -> dict[str, Any]:
        return {
            "issuer": self.issuer,
            "authorization_endpoint": f"{self.as_url}/authorize",
            "token_endpoint": f"{self.as_url}/token",
            "registration_endpoint": f"{self.as_url}/register",
            "code_challenge_methods_supported": ["S256"],
            "authorization_response_iss_parameter_supported": True,
        } | self.meta_extra

    def mcp_answer(self, request: HttpRequest) -> Response:
        raw = header_value(request.headers, b"authorization")
        token = raw.decode()[7:] if raw is not None and raw.startswith(b"Bearer ") else None
        if token is None or token not in self.issued or self.refuse_tokens:
            value = self.challenge
            if self.named_prm:
                value = f'Bearer resource_metadata="{AS}/.well-known/oauth-protected-resource"'
            return Response(status=401, headers=[(b"www-authenticate", value.encode())])
        if self.needed_scope and self.needed_scope not in self.issued[token].split():
            value = f'Bearer error="insufficient_scope", scope="{self.needed_scope}"'
            return Response(status=403, headers=[(b"www-authenticate", value.encode())])
        return self.mcp(request) or Response(status=202)

    def token(self, request: HttpRequest) -> Response:
        form = {k: v[0] for k, v in parse_qs(request.body.decode()).items()}
        self.forms.append(form)
        if form.get("grant_type") == "authorization_code":
            verifier = form.get("code_verifier", "")
            digest = hashlib.sha256(verifier.encode()).digest()
            challenge = base64.urlsafe_b64encode(digest).rstrip(b"=").decode()
            if challenge != self.last_query.get("code_challenge"):
                return json_response({"error": "invalid_grant"}, 400)
        self.minted += 1
        token = f"t-{self.minted}"
        self.issued[token] = self.last_query.get("scope", "") if self.grant_scopes else ""
        answer: dict[str, Any] = {"access_token": token, "token_type": "Bearer", "expires_in": 60}
        if self.refresh_token is not None:
            answer["refresh_token"] = self.refresh_token
        return json_response(answer)

    # -------------------------------------------------------------- the person

    def person(self, url: str) -> str:
        query = {k: v[0] for k, v in parse_qs(urlsplit(url).query).items()}
        self.last_query = query
        params = {"code": "c-1", "state": query.get("state", ""), "iss": self.issuer}
        params |= self.redirect_extra
        for name in self.drop:
            params.pop(name, None)
        return f"{query['redirect_uri']}?{urlencode(params)}"


_TERMINAL = (Connected, ToolsListed, ToolCalled, OperationFailed, Closed)


class Runner:
    """Plays the driver and the adapter for one OAuthMachine against a World."""

    def __init__(
        self,
        world: World,
        oauth: OAuth | None = None,
        *,
        answer: Callable[[str], object] | None = None,
        chunk: int | None = None,
        url: str = MCP,
        wall_clock: Callable[[], float] | None = None,
        store: MemoryStore | None = None,
        holder: str = "worker-1",
        **limits: Any,
    ) -> None:
        from sansmcp.core.limits import Limits

        self.world = world
        # with a store: the fleet's (a MemoryStore several Runners share); ``store_hook``
        # may answer a command instead (None: the store answers), ``store_silent`` never
        self.store = store
        self.store_hook: Callable[[StoreCommand], StoreAnswer | None] = lambda command: None
        self.store_silent = False
        self.store_commands: list[StoreCommand] = []
        self.oauth = oauth or OAuth(redirect_uri=REDIRECT)
        self.answer = answer if answer is not None else world.person
        self.now = 0.0
        self.chunk = chunk
        self.framing = 0  # wire bytes of framing around each piece of a body (chunk lines)
        self.cancelled: set[int] = set()
        self.outputs: list[Any] = []
        self.asked: list[str] = []
        exchange_ids = iter(range(1, 1 << 30))
        limits_value = Limits(**limits)
        shared = (
            None
            if store is None
            else SharedAuth(self.oauth, parse_endpoint(url).url, limits=limits_value, holder=holder)
        )
        self.machine = OAuthMachine(
            McpMachine(
                ConnSettings(endpoint=parse_endpoint(url)),
                limits=limits_value,
                exchange_ids=exchange_ids,
            ),
            oauth=self.oauth,
            random_bytes=counter_bytes(),
            wall_clock=wall_clock,
            exchange_ids=exchange_ids,
            shared=shared,
        )
        self.stall: set[str] = set()  # paths whose answer never comes

    def run(self, start: Callable[..., None], *args: Any) -> Output:
        start(*args, now=self.now)
        return self.pump()

    def pump(self) -> Output:
        machine = self.machine
        for _ in range(10_000):
            out = machine.next_output()
            if out is None:
                deadline = machine.next_deadline()
                assert deadline is not None, "stuck"
                self.now = max(self.now, deadline)
                machine.handle_timer(now=self.now)
                continue
            self.outputs.append(out)
            if isinstance(out, StartExchange):
                path = out.request.target.decode().split("?", 1)[0]
                response = self.world(out)
                if path not in self.stall:
                    self.deliver(out.exchange_id, response)
            elif isinstance(out, CancelExchange):
                self.cancelled.add(out.exchange_id)
            elif isinstance(out, AuthorizationNeeded):
                self.asked.append(out.url)
                self.now += 600.0  # a person takes minutes: outside every budget
                machine.authorized(out.auth_id, self.answer(out.url), now=self.now)
            elif isinstance(out, StoreWanted):
                self.store_commands.append(out.command)
                if self.store_silent:
                    continue
                answer = self.store_hook(out.command)
                if answer is None:
                    assert self.store is not None
                    answer = self.store.execute(out.command, now=self.now)
                machine.store_answered(out.request_id, answer, now=self.now)
            elif isinstance(out, _TERMINAL):
                return out
        raise AssertionError("no terminal event")

    def deliver(self, exchange_id: int, response: Response) -> None:
        def feed(event: Any) -> bool:
            if exchange_id in self.cancelled:
                return False
            self.machine.receive(event, now=self.now)
            return True

        if response.head and not feed(
            ResponseReceived(
                exchange_id=exchange_id,
                status=response.status,
                headers=tuple(response.headers),
                raw_size=100,
            )
        ):
            return
        for data in response.chunks:
            pieces = [data]
            if self.chunk:
                pieces = [data[i : i + self.chunk] for i in range(0, len(data), self.chunk)]
            for piece in pieces:
                piece_event = DataReceived(
                    exchange_id=exchange_id, data=piece, overhead=self.framing
                )
                if not feed(piece_event):
                    return
        if response.fail is not None:
            feed(ExchangeFailed(exchange_id=exchange_id, error=response.fail))
        elif response.end:
            feed(ResponseEnded(exchange_id=exchange_id))

    def fail(self, outcome: Output) -> Any:
        assert isinstance(outcome, OperationFailed), outcome
        return outcome.error


def reset(message: str = "reset") -> ConnectionFailed:
    return ConnectionFailed(message, cause="reset")


def body_json(data: bytes) -> Any:
    return json.loads(data)
