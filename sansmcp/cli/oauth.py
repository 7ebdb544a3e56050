"""The command line's OAuth: a token file and the loopback redirect listener of ``login``.

``sansmcp login URL`` authorizes with authorization code + PKCE: the redirect URI is a
listener on 127.0.0.1 (a free port) that takes exactly one ``GET /callback``; the URL
to open is printed (``--open`` opens a browser).  Tokens and client registrations go
to ``$XDG_STATE_HOME/sansmcp/tokens.json`` (``~/.local/state`` without it; the
``SANSMCP_TOKEN_FILE`` variable overrides the path), written with mode 0600.
``sansmcp tools|call URL --oauth`` uses (and refreshes) them; ``sansmcp logout URL``
removes them.

The commands themselves live here too: ``login`` (authorize on the chosen backend,
list the tools once, keep the tokens), ``logout``, and the stored login a ``tools`` or
``call`` uses.  Loaded only when a command runs, not by ``import sansmcp.cli``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from ..core.config import Config
from ..core.oauth.store import ClientRegistration, OAuth, Tokens
from ..core.url import parse_endpoint
from .backends import BACKENDS, _list, _run
from .render import EXIT_OK
from .text import _emit, display_text

__all__ = ["FileTokenStore", "RedirectListener", "login", "logout", "stored_login", "token_file"]

TOKEN_FILE_ENV = "SANSMCP_TOKEN_FILE"


def token_file() -> Path:
    explicit = os.environ.get(TOKEN_FILE_ENV)
    if explicit:
        return Path(explicit)
    state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state) / "sansmcp" / "tokens.json"


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


class FileTokenStore:
    """A :class:`~sansmcp.core.oauth.store.TokenStore` in one JSON file (mode 0600).

    A file that cannot be read or parsed counts as empty; writes replace it atomically.
    """

    def __init__(self, path: Path) -> None:
        self.path = path

    def __repr__(self) -> str:
        return f"FileTokenStore({str(self.path)!r})"

    def _load(self) -> dict[str, Any]:
        try:
            data = json.loads(self.path.read_text("utf-8"))
        except (OSError, ValueError):
            return {"tokens": {}, "registrations": {}}
        if not isinstance(data, dict):
            return {"tokens": {}, "registrations": {}}
        for key in ("tokens", "registrations"):
            if not isinstance(data.get(key), dict):
                data[key] = {}
        return data

    def _save(self, data: dict[str, Any]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".tokens-")
        try:
            os.fchmod(fd, 0o600)
            with os.fdopen(fd, "w", encoding="utf-8") as sink:
                json.dump(data, sink, indent=1, sort_keys=True)
            os.replace(tmp, self.path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise

    def tokens(self, resource: str) -> Tokens | None:
        entry = self._load()["tokens"].get(resource)
        if not isinstance(entry, dict) or _str(entry.get("access_token")) is None:
            return None
        # no expires_at: it was on another process's clock
        return Tokens(
            access_token=entry["access_token"],
            token_type=_str(entry.get("token_type")) or "Bearer",  # a DPoP token stays DPoP
            refresh_token=_str(entry.get("refresh_token")),
            scope=_str(entry.get("scope")),
            issuer=_str(entry.get("issuer")) or "",
            token_endpoint=_str(entry.get("token_endpoint")) or "",
        )

    def save_tokens(self, resource: str, tokens: Tokens | None) -> None:
        data = self._load()
        if tokens is None:
            data["tokens"].pop(resource, None)
        else:
            data["tokens"][resource] = {
                "access_token": tokens.access_token,
                "token_type": tokens.token_type,
                "refresh_token": tokens.refresh_token,
                "scope": tokens.scope,
                "issuer": tokens.issuer,
                "token_endpoint": tokens.token_endpoint,
            }
        self._save(data)

    def registration(self, issuer: str) -> ClientRegistration | None:
        entry = self._load()["registrations"].get(issuer)
        if not isinstance(entry, dict) or _str(entry.get("client_id")) is None:
            return None
        return ClientRegistration(
            client_id=entry["client_id"],
            client_secret=_str(entry.get("client_secret")),
            auth_method=_str(entry.get("auth_method")) or "none",
        )

    def save_registration(self, issuer: str, registration: ClientRegistration) -> None:
        data = self._load()
        data["registrations"][issuer] = {
            "client_id": registration.client_id,
            "client_secret": registration.client_secret,
            "auth_method": registration.auth_method,
        }
        self._save(data)

    def forget(self, resource: str) -> bool:
        """Remove the tokens of ``resource``; whether there were any."""
        data = self._load()
        found = data["tokens"].pop(resource, None) is not None
        if found:
            self._save(data)
        return found


PAGE = b"sansmcp: authorized; you can close this window.\n"
NOT_FOUND = b"not found: sansmcp waits for the authorization redirect at /callback\n"


class RedirectListener:
    """One ``GET /callback`` on 127.0.0.1 (a free port), in a thread: the redirect URL."""

    def __init__(self) -> None:
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(4)
        self.port = int(self._sock.getsockname()[1])
        self.redirect_uri = f"http://127.0.0.1:{self.port}/callback"
        self.received: str | None = None
        self._done = threading.Event()

    def close(self) -> None:
        self._sock.close()

    def wait(self, timeout: float = 600.0) -> str | None:
        """Serve until the redirect comes (or ``timeout`` in all, however many other
        requests arrive); the full redirect URL.  Only a ``GET /callback`` whose query
        carries ``state`` is the redirect; anything else is answered 404 and ignored."""
        deadline = time.monotonic() + timeout
        while self.received is None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            self._sock.settimeout(remaining)
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return None
            with conn:
                conn.settimeout(min(10.0, remaining))
                head = b""
                with contextlib.suppress(OSError):
                    while b"\r\n\r\n" not in head and len(head) < 16384:
                        chunk = conn.recv(4096)
                        if not chunk:
                            break
                        head += chunk
                line = head.split(b"\r\n", 1)[0].decode("latin-1")
                parts = line.split(" ")
                target = parts[1] if len(parts) >= 2 else ""
                split = urlsplit(target)
                if (
                    parts[0] == "GET"
                    and split.path == "/callback"
                    and "state" in parse_qs(split.query)
                ):
                    self.received = f"http://127.0.0.1:{self.port}{target}"
                    status, page = b"200 OK", PAGE
                else:  # a browser's /favicon.ico, a stray request: not the redirect
                    status, page = b"404 Not Found", NOT_FOUND
                with contextlib.suppress(OSError):
                    conn.sendall(
                        b"HTTP/1.1 " + status + b"\r\ncontent-type: text/plain\r\n"
                        b"connection: close\r\ncontent-length: "
                        + str(len(page)).encode()
                        + b"\r\n\r\n"
                        + page
                    )
        return self.received


def announce(url: str, *, open_browser: bool) -> None:
    print(f"sansmcp: open this URL to authorize:\n{url}", file=sys.stderr, flush=True)
    if open_browser:
        import webbrowser

        webbrowser.open(url)


def stored_login(url: str, *, wanted: bool) -> OAuth | None:
    """OAuth on the tokens ``sansmcp login`` stored: with ``--oauth``, or without it
    when a login for ``url`` is stored and no bearer token was given."""
    store = FileTokenStore(token_file())
    if wanted or store.tokens(parse_endpoint(url).url) is not None:
        return OAuth(store=store)
    return None


def login(args: argparse.Namespace, client_options: dict[str, Any]) -> int:
    """``sansmcp login URL``: authorize, list the tools once, keep the tokens."""
    listener = RedirectListener()
    try:
        store = FileTokenStore(token_file())
        oauth = OAuth(
            client_id=args.client_id,
            client_name="sansmcp command line",
            redirect_uri=listener.redirect_uri,
            authorize=BACKENDS[args.backend].authorizer(
                lambda url: announce(url, open_browser=args.open), listener.wait
            ),
            store=store,
        )
        config = Config(url=args.url, protocol_versions=args.protocol_versions, oauth=oauth)
        listing = _run(args.backend, client_options, config, _list)
    finally:
        listener.close()
    _emit(sys.stderr, f"sansmcp: logged in; {len(listing.tools)} tools; tokens in {store.path}")
    return EXIT_OK


def logout(args: argparse.Namespace) -> int:
    """``sansmcp logout URL``: forget the stored tokens for URL."""
    store = FileTokenStore(token_file())
    found = store.forget(parse_endpoint(args.url).url)
    shown = display_text(args.url)
    _emit(
        sys.stderr,
        f"sansmcp: logged out of {shown}" if found else f"sansmcp: no stored tokens for {shown}",
    )
    return EXIT_OK
