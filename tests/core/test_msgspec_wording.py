"""What msgspec says and how a refusal is classified (``jsonerror.refusal``).

The reason of a refusal comes from the exception's type and checks of our own on the
text; msgspec's wording only gives the offset of a syntax error and picks the words of
our message.  Two kinds of test here:

* the pin: every wording ``jsonerror`` reads (its ``_MSGSPEC_*`` names, all of them:
  adding one fails here until it is pinned) is checked against the installed msgspec, so
  an upgrade that rewords one fails loudly here, not quietly in a message;
* the independence: msgspec's errors reworded (same type, same offset) keep every reason,
  and a refusal in words we have never seen is still a classified refusal, through the
  machine too (``ConnectionFailed``, cause ``not_jsonrpc``).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import msgspec
import pytest

from sansmcp.core import jsonerror, jsonvalue
from sansmcp.core.errors import ConnectionFailed
from sansmcp.core.jsonvalue import JsonError, parse_json

from .fakemcp import Driver, FakeServer, result

DEPTH = 64


def refused(data: bytes) -> msgspec.DecodeError:
    """What the installed msgspec raises for ``data`` (an untyped decode, as ours)."""
    with pytest.raises(msgspec.DecodeError) as caught:
        msgspec.json.Decoder().decode(data)
    return caught.value


def offset(error: Exception) -> int:
    found = jsonerror._MSGSPEC_AT_BYTE.search(str(error))
    assert found is not None, str(error)
    return int(found.group(1))


# name -> (a text msgspec refuses with that wording, the check of its error)
PINS: dict[str, tuple[bytes, Callable[[msgspec.DecodeError], bool]]] = {
    "_MSGSPEC_AT_BYTE": (b"[1,]", lambda e: offset(e) == 3),
    "_MSGSPEC_MALFORMED": (b"[1,]", lambda e: str(e).startswith(jsonerror._MSGSPEC_MALFORMED)),
    "_MSGSPEC_TRUNCATED": (b'{"a":[1,', lambda e: str(e) == jsonerror._MSGSPEC_TRUNCATED),
    "_MSGSPEC_INVALID": (
        b'"a\x01b"',
        lambda e: str(e) == f"{jsonerror._MSGSPEC_MALFORMED}{jsonerror._MSGSPEC_INVALID} (byte 2)",
    ),
    "_MSGSPEC_INT_RANGE": (
        b"[" + b"9" * 4301 + b"]",
        lambda e: str(e).startswith(jsonerror._MSGSPEC_INT_RANGE),
    ),
    "_MSGSPEC_FLOAT_RANGE": (
        b"[1e400]",
        lambda e: str(e).startswith(jsonerror._MSGSPEC_FLOAT_RANGE),
    ),
    "_MSGSPEC_PATH": (
        b'{"a":[1e400]}',
        lambda e: str(e).partition(jsonerror._MSGSPEC_PATH)[2] == "$[...][0]`",
    ),
}


def test_every_wording_read_is_pinned() -> None:
    names = {name for name in vars(jsonerror) if name.startswith("_MSGSPEC_")}
    assert names == set(PINS)


@pytest.mark.parametrize("name", sorted(PINS))
def test_the_installed_msgspec_says_what_is_read(name: str) -> None:
    data, check = PINS[name]
    error = refused(data)
    assert check(error), (
        f"msgspec {msgspec.__version__} reworded what jsonerror.{name} reads: {str(error)!r}"
    )


@pytest.mark.parametrize(
    ("data", "number"),
    [
        (b"[1e400]", True),
        (b"-" + b"9" * 4300, True),
        (b'{"a":[' + b"1" * 5000 + b"]}", True),
        (b"[1,]", False),
        (b"[NaN]", False),
        (b'"\\ud800"', False),
        (b"", False),
        (b'"a\x01"', False),
    ],
)
def test_an_untyped_decode_raises_a_validation_error_for_numbers_only(
    data: bytes, number: bool
) -> None:
    """The type the number reason is read from (msgspec.ValidationError, a DecodeError)."""
    assert isinstance(refused(data), msgspec.ValidationError) is number


# -- the reasons do not depend on the wording ----------------------------------------------


def reworded(error: msgspec.DecodeError) -> msgspec.DecodeError:
    """The same refusal in words msgspec never used: the same type and offset."""
    found = re.search(r" \(byte \d+\)$", str(error))
    words = "something new went wrong here" + ("" if found is None else found.group(0))
    return type(error)(words)


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"[1e400]", "number"),
        (b"[" + b"9" * 4301 + b"]", "number"),
        (b"[NaN]", "constant"),
        (b'{"a":-Infinity}', "constant"),
        (b"[1, Infinity]", "constant"),
        (b"[1,]", "syntax"),
        (b'"a\x01b"', "syntax"),
        (b'["\\ud800"]', "syntax"),
        (b"\xef\xbb\xbf{}", "syntax"),
        (b'"\xff"', "utf8"),
    ],
)
def test_a_reworded_refusal_keeps_its_reason(
    monkeypatch: pytest.MonkeyPatch, data: bytes, reason: str
) -> None:
    with pytest.raises(JsonError) as plain:
        parse_json(data, max_depth=DEPTH)
    assert plain.value.reason == reason
    error = reworded(refused(data))
    real = jsonvalue._decode

    def decode(text: Any) -> Any:
        if bytes(text) == data:
            raise error
        return real(text)

    monkeypatch.setattr(jsonvalue, "_decode", decode)
    with pytest.raises(JsonError) as caught:
        parse_json(data, max_depth=DEPTH)
    assert caught.value.reason == reason


@pytest.mark.parametrize(
    ("error", "reason", "message"),
    [
        (msgspec.ValidationError("Brand new words"), "number", "JSON number is out of range"),
        (
            msgspec.ValidationError("Brand new words - at `$[0]`"),
            "number",
            "JSON number at $[0] is out of range",
        ),
        (msgspec.DecodeError("Brand new words"), "syntax", "invalid JSON: Brand new words"),
        (
            msgspec.DecodeError("Brand new words (byte 1)"),
            "syntax",
            "invalid JSON: Brand new words at line 1 column 2 (byte 1)",
        ),
    ],
)
def test_words_never_seen_are_still_a_classified_refusal(
    monkeypatch: pytest.MonkeyPatch, error: Exception, reason: str, message: str
) -> None:
    parse_json(b"1", max_depth=DEPTH)  # msgspec's decoder bound
    real = jsonvalue._decode

    def decode(text: Any) -> Any:
        if b"BREAK" in bytes(text):
            raise error
        return real(text)

    monkeypatch.setattr(jsonvalue, "_decode", decode)
    monkeypatch.setattr(jsonvalue, "_decode_floats", decode)  # (a text with many e/E)
    with pytest.raises(JsonError) as caught:
        parse_json(b'["BREAK"]', max_depth=DEPTH)
    assert (caught.value.reason, str(caught.value)) == (reason, message)

    server = FakeServer()
    server.overrides["tools/call"] = lambda request, body: server.wrap(
        result(body["id"], {"content": [{"type": "text", "text": "BREAK"}]})
    )
    driver = Driver(server)
    driver.ok(driver.connect())
    failed = driver.failure(driver.call("echo", b'{"text": "hi"}'))
    assert isinstance(failed, ConnectionFailed) and failed.cause == "not_jsonrpc"
    assert str(failed).endswith(message)


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"[NaN]", "constant"),  # the literal made [] decodes fully
        (b"[NaN, 1e400]", "constant"),  # ... or stops past it (no offset: a number)
        (b"[NaN, ", "constant"),  # ... or runs out past it
        (b"[NaN, " + b"[" * 100_000, "constant"),  # ... or recurses past it
        (b"[1NaN]", "syntax"),  # after a value
        (b"{NaN: 1}", "syntax"),  # an object's key
        (b'{"a" NaN}', "syntax"),  # where a colon belongs
        (b'"\\-Infinity"', "syntax"),  # inside a string, after a bad escape
        (b"[1, 2] -Infinity", "syntax"),  # after the value
        (b"[-NaN]", "constant"),
        (b'{"a": -Infinity}', "constant"),
    ],
)
def test_a_non_json_literal_is_one_where_a_value_may_stand(data: bytes, reason: str) -> None:
    with pytest.raises(JsonError) as caught:
        parse_json(data, max_depth=DEPTH)
    assert caught.value.reason == reason, str(caught.value)
    if reason == "constant":
        name = re.search(rb"-?(NaN|Infinity)", data)
        assert name is not None
        literal = name.group().decode()
        said = "NaN with a minus sign (-NaN)" if literal == "-NaN" else literal
        where = f"(byte {name.start()})"  # where the literal starts, its sign included
        assert f"literal {said} at line 1 column {name.start() + 1} {where}" in str(caught.value)
