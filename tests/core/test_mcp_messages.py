"""The pure message rules (sansmcp.core.messages) as tables."""

from __future__ import annotations

import json
from typing import Any

import pytest

from sansmcp.core.errors import ConnectionFailed
from sansmcp.core.messages import (
    Verdict,
    build_body,
    classify_probe,
    match_response,
    negotiate_version,
)


def test_negotiate_version() -> None:
    assert negotiate_version(["b", "a"], ["a", "b", 3]) == "b"
    assert negotiate_version(["b"], "b") is None
    assert negotiate_version(["b"], ["c"]) is None


def test_build_body() -> None:
    assert build_body(None, "n", None) == b'{"jsonrpc":"2.0","method":"n"}'
    assert build_body(1, "m", {}, arguments=b"{ }") == (
        b'{"jsonrpc":"2.0","id":1,"method":"m","params":{"arguments":{ }}}'
    )
    assert build_body(2, "m", {"name": "x"}, arguments=b"{}") == (
        b'{"jsonrpc":"2.0","id":2,"method":"m","params":{"name":"x","arguments":{}}}'
    )


def err(code: Any, data: Any = None) -> dict[str, Any]:
    return {"error": {"code": code, "message": "m", "data": data}}


@pytest.mark.parametrize(
    ("status", "message", "method", "verdict"),
    [
        (400, err(-32022, {"supported": ["x"]}), "server/discover", Verdict.RETRY_VERSION),
        (400, err(-32022, {"supported": "x"}), "server/discover", Verdict.MODERN_ERROR),
        (200, err(-32021), "server/discover", Verdict.MODERN_ERROR),
        (500, err(-32021), "server/discover", Verdict.FAILED),
        (404, err(-32601), "tools/list", Verdict.MODERN_ERROR),
        (404, err(-32601), "server/discover", Verdict.LEGACY),
        (500, err(-32000), "tools/list", Verdict.FAILED),
        (200, {"result": {"resultType": "complete"}}, "tools/list", Verdict.MODERN),
        (200, {"result": {"resultType": "complete"}}, "server/discover", Verdict.LEGACY),
        (200, {"result": []}, "tools/list", Verdict.LEGACY),
        (405, None, "tools/list", Verdict.LEGACY),
        (500, None, "tools/list", Verdict.FAILED),
        (200, None, "tools/list", Verdict.FAILED),
    ],
)
def test_classify_probe(status: int, message: Any, method: str, verdict: Verdict) -> None:
    assert classify_probe(status, message, method=method) is verdict


@pytest.mark.parametrize(
    "parsed",
    [
        {"jsonrpc": "2.0", "result": {}},
        {"jsonrpc": "2.0", "id": 1, "method": 5},
        [{"id": 1, "result": {}}, 3],
        {"id": 1, "error": {"code": "x", "message": "m"}},
        {"id": True, "result": {}},
    ],
)
def test_match_response_refuses(parsed: Any) -> None:
    with pytest.raises(ConnectionFailed) as info:
        match_response(parsed, 1, batch_allowed=True, idless_ok=False)
    assert info.value.cause == "not_jsonrpc"


def test_match_response_splits_a_batch() -> None:
    note = {"jsonrpc": "2.0", "method": "n"}
    ours, others = match_response(
        [note, {"id": 1, "result": {}}], 1, batch_allowed=True, idless_ok=False
    )
    assert ours == {"id": 1, "result": {}} and others == [note]
    ours, _ = match_response(
        {"error": {"code": 1, "message": "m"}}, 4, batch_allowed=False, idless_ok=True
    )
    assert ours is not None and ours["id"] == 4


def test_build_body_puts_the_encoded_meta_first() -> None:
    meta = b'{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}'
    assert build_body(1, "tools/list", {}, meta=meta) == (
        b'{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":' + meta + b"}}"
    )
    body = build_body(2, "tools/call", {"name": "e"}, arguments=b'{"a": 1}', meta=meta)
    assert body == (
        b'{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"_meta":'
        + meta
        + b',"name":"e","arguments":{"a": 1}}}'
    )
    assert json.loads(body)["params"]["arguments"] == {"a": 1}
