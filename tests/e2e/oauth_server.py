"""A small OAuth 2.1 authorization server for the e2e suite, in a thread on loopback.

RFC 8414 metadata at ``/.well-known/oauth-authorization-server``, dynamic registration
at ``/register``, ``/authorize`` redirecting straight back (code, state, iss: the
person always consents), ``/token`` for ``authorization_code`` (PKCE S256 checked)
and ``refresh_token``.  Access tokens start with ``e2e-``, which the e2e server's
``--oauth`` gate accepts.  ``requests`` records every (method, path).

``AuthServer(lifetime=1.0)`` behaves as real authorization servers do with a grant many
processes share: access tokens expire after ``lifetime`` seconds (each carries its expiry,
``e2e-exp-<unix ms>-<n>``, which the gate checks), refresh tokens rotate (one family per
authorization code), and a refresh token used a second time revokes its whole family:
every refresh of it is refused from then on.  ``refreshes`` (granted), ``reuses``,
``revocations`` (families) and ``refused`` (refreshes refused) count what happened.
"""

from __future__ import annotations

import base64
import hashlib
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit


class AuthServer:
    def __init__(self, *, lifetime: float | None = None) -> None:
        self.lifetime = lifetime
        self.lock = threading.Lock()  # (the handler threads of a fleet's refreshes)
        self.families: list[str] = []  # family -> its current refresh token ("": revoked)
        self.issued: dict[str, int] = {}  # every refresh token issued -> its family
        self.refreshes = self.reuses = self.revocations = self.refused = 0
        self.requests: list[tuple[str, str]] = []
        self.challenges: dict[str, str] = {}  # code -> code_challenge
        self.minted = 0
        self.forms: list[dict[str, str]] = []
        self.dpop_nonces: list[object] = []  # the nonce of each DPoP proof at /token
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                outer.get(self)

            def do_POST(self) -> None:
                outer.post(self)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> AuthServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def _send(
        self, handler: BaseHTTPRequestHandler, status: int, body: Any = None, **headers: str
    ) -> None:
        data = b"" if body is None else json.dumps(body).encode()
        handler.send_response(status)
        handler.send_header("content-type", "application/json")
        handler.send_header("content-length", str(len(data)))
        for name, value in headers.items():
            handler.send_header(name, value)
        handler.end_headers()
        handler.wfile.write(data)

    def get(self, handler: BaseHTTPRequestHandler) -> None:
        parts = urlsplit(handler.path)
        self.requests.append(("GET", parts.path))
        if parts.path == "/.well-known/oauth-authorization-server":
            self._send(
                handler,
                200,
                {
                    "issuer": self.url,
                    "authorization_endpoint": f"{self.url}/authorize",
                    "token_endpoint": f"{self.url}/token",
                    "registration_endpoint": f"{self.url}/register",
                    "code_challenge_methods_supported": ["S256"],
                    "authorization_response_iss_parameter_supported": True,
                },
            )
        elif parts.path == "/authorize":
            query = {k: v[0] for k, v in parse_qs(parts.query).items()}
            code = f"code-{len(self.challenges) + 1}"
            self.challenges[code] = query.get("code_challenge", "")
            back = urlencode({"code": code, "state": query.get("state", ""), "iss": self.url})
            self._send(handler, 302, None, location=f"{query['redirect_uri']}?{back}")
        else:
            self._send(handler, 404, {"error": "not_found"})

    def post(self, handler: BaseHTTPRequestHandler) -> None:
        path = urlsplit(handler.path).path
        self.requests.append(("POST", path))
        body = handler.rfile.read(int(handler.headers.get("content-length") or 0))
        if path == "/register":
            self._send(handler, 201, {"client_id": "e2e-client"})
            return
        if path != "/token":
            self._send(handler, 404, {"error": "not_found"})
            return
        form = {k: v[0] for k, v in parse_qs(body.decode()).items()}
        self.forms.append(form)
        if form.get("grant_type") == "authorization_code":
            verifier = form.get("code_verifier", "").encode()
            digest = base64.urlsafe_b64encode(hashlib.sha256(verifier).digest()).rstrip(b"=")
            if self.challenges.get(form.get("code", "")) != digest.decode():
                self._send(handler, 400, {"error": "invalid_grant"})
                return
        elif form.get("grant_type") != "refresh_token":
            self._send(handler, 400, {"error": "unsupported_grant_type"})
            return
        if self.lifetime is not None:
            self._rotating(handler, form)
            return
        self.minted += 1
        proof = handler.headers.get("dpop")
        if proof is not None:  # DPoP (RFC 9449): a nonce is required, the token is bound
            from .dpop_check import verify

            try:
                claims = verify(proof, "POST", f"{self.url}/token")
            except (ValueError, KeyError) as exc:
                self._send(handler, 400, {"error": "invalid_dpop_proof", "why": str(exc)})
                return
            self.dpop_nonces.append(claims.get("nonce"))
            if claims.get("nonce") != "as-nonce":
                self._send(handler, 400, {"error": "use_dpop_nonce"}, **{"DPoP-Nonce": "as-nonce"})
                return
            answer = {"access_token": f"e2e-dpop-{self.minted}", "token_type": "DPoP"}
            self._send(handler, 200, answer)
            return
        self._send(
            handler,
            200,
            {
                "access_token": f"e2e-{self.minted}",
                "token_type": "Bearer",
                "expires_in": 3600,
                "refresh_token": "e2e-refresh",
            },
        )

    def _rotating(self, handler: BaseHTTPRequestHandler, form: dict[str, str]) -> None:
        """``lifetime`` set: short-lived access tokens, rotating refresh tokens, a family
        revoked on any reuse."""
        assert self.lifetime is not None
        with self.lock:
            if form.get("grant_type") == "refresh_token":
                used = form.get("refresh_token", "")
                family = self.issued.get(used)
                if family is None or self.families[family] != used:
                    self.refused += 1
                    if family is not None and self.families[family]:
                        self.reuses += 1  # a rotated token came back: revoke the family
                        self.revocations += 1
                        self.families[family] = ""
                    self._send(handler, 400, {"error": "invalid_grant"})
                    return
                self.refreshes += 1
            else:
                family = len(self.families)
                self.families.append("")
            self.minted += 1
            rotated = f"e2e-rt-{family}-{self.minted}"
            self.families[family] = rotated
            self.issued[rotated] = family
            until = int((time.time() + self.lifetime) * 1000)
            answer = {
                "access_token": f"e2e-exp-{until}-{self.minted}",
                "token_type": "Bearer",
                "expires_in": self.lifetime,
                "refresh_token": rotated,
            }
        self._send(handler, 200, answer)
