"""The codec's memo of opened records (issue 28's CPU row): a listing read again from
the store with the same bytes is not decoded again; any other bytes are, and checked.

Pure: ``ValueCodec`` alone, then a fleet process (``StoreNet`` over a ``MemoryStore``)
whose stored listing is changed or replaced by garbage between two reads.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import pytest

from sansmcp.core import store_values
from sansmcp.core.cache import LIST_METHOD
from sansmcp.core.store import CompareAndSet, Found, MemoryStore, Read
from sansmcp.core.store_values import MEMO_BYTES, MEMO_ENTRIES, ValueCodec

from .fakemcp import MODERN, tool
from .test_driver import URL
from .test_fleet_listings import connected, listings, lists, process, public_key, server


class Shapes:
    """A ``shape`` that counts its calls (each a decode that reached the body)."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, body: Mapping[str, Any]) -> dict[str, Any] | None:
        self.calls += 1
        return dict(body) if "ok" in body else None


def sealed(body: dict[str, Any], kind: str = "listing") -> bytes:
    value = ValueCodec(1 << 22).seal(kind, body)
    assert value is not None
    return value


def test_the_same_bytes_reopen_the_same_record_without_decoding() -> None:
    codec, shape = ValueCodec(1 << 20), Shapes()
    value = sealed({"ok": 1})
    first = codec.open("listing", value, shape, reuse="v1")
    again = codec.open("listing", bytes(bytearray(value)), shape, reuse="v1")  # equal, not same
    assert first == {"ok": 1} and again is first
    assert shape.calls == 1 and codec.reused == 1
    # another reuse key or kind: decoded (its shape may read the body otherwise)
    assert codec.open("listing", value, shape, reuse="v2") == first and shape.calls == 2
    assert codec.open("other", value, shape, reuse="v1") is None and codec.misses["kind"] == 1
    # without reuse: decoded every time, never kept
    codec.open("listing", value, shape)
    codec.open("listing", value, shape)
    assert shape.calls == 4 and codec.reused == 1


def test_changed_or_planted_bytes_are_decoded_and_checked_again() -> None:
    codec, shape = ValueCodec(1 << 20), Shapes()
    value = sealed({"ok": 1})
    codec.open("listing", value, shape, reuse="v")
    changed = sealed({"ok": 2})
    assert codec.open("listing", changed, shape, reuse="v") == {"ok": 2} and shape.calls == 2
    planted = value[:-2] + b"!}"  # the same length, not JSON
    assert codec.open("listing", planted, shape, reuse="v") is None
    assert codec.misses["undecodable"] == 1
    wrong = sealed({"no": 1})  # decodes, and its shape refuses it: a miss, not kept
    assert codec.open("listing", wrong, shape, reuse="v") is None
    assert codec.open("listing", wrong, shape, reuse="v") is None
    assert codec.misses["shape"] == 2 and codec.reused == 0
    assert codec.open("listing", value, shape, reuse="v") == {"ok": 1} and codec.reused == 1


def test_the_memo_keeps_the_last_entries_only() -> None:
    codec, shape = ValueCodec(1 << 20), Shapes()
    values = [sealed({"ok": n}) for n in range(MEMO_ENTRIES + 1)]
    for value in values:
        codec.open("listing", value, shape, reuse="v")
    assert len(codec._memo) == MEMO_ENTRIES
    codec.open("listing", values[-1], shape, reuse="v")  # kept
    assert codec.reused == 1 and shape.calls == MEMO_ENTRIES + 1
    codec.open("listing", values[0], shape, reuse="v")  # the oldest, forgotten
    assert codec.reused == 1 and shape.calls == MEMO_ENTRIES + 2


def test_the_memo_keeps_at_most_memo_bytes_of_values(monkeypatch: pytest.MonkeyPatch) -> None:
    assert MEMO_BYTES == 2 << 20
    one, two = sealed({"ok": 1, "pad": "a" * 100}), sealed({"ok": 2, "pad": "b" * 100})
    monkeypatch.setattr(store_values, "MEMO_BYTES", len(one) + len(two) - 1)
    codec, shape = ValueCodec(1 << 20), Shapes()
    codec.open("listing", one, shape, reuse="v")
    codec.open("listing", two, shape, reuse="v")  # both do not fit: the oldest goes
    assert list(codec._memo) == [("listing", "v", two)]
    assert codec._memo_bytes == len(two)
    monkeypatch.setattr(store_values, "MEMO_BYTES", len(one) - 1)
    codec.open("listing", one, shape, reuse="v")  # over the whole bound: not kept
    assert list(codec._memo) == [("listing", "v", two)] and shape.calls == 3


# -- through a fleet process ---------------------------------------------------------


def item(net: Any) -> Any:
    """A work item served from the store: the process's own listing dropped first (as
    in ``bench/fleet.py``), so ``list_tools`` reads the store again."""
    net.driver.cache.invalidate(URL, MODERN, LIST_METHOD, None)
    view = connected(net)
    return view, [t.name for t in net.ok("list_tools", view)]


def replace(store: MemoryStore, value: bytes) -> None:
    found = store.execute(Read(key=public_key()), now=0.0)
    assert isinstance(found, Found)
    command = CompareAndSet(key=public_key(), value=value, expected=found.version, ttl=60)
    store.execute(command, now=0.0)


def test_a_changed_stored_listing_is_not_served_from_the_memo() -> None:
    fake, store = server(), MemoryStore()
    loader = process(fake, store)
    loader.ok("list_tools", connected(loader))
    reader = process(fake, store)
    codec = listings(reader).codec
    for _ in range(3):
        view, names = item(reader)
        assert names == ["echo", "add"] and view.tools_from_cache
    assert codec.reused == 2 and lists(fake) == 1
    found = store.execute(Read(key=public_key()), now=0.0)
    assert isinstance(found, Found)
    body = json.loads(found.value)
    body[2]["pages"][0]["tools"] = [tool("other")]  # another worker's newer listing
    replace(store, json.dumps(body).encode())
    view, names = item(reader)
    assert names == ["other"] and view.tools_from_cache and codec.reused == 2
    body[2]["pages"][0]["tools"] = [tool("")]  # planted: a tool a server's would skip
    replace(store, json.dumps(body).encode())
    view, names = item(reader)
    assert not view.tools_from_cache and names == ["echo", "add"]  # listed from the server
    assert codec.misses["shape"] >= 1 and codec.reused == 2 and lists(fake) == 2
