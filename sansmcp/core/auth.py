"""``WWW-Authenticate`` parsing (RFC 9110 §11.6.1), best effort and bounded.

Theory of operation
-------------------
The header is a comma-separated list in which commas separate both challenges
and the parameters of one challenge::

    WWW-Authenticate = #challenge
    challenge        = auth-scheme [ 1*SP ( token68 / #auth-param ) ]
    auth-param       = token BWS "=" BWS ( token / quoted-string )

We first split the value at the commas that are outside quoted strings, then read
each item:

* ``scheme`` alone, ``scheme token68`` or ``scheme name=value`` starts a new
  challenge (a token68 is stored under the key ``""``);
* ``name=value`` is one more parameter of the current challenge (dropped when
  there is none, or the current one carries a token68);
* empty items are skipped (RFC 9110 §5.6.1), anything else is garbage and skipped.

Schemes and parameter names are lower-cased; quoted-string values are unescaped;
if a parameter repeats within a challenge, the first one wins.  Input beyond
8 KiB is ignored, so the work is bounded; the function never raises.
"""

from __future__ import annotations

import re

from .http import TOKEN_CHARS

__all__ = ["MAX_WWW_AUTHENTICATE", "parse_www_authenticate"]

MAX_WWW_AUTHENTICATE = 8 * 1024
"""Characters of a ``WWW-Authenticate`` value that are looked at."""

_TCHAR = f"[{re.escape(TOKEN_CHARS.decode())}]"  # a token's characters, as a class
# One list item: runs of ordinary characters and quoted strings (possibly
# unterminated), up to a comma outside quotes.  Possessive quantifiers: linear.
_ITEM = re.compile(r'(?:[^,"]++|"(?:[^"\\]++|\\.)*+"?)*+', re.S)
_SCHEME = re.compile(rf"({_TCHAR}+)(?:[ \t]+(.*))?", re.S)
_PARAM = re.compile(rf"({_TCHAR}+)[ \t]*=[ \t]*(.*)", re.S)
_TOKEN68 = re.compile(r"[A-Za-z0-9\-._~+/]+=*[ \t]*")
_QUOTED = re.compile(r'"((?:[^"\\]++|\\.)*+)', re.S)
_QUOTED_PAIR = re.compile(r"\\(.)", re.S)
_VALUE_END = re.compile(r"[ \t]")


def _param_value(text: str) -> str:
    if text.startswith('"'):
        match = _QUOTED.match(text)
        assert match is not None  # the pattern matches any text starting with '"'
        return _QUOTED_PAIR.sub(r"\1", match.group(1))
    end = _VALUE_END.search(text)
    return text if end is None else text[: end.start()]


def _items(value: str) -> list[str]:
    items: list[str] = []
    pos = 0
    end = len(value)
    while pos <= end:
        match = _ITEM.match(value, pos)
        assert match is not None  # the pattern matches the empty string
        items.append(match.group().strip(" \t"))
        pos = match.end() + 1  # skip the comma (or step past the end)
    return items


def parse_www_authenticate(value: str) -> list[tuple[str, dict[str, str]]]:
    """Parse the challenges of a ``WWW-Authenticate`` value.

    Returns ``[(scheme, {param: value, ...}), ...]`` in header order, e.g.
    ``[("bearer", {"resource_metadata": "https://...", "scope": "a b"})]``.  Never
    raises: unreadable parts are skipped, and a value that is not a string gives
    ``[]``.
    """
    if not isinstance(value, str):
        return []
    challenges: list[tuple[str, dict[str, str]]] = []
    params: dict[str, str] | None = None  # where a bare name=value item goes
    for item in _items(value[:MAX_WWW_AUTHENTICATE]):
        if not item:
            continue
        param = _PARAM.fullmatch(item)
        if param is not None:
            if params is not None:
                params.setdefault(param.group(1).lower(), _param_value(param.group(2)))
            continue
        scheme = _SCHEME.fullmatch(item)
        if scheme is None:
            continue
        rest = scheme.group(2) or ""
        current: dict[str, str] = {}
        challenges.append((scheme.group(1).lower(), current))
        params = current
        if not rest:
            continue
        if _TOKEN68.fullmatch(rest):
            current[""] = rest.rstrip(" \t")
            params = None
            continue
        param = _PARAM.fullmatch(rest)
        if param is not None:
            current[param.group(1).lower()] = _param_value(param.group(2))
    return challenges
