"""The embedder's pending asks, and the server requests that become them.

An ask is an :class:`~.events.InputRequired` waiting for ``McpMachine.answer_input``.
It is either the operation's own (a multi round-trip call asked for input: the answer
resumes its script) or a server request found on a legacy session's stream (the answer,
or a decline, goes back to the server as a side exchange).  A server request never
reaches the embedder when a modern server sent it (nothing may answer it), when it is a
``ping`` (answered at once) or when the client declared no capability to answer it
(``METHOD_NOT_FOUND``).  An operation that ends takes its asks with it, except the
server requests of the standalone stream, which stay answerable; a close declines
every server request still asked, so each gets its answer before the connection ends.
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Mapping
from typing import Any, Final

from ..messages import METHOD_NOT_FOUND
from . import rules
from .events import InputRequired, Output
from .exchange import Exchange, Role
from .requests import Requests
from .session import Era, Session
from .transport import Transport

__all__ = ["Asks"]

_LEGACY: Final = Era.LEGACY
_LISTEN: Final = Role.LISTEN


class Asks:
    """The asks of one connection by input id: the exchange a server request came on
    (None: the operation's own ask) and the server's id for it.  ``can_answer``: the
    client declared capabilities; ``wait``: how long an answer's exchange may take."""

    __slots__ = (
        "_exchanges",
        "_ids",
        "_server_ids",
        "can_answer",
        "outputs",
        "requests",
        "session",
        "transport",
        "wait",
    )

    def __init__(
        self,
        transport: Transport,
        requests: Requests,
        session: Session,
        *,
        can_answer: bool,
        wait: float,
    ) -> None:
        self.transport = transport
        self.requests = requests
        self.session = session
        self.outputs: deque[Output] = transport.outputs
        self.can_answer = can_answer
        self.wait = wait
        self._ids = itertools.count(1)
        self._exchanges: dict[int, Exchange | None] = {}
        self._server_ids: dict[int, Any] = {}

    def __contains__(self, input_id: int) -> bool:
        return input_id in self._exchanges

    def __len__(self) -> int:
        return len(self._exchanges)

    def ask(self, requests: Mapping[str, Mapping[str, Any]]) -> None:
        """The operation asks the embedder for input (a multi round-trip call)."""
        input_id = next(self._ids)
        self._exchanges[input_id] = None
        self.outputs.append(
            InputRequired(input_id=input_id, requests=requests, server_request=False)
        )

    def answer(self, input_id: int, answers: Mapping[str, Any] | None, now: float) -> bool:
        """The embedder answered ``input_id``: a server request's answer is sent; True
        when it was the operation's own ask (its script resumes with ``answers``).
        Answers that are not usable are a ``CallerError``, raised before anything
        changes; an ask whose operation or connection ended is ignored."""
        if input_id not in self._exchanges:
            return False  # the operation ended meanwhile
        answers = rules.checked_answers(answers)
        if self._exchanges.pop(input_id) is None:
            return True
        server_id = self._server_ids.pop(input_id)
        if answers is not None and isinstance(answers.get("request"), Mapping):
            self._answer(server_id, now, result=answers["request"])
        else:
            self._answer(server_id, now, error={"code": -32600, "message": "declined by the user"})
        return False

    def serve(self, now: float) -> None:
        """Answer or ask about the server requests the transport found."""
        asked = self.transport.asked
        for exchange, request in asked:
            self._server_request(exchange, request, now)
        asked.clear()

    def end_operation(self) -> None:
        """The operation ended: its asks go, but for the standalone stream's requests."""
        exchanges = self._exchanges
        for input_id, exchange in list(exchanges.items()) if exchanges else ():
            if exchange is None or exchange.role is not _LISTEN:
                del exchanges[input_id]
                self._server_ids.pop(input_id, None)

    def decline_all(self, now: float) -> None:
        """The connection closes: every server request still asked is declined."""
        for input_id, exchange in list(self._exchanges.items()):
            if exchange is not None:
                self._answer(
                    self._server_ids[input_id],
                    now,
                    error={"code": -32600, "message": "the client closed the connection"},
                )
        self._exchanges.clear()
        self._server_ids.clear()

    def _server_request(self, exchange: Exchange, request: dict[str, Any], now: float) -> None:
        if self.session.era is not _LEGACY:
            return  # a modern server must not send requests; nothing may answer them
        server_id = request["id"]
        method = request["method"]
        if method == "ping":
            self._answer(server_id, now, result={})
            return
        if not self.can_answer:
            self._answer(
                server_id,
                now,
                error={"code": METHOD_NOT_FOUND, "message": f"client does not support {method}"},
            )
            return
        input_id = next(self._ids)
        self._exchanges[input_id] = exchange
        self._server_ids[input_id] = server_id
        params = request.get("params")
        self.outputs.append(
            InputRequired(
                input_id=input_id,
                requests={
                    "request": {"method": method, "params": params if params is not None else {}}
                },
                server_request=True,
            )
        )

    def _answer(self, server_id: Any, now: float, *, result: Any = None, error: Any = None) -> None:
        request = self.requests.answer(server_id, result=result, error=error)
        self.transport.side(request, self.wait, now)
