"""OAuth through the fleet's shared store (issue 28), pure: ``SharedAuth`` under the
``OAuthMachine``, on a ``MemoryStore`` several ``Runner``\\ s (workers) share.

Each ``Runner`` stands for one process of a fleet: its own machine, its own lease holder
name, the same store.  ``store_hook`` lets a test act as another worker between two
store steps (plant a value, hold a lease) or answer a command itself (a failure, a
conflict, garbage).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from sansmcp.core.driver import ClientDriver
from sansmcp.core.errors import ConnectionFailed, Unauthorized
from sansmcp.core.fleet_auth import MAX_SAVE_TRIES, PENDING_TTL, SharedAuth
from sansmcp.core.fleet_tokens import POLL_FIRST, TOKENS_TTL
from sansmcp.core.limits import Limits
from sansmcp.core.mcp import Connected, ToolsListed
from sansmcp.core.oauth.store import (
    Binding,
    ClientRegistration,
    OAuth,
    PendingAuthorization,
    StoreWanted,
    Tokens,
)
from sansmcp.core.store import (
    Acquired,
    AcquireLease,
    CompareAndSet,
    Conflict,
    DeleteIfVersion,
    Found,
    Held,
    MemoryStore,
    Missing,
    Read,
    ReleaseLease,
    StoreAnswer,
    StoreCommand,
    StoreFailed,
    Take,
    Written,
    lease_key,
    pending_key,
    registration_key,
    token_key,
)
from sansmcp.core.store_values import (
    ValueCodec,
    pending_body,
    registration_body,
    registration_from,
    tokens_body,
    tokens_from,
)

from .fakemcp import Response, json_response
from .oauth_world import AS, MCP, REDIRECT, Runner, World, counter_bytes, reset
from .test_driver_store import StoreNet
from .test_oauth_driver import MCP_URL, OAuthNet, as_side, mcp_side, oauth_world

KEY = token_key("", "", MCP, None)  # OAuth(redirect_uri=...) names no issuer nor client
LEASE = lease_key(KEY)
REG_KEY = registration_key(AS, None)
CODEC = ValueCodec(1 << 20)


def worker(
    world: World, store: MemoryStore, holder: str = "w1", oauth: OAuth | None = None, **kw: Any
) -> Runner:
    return Runner(world, oauth or OAuth(redirect_uri=REDIRECT), store=store, holder=holder, **kw)


def connected(world: World, store: MemoryStore, holder: str = "w1", **kw: Any) -> Runner:
    runner = worker(world, store, holder, **kw)
    assert isinstance(runner.run(runner.machine.connect), Connected)
    return runner


def sealed(kind: str, body: dict[str, Any]) -> bytes:
    data = CODEC.seal(kind, body)
    assert data is not None
    return data


def plant(store: MemoryStore, key: str, value: bytes, now: float = 0.0) -> int:
    """Write ``value`` under ``key`` whatever is there (as another worker would)."""
    found = store.execute(Read(key=key), now=now)
    expected = found.version if isinstance(found, Found | Missing) else 0
    answer = store.execute(
        CompareAndSet(key=key, value=value, expected=expected, ttl=TOKENS_TTL), now=now
    )
    assert isinstance(answer, Written)
    return answer.version


def other_tokens(world: World, token: str = "t-other") -> Tokens:
    world.issued[token] = ""
    return Tokens(
        access_token=token,
        refresh_token="r-other",
        issuer=AS,
        token_endpoint=f"{AS}/token",
    )


def stored(store: MemoryStore, now: float = 0.0, key: str = KEY) -> tuple[Tokens | None, int]:
    answer = store.execute(Read(key=key), now=now)
    if not isinstance(answer, Found):
        return None, 0
    return CODEC.open("tokens", answer.value, tokens_from), answer.version


def kinds(runner: Runner) -> list[str]:
    return [type(command).__name__ for command in runner.store_commands]


def token_forms(world: World, grant: str) -> list[dict[str, str]]:
    return [form for form in world.forms if form.get("grant_type") == grant]


def on(
    predicate: Callable[[StoreCommand], bool],
    act: Callable[[StoreCommand], StoreAnswer | None],
    *,
    times: int = 1,
) -> Callable[[StoreCommand], StoreAnswer | None]:
    """A ``store_hook`` that acts on the first ``times`` commands ``predicate`` picks."""
    left = [times]

    def hook(command: StoreCommand) -> StoreAnswer | None:
        if left[0] > 0 and predicate(command):
            left[0] -= 1
            return act(command)
        return None

    return hook


def is_cas(key: str) -> Callable[[StoreCommand], bool]:
    return lambda command: isinstance(command, CompareAndSet) and command.key == key


def expire(world: World) -> None:
    """The MCP server refuses every token issued so far (they expired): a worker's next
    request with its token is a 401."""
    world.issued.clear()


# ------------------------------------------------------------------ tokens


def test_a_token_one_worker_obtained_is_used_by_another_without_authorizing() -> None:
    world, store = World(), MemoryStore()
    first = connected(world, store, "w1")
    assert len(first.asked) == 1
    assert first.store_commands[0] == Read(key=KEY)  # the fleet's tokens, read first
    writes = [c for c in first.store_commands if isinstance(c, CompareAndSet) and c.key == KEY]
    assert len(writes) == 1 and writes[0].expected == 0 and writes[0].ttl == TOKENS_TTL
    tokens, _ = stored(store)
    assert tokens is not None and tokens.access_token == "t-1"
    assert first.oauth.store.tokens(MCP) is None  # OAuth.store is not a second copy
    log_before = len(world.log)
    second = connected(world, store, "w2")
    assert second.asked == [] and second.store_commands == [Read(key=KEY)]
    assert [path for _, _, path in world.log[log_before:]] == ["/mcp"]  # no authorization
    assert isinstance(second.run(second.machine.list_tools), ToolsListed)
    assert world.minted == 1


def test_a_worker_whose_token_was_replaced_uses_the_stored_one_without_refreshing() -> None:
    world, store = World(), MemoryStore()
    first = connected(world, store, "w1")
    second = connected(world, store, "w2")
    expire(world)
    assert isinstance(first.run(first.machine.list_tools), ToolsListed)  # refreshed: t-2
    assert len(token_forms(world, "refresh_token")) == 1
    before = len(second.store_commands)
    assert isinstance(second.run(second.machine.list_tools), ToolsListed)
    assert second.store_commands[before:] == [Read(key=KEY)]  # read, found t-2: no refresh
    assert len(token_forms(world, "refresh_token")) == 1 and second.asked == []


def test_a_refresh_takes_the_lease_and_writes_over_the_version_read() -> None:
    world, store = World(), MemoryStore()
    runner = connected(world, store)
    _, version = stored(store)
    expire(world)
    before = len(runner.store_commands)
    assert isinstance(runner.run(runner.machine.list_tools), ToolsListed)
    steps = runner.store_commands[before:]
    assert steps[:4] == [
        Read(key=KEY),
        Read(key=REG_KEY),
        AcquireLease(key=LEASE, holder="w1", ttl=Limits().store_lease_expiry),
        Read(key=KEY),  # the recheck under the lease
    ]
    write = steps[4]
    assert isinstance(write, CompareAndSet) and write.key == KEY and write.expected == version
    assert steps[5:] == [ReleaseLease(key=LEASE, holder="w1")]
    tokens, new_version = stored(store)
    assert tokens is not None and tokens.access_token == "t-2" and new_version != version
    assert store.execute(AcquireLease(key=LEASE, holder="w9", ttl=1.0), now=runner.now) == (
        Acquired()
    )  # released
    assert token_forms(world, "refresh_token")[0]["refresh_token"] == "r-1"


def test_a_loser_waits_for_the_lease_then_reads_the_winners_tokens() -> None:
    world, store = World(), MemoryStore()
    runner = connected(world, store)
    _, version = stored(store)
    expire(world)
    assert (
        store.execute(AcquireLease(key=LEASE, holder="winner", ttl=15.0), now=runner.now)
        == Acquired()
    )
    theirs = other_tokens(world)
    polls = [0]

    def winner(command: StoreCommand) -> StoreAnswer | None:
        if isinstance(command, Read) and command.key == KEY and "AcquireLease" in kinds(runner):
            polls[0] += 1
            if polls[0] == 2:  # the winner writes after the loser's first poll
                plant(store, KEY, sealed("tokens", tokens_body(theirs)), runner.now)
                store.execute(ReleaseLease(key=LEASE, holder="winner"), now=runner.now)
        return None

    runner.store_hook = winner
    start = runner.now
    before = len(runner.store_commands)
    assert isinstance(runner.run(runner.machine.list_tools), ToolsListed)
    steps = kinds(runner)[before:]
    # lease held: pause, read (old tokens), lease again (held), pause, read (theirs)
    assert steps == ["Read", "Read", "AcquireLease", "Read", "AcquireLease", "Read"]
    assert token_forms(world, "refresh_token") == []  # the loser never refreshed
    assert runner.now >= start + POLL_FIRST * 3  # it paused twice (doubling), on the clock
    tokens, new_version = stored(store)
    assert tokens == theirs and new_version != version
    sent = [out for out in runner.outputs if hasattr(out, "request")][-1]
    assert (b"authorization", b"Bearer t-other") in sent.request.headers


def test_a_lease_held_past_its_bound_fails_naming_the_store() -> None:
    world, store = World(), MemoryStore()
    runner = connected(world, store, store_lease_expiry=1.0, store_load_wait=0.5)
    tokens_before = stored(store)
    expire(world)
    store.execute(AcquireLease(key=LEASE, holder="dead", ttl=100.0), now=runner.now)
    before = len(runner.store_commands)
    error = runner.fail(runner.run(runner.machine.list_tools))
    assert isinstance(error, ConnectionFailed)
    assert error.cause == "store" and error.bound == "store_load_wait"
    steps = kinds(runner)[before:]
    assert steps.count("AcquireLease") > 2  # it kept trying, then gave up
    assert not {"CompareAndSet", "DeleteIfVersion", "ReleaseLease"} & set(steps)
    assert stored(store, runner.now) == tokens_before  # nothing written, nothing deleted
    assert token_forms(world, "refresh_token") == []


def test_invalid_grant_rereads_then_deletes_only_the_version_read() -> None:
    world, store = World(), MemoryStore()
    runner = connected(world, store)
    _, version = stored(store)
    expire(world)
    world.overrides["/token"] = lambda request: json_response({"error": "invalid_grant"}, 400)
    before = len(runner.store_commands)
    error = runner.fail(runner.run(runner.machine.list_tools))
    assert isinstance(error, Unauthorized) and error.cause == "refresh_failed"
    assert runner.store_commands[before + 3 :] == [
        Read(key=KEY),  # recheck under the lease
        Read(key=KEY),  # refused: read again before deleting
        DeleteIfVersion(key=KEY, version=version),
        ReleaseLease(key=LEASE, holder="w1"),
    ]
    assert stored(store, runner.now) == (None, 0)


def test_invalid_grant_after_another_worker_rotated_uses_theirs_and_deletes_nothing() -> None:
    world, store = World(), MemoryStore()
    runner = connected(world, store)
    expire(world)
    world.overrides["/token"] = lambda request: json_response({"error": "invalid_grant"}, 400)
    theirs = other_tokens(world)
    reads = [0]

    def rotate(command: StoreCommand) -> StoreAnswer | None:
        if isinstance(command, Read) and command.key == KEY and "AcquireLease" in kinds(runner):
            reads[0] += 1
            if reads[0] == 2:  # between the refusal and the re-read
                plant(store, KEY, sealed("tokens", tokens_body(theirs)), runner.now)
        return None

    runner.store_hook = rotate
    assert isinstance(runner.run(runner.machine.list_tools), ToolsListed)
    assert "DeleteIfVersion" not in kinds(runner)
    assert stored(store, runner.now)[0] == theirs


def test_a_delete_beaten_by_a_rotation_reads_again_and_uses_it() -> None:
    world, store = World(), MemoryStore()
    runner = connected(world, store)
    expire(world)
    world.overrides["/token"] = lambda request: json_response({"error": "invalid_grant"}, 400)
    theirs = other_tokens(world)

    def beaten(command: StoreCommand) -> StoreAnswer | None:
        plant(store, KEY, sealed("tokens", tokens_body(theirs)), runner.now)
        return None  # the store answers: Conflict

    runner.store_hook = on(lambda c: isinstance(c, DeleteIfVersion), beaten)
    assert isinstance(runner.run(runner.machine.list_tools), ToolsListed)
    assert kinds(runner)[-3:] == ["DeleteIfVersion", "Read", "ReleaseLease"]
    assert stored(store, runner.now)[0] == theirs


def test_tokens_deleted_by_another_worker_mean_authorize_again() -> None:
    world, store = World(), MemoryStore()
    runner = connected(world, store)
    expire(world)
    runner.store_hook = on(
        lambda c: isinstance(c, Read) and "AcquireLease" in kinds(runner),
        lambda c: Missing(),
    )
    error = runner.fail(runner.run(runner.machine.list_tools))
    assert isinstance(error, Unauthorized) and error.cause == "refresh_failed"
    assert kinds(runner)[-1] == "ReleaseLease"  # held: released
    assert token_forms(world, "refresh_token") == []


def test_an_unreachable_token_endpoint_releases_the_lease_and_keeps_the_tokens() -> None:
    world, store = World(), MemoryStore()
    runner = connected(world, store)
    kept = stored(store)
    expire(world)
    world.overrides["/token"] = lambda request: Response(fail=reset(), head=False)
    error = runner.fail(runner.run(runner.machine.list_tools))
    assert isinstance(error, ConnectionFailed) and error.cause == "reset"
    assert runner.store_commands[-1] == ReleaseLease(key=LEASE, holder="w1")
    assert stored(store, runner.now) == kept
    assert store.execute(AcquireLease(key=LEASE, holder="w2", ttl=1.0), now=runner.now) == (
        Acquired()
    )


def test_a_refresh_with_no_client_deletes_nothing() -> None:
    world, store = World(), MemoryStore()
    foreign = Tokens(
        access_token="kept",
        refresh_token="r-x",
        issuer="https://elsewhere.example",
        token_endpoint="https://elsewhere.example/token",
    )
    world.issued["kept"] = ""
    plant(store, KEY, sealed("tokens", tokens_body(foreign)))
    runner = connected(world, store)
    assert runner.asked == []
    expire(world)
    error = runner.fail(runner.run(runner.machine.list_tools))
    assert isinstance(error, Unauthorized) and error.cause == "refresh_failed"
    assert "no client registration" in str(error)
    assert stored(store, runner.now)[0] == foreign
    assert "AcquireLease" not in kinds(runner)


@pytest.mark.parametrize(
    ("failing", "what"),
    [
        (AcquireLease, "taking the refresh lease"),
        (ReleaseLease, None),  # the release's answer does not matter
    ],
)
def test_a_store_failure_during_the_refresh(failing: type, what: str | None) -> None:
    world, store = World(), MemoryStore()
    runner = connected(world, store)
    expire(world)
    runner.store_hook = on(
        lambda c: isinstance(c, failing), lambda c: StoreFailed(reason="unavailable", detail="x")
    )
    outcome = runner.run(runner.machine.list_tools)
    if what is None:
        assert isinstance(outcome, ToolsListed)
        return
    error = runner.fail(outcome)
    assert isinstance(error, ConnectionFailed) and error.cause == "store"
    assert what in str(error) and "the store failed" in str(error)
    assert token_forms(world, "refresh_token") == []


# ------------------------------------------------------------------ saving a new grant


@pytest.mark.parametrize(
    ("value", "miss"),
    [
        (b"\xff not json", "undecodable"),
        (b"x" * ((1 << 20) + 1), "oversized"),
        (sealed("tokens", {"access_token": 5}), "shape"),
        (sealed("registration", {"client_id": "c", "auth_method": "none"}), "kind"),
        (sealed("tokens", tokens_body(Tokens(access_token="bad\r\ntoken"))), None),
    ],
)
def test_a_corrupt_stored_grant_is_a_miss_and_is_replaced(value: bytes, miss: str | None) -> None:
    world, store = World(), MemoryStore()
    version = plant(store, KEY, value)
    runner = connected(world, store)
    assert len(runner.asked) == 1  # a miss: authorized as if nothing were stored
    shared = runner.machine._ctx.shared
    assert isinstance(shared, SharedAuth)
    if miss is not None:
        assert shared.codec.misses[miss] == 2  # read at the connect, again at the 401
    write = [c for c in runner.store_commands if is_cas(KEY)(c)]
    assert len(write) == 1 and write[0].expected == version  # over the unreadable one
    assert stored(store, runner.now)[0] is not None


def test_a_new_grant_beaten_by_another_write_is_written_over_the_version_found() -> None:
    world, store = World(), MemoryStore()
    runner = worker(world, store)
    theirs = other_tokens(world)
    planted: list[int] = []

    def beat(command: StoreCommand) -> StoreAnswer | None:
        planted.append(plant(store, KEY, sealed("tokens", tokens_body(theirs)), runner.now))
        return None

    runner.store_hook = on(is_cas(KEY), beat)
    assert isinstance(runner.run(runner.machine.connect), Connected)
    writes = [c for c in runner.store_commands if is_cas(KEY)(c)]
    assert [w.expected for w in writes] == [0, planted[0]]
    tokens, _ = stored(store, runner.now)
    assert tokens is not None and tokens.access_token == "t-1"  # the grant just made: newest


def test_a_new_grant_gives_up_after_conflicts_in_a_row() -> None:
    world, store = World(), MemoryStore()
    runner = worker(world, store)
    runner.store_hook = on(is_cas(KEY), lambda c: Conflict(version=7), times=99)
    error = runner.fail(runner.run(runner.machine.connect))
    assert isinstance(error, ConnectionFailed) and error.cause == "store"
    assert f"{MAX_SAVE_TRIES} writes in a row" in str(error)
    writes = [c for c in runner.store_commands if is_cas(KEY)(c)]
    assert [w.expected for w in writes] == [0, 7, 7]


def test_a_grant_over_max_store_value_bytes_is_not_stored() -> None:
    world, store = World(), MemoryStore()
    runner = worker(world, store, max_store_value_bytes=120)  # a registration fits
    error = runner.fail(runner.run(runner.machine.connect))
    assert isinstance(error, ConnectionFailed)
    assert error.cause == "store" and error.bound == "max_store_value_bytes"
    assert stored(store, runner.now) == (None, 0)


@pytest.mark.parametrize(
    ("predicate", "answer", "what"),
    [
        (lambda c: c == Read(key=KEY), StoreFailed(reason="refused", detail="OOM"), "reading"),
        (lambda c: c == Read(key=KEY), Acquired(), "answered Acquired while reading tokens"),
        (is_cas(KEY), StoreFailed(reason="unavailable", detail="x"), "storing new tokens"),
        (is_cas(KEY), Held(), "answered Held while storing new tokens"),
        (
            is_cas(REG_KEY),
            StoreFailed(reason="failed", detail="x"),
            "storing the client registration",
        ),
        (
            lambda c: c == Read(key=REG_KEY),
            StoreFailed(reason="failed", detail="x"),
            "reading the client registration",
        ),
    ],
)
def test_a_store_failure_on_a_token_operation_is_connection_failed_naming_the_store(
    predicate: Callable[[StoreCommand], bool], answer: StoreAnswer, what: str
) -> None:
    world, store = World(), MemoryStore()
    runner = worker(world, store)
    runner.store_hook = on(predicate, lambda c: answer)
    error = runner.fail(runner.run(runner.machine.connect))
    assert isinstance(error, ConnectionFailed) and error.cause == "store"
    assert "store" in str(error) and what in str(error)
    assert "no token was written or deleted" in str(error)
    assert stored(store, runner.now) == (None, 0)


def test_a_store_that_never_answers_times_out_and_a_late_answer_is_dropped() -> None:
    world, store = World(), MemoryStore()
    runner = worker(world, store, store_timeout=0.5)
    runner.store_silent = True
    error = runner.fail(runner.run(runner.machine.connect))
    assert isinstance(error, ConnectionFailed)
    assert error.cause == "store" and error.bound == "store_timeout"
    assert "reading tokens (timeout" in str(error) and "outcome is unknown" in str(error)
    (wanted,) = [out for out in runner.outputs if isinstance(out, StoreWanted)]
    runner.machine.store_answered(wanted.request_id, Missing(), now=runner.now + 1)
    assert runner.machine.next_output() is None and not runner.machine.busy
    assert world.log == []  # nothing was sent without the fleet's tokens


def test_a_timer_before_the_stores_answer_is_due_keeps_the_wait() -> None:
    world, store = World(), MemoryStore()
    runner = worker(world, store, store_timeout=2.0)
    runner.store_silent = True
    runner.machine.connect(now=0.0)
    wanted = runner.machine.next_output()
    assert isinstance(wanted, StoreWanted) and wanted.command == Read(key=KEY)
    assert runner.machine.next_deadline() == 2.0
    runner.machine.handle_timer(now=1.0)  # another of the Conn's timers: not the wait's end
    assert runner.machine.next_output() is None and runner.machine.busy
    runner.store_silent = False
    runner.now = 1.5
    runner.machine.store_answered(wanted.request_id, Missing(), now=1.5)
    assert isinstance(runner.pump(), Connected)


def test_store_waits_are_outside_the_authorizations_budget() -> None:
    world, store = World(), MemoryStore()
    runner = worker(world, store, auth_timeout=1.0, store_timeout=5.0)
    waits = [0]

    def slow(command: StoreCommand) -> StoreAnswer | None:
        waits[0] += 1
        runner.now += 0.9  # each answer comes late, all of them past auth_timeout
        return None

    runner.store_hook = slow
    assert isinstance(runner.run(runner.machine.connect), Connected)
    assert waits[0] >= 3


# ------------------------------------------------------------------ registrations


def test_the_client_registration_is_shared() -> None:
    world, store = World(), MemoryStore()
    first = worker(world, store, "w1", answer=lambda url: None)
    error = first.fail(first.run(first.machine.connect))
    assert isinstance(error, Unauthorized) and error.cause == "authorization_required"
    found = store.execute(Read(key=REG_KEY), now=first.now)
    assert isinstance(found, Found)
    assert CODEC.open("registration", found.value, registration_from) == ClientRegistration(
        client_id="dcr-client"
    )
    other = World(mcp=world.mcp)  # the same servers, seen from another process
    other.issued = world.issued
    second = worker(other, store, "w2")
    assert isinstance(second.run(second.machine.connect), Connected)
    assert [p for _, _, p in world.log + other.log].count("/register") == 1
    assert token_forms(other, "authorization_code")[0]["client_id"] == "dcr-client"


@pytest.mark.parametrize("usable", [True, False])
def test_a_second_registration_gives_way_to_the_one_stored_first(usable: bool) -> None:
    world, store = World(), MemoryStore()
    runner = worker(world, store)
    first = ClientRegistration(client_id="first-client")
    value = sealed("registration", registration_body(first)) if usable else b"garbage"

    def beat(command: StoreCommand) -> StoreAnswer | None:
        plant(store, REG_KEY, value, runner.now)
        return None  # the store answers: Conflict

    runner.store_hook = on(is_cas(REG_KEY), beat)
    assert isinstance(runner.run(runner.machine.connect), Connected)
    client = token_forms(world, "authorization_code")[0]["client_id"]
    assert client == ("first-client" if usable else "dcr-client")
    asked = parse_qs(urlsplit(runner.asked[0]).query)
    assert asked["client_id"] == [client]


# ------------------------------------------------------------------ pending authorizations


def started(world: World, store: MemoryStore, oauth: OAuth | None = None) -> str:
    """Worker w1 begins an authorization no person makes now: the redirect, later."""
    first = worker(world, store, "w1", oauth, answer=lambda url: None)
    error = first.fail(first.run(first.machine.connect))
    assert isinstance(error, Unauthorized) and error.cause == "authorization_required"
    assert error.authorization_url is not None
    state = parse_qs(urlsplit(error.authorization_url).query)["state"][0]
    keep = [c for c in first.store_commands if is_cas(pending_key(state))(c)]
    assert len(keep) == 1 and keep[0].expected == 0 and keep[0].ttl == PENDING_TTL
    return world.person(error.authorization_url)


def test_an_authorization_started_on_one_worker_completes_on_another_once() -> None:
    world, store = World(), MemoryStore()
    redirect = started(world, store)
    state = parse_qs(urlsplit(redirect).query)["state"][0]
    second = worker(world, store, "w2")
    assert isinstance(second.run(second.machine.complete_authorization, redirect), Connected)
    assert second.asked == [] and second.store_commands[0] == Take(key=pending_key(state))
    assert stored(store, second.now)[0] is not None
    assert len(token_forms(world, "authorization_code")) == 1
    third = worker(world, store, "w3")  # the same redirect again, on a third worker
    error = third.fail(third.run(third.machine.complete_authorization, redirect))
    assert isinstance(error, Unauthorized) and error.cause == "state_mismatch"
    assert len(token_forms(world, "authorization_code")) == 1  # nothing sent


def test_a_pending_authorization_completes_only_for_its_tenant_and_is_put_back() -> None:
    world, store = World(), MemoryStore()
    redirect = started(world, store, OAuth(redirect_uri=REDIRECT, tenant="acme"))
    wrong = worker(world, store, "w2", OAuth(redirect_uri=REDIRECT, tenant="globex"))
    error = wrong.fail(wrong.run(wrong.machine.complete_authorization, redirect))
    assert isinstance(error, Unauthorized) and error.cause == "state_mismatch"
    assert "OAuth.tenant" in str(error)
    assert token_forms(world, "authorization_code") == []
    right = worker(world, store, "w3", OAuth(redirect_uri=REDIRECT, tenant="acme"))
    assert isinstance(right.run(right.machine.complete_authorization, redirect), Connected)
    acme = token_key("", "", MCP, "acme")
    assert stored(store, right.now, acme)[0] is not None and stored(store, right.now) == (None, 0)


def pending(**changes: Any) -> PendingAuthorization:
    values: dict[str, Any] = {
        "state": "s-1",
        "verifier": "v" * 43,
        "issuer": AS,
        "iss_required": True,
        "token_endpoint": f"{AS}/token",
        "resource": MCP,
        "registration": ClientRegistration(client_id="c"),
        "redirect_uri": REDIRECT,
        "bound": Binding(
            url=MCP,
            issuer=None,
            client_id=None,
            client_secret_sha256=None,
            client_metadata_url=None,
            redirect_uri=REDIRECT,
        ),
    }
    return PendingAuthorization(**(values | changes))


REDIRECT_S1 = f"{REDIRECT}?code=c-1&state=s-1&iss={AS}"


@pytest.mark.parametrize(
    ("value", "cause", "words"),
    [
        (
            sealed(
                "pending",
                pending_body(
                    pending(registration=ClientRegistration(client_id="c", auth_method="x"))
                ),
            ),
            "store",
            "cannot be used",
        ),
        (
            sealed("pending", pending_body(pending(resource="https://elsewhere.example/mcp"))),
            "store",
            "names resource",
        ),
        (b'[1, "pending", {}]', "state_mismatch", "no pending authorization"),
        (sealed("tokens", tokens_body(Tokens(access_token="t"))), "state_mismatch", "no pending"),
    ],
)
def test_an_unusable_stored_pending_authorization_sends_nothing(
    value: bytes, cause: str, words: str
) -> None:
    world, store = World(), MemoryStore()
    plant(store, pending_key("s-1"), value)
    runner = worker(world, store)
    error = runner.fail(runner.run(runner.machine.complete_authorization, REDIRECT_S1))
    assert getattr(error, "cause", None) == cause and words in str(error)
    assert isinstance(error, ConnectionFailed if cause == "store" else Unauthorized)
    assert world.log == []
    assert store.execute(Read(key=pending_key("s-1")), now=runner.now) == Missing()  # taken


@pytest.mark.parametrize(
    ("predicate", "answer", "what"),
    [
        (
            lambda c: isinstance(c, CompareAndSet) and ":pending:" in c.key,
            Conflict(version=3),
            "answered Conflict while keeping the pending authorization",
        ),
        (
            lambda c: isinstance(c, Take),
            StoreFailed(reason="timeout", detail="slow"),
            "taking the pending authorization",
        ),
    ],
)
def test_a_store_failure_on_a_pending_authorization(
    predicate: Callable[[StoreCommand], bool], answer: StoreAnswer, what: str
) -> None:
    world, store = World(), MemoryStore()
    runner = worker(world, store, answer=lambda url: None)
    runner.store_hook = on(predicate, lambda c: answer)
    if isinstance(answer, Conflict):
        error = runner.fail(runner.run(runner.machine.connect))
    else:
        error = runner.fail(runner.run(runner.machine.complete_authorization, REDIRECT_S1))
    assert isinstance(error, ConnectionFailed) and error.cause == "store" and what in str(error)


def test_shared_auth_keys_name_the_issuer_client_resource_and_tenant() -> None:
    limits = Limits()
    plain = SharedAuth(OAuth(), MCP, limits=limits, holder="h")
    assert plain.key == KEY and repr(plain) == f"SharedAuth({KEY}, version 0)"
    named = SharedAuth(
        OAuth(issuer=AS, client_id="cid", tenant="t1"), MCP, limits=limits, holder="h", prefix="p"
    )
    assert named.key == token_key(AS, "cid", MCP, "t1", prefix="p")
    meta = SharedAuth(
        OAuth(client_metadata_url="https://app.example/client.json"), MCP, limits=limits, holder="h"
    )
    assert meta.key == token_key("", "https://app.example/client.json", MCP, None)
    assert len({plain.key, named.key, meta.key}) == 3


# ------------------------------------------------------------------ through the driver


@dataclass
class FleetOAuthNet(StoreNet, OAuthNet):
    """One process of the fleet: a driver with ``shared_store=True``, its store steps
    performed on the ``MemoryStore`` of the fleet (or answered by the test)."""


def fleet_net(world: World, store: MemoryStore | None, **kw: Any) -> FleetOAuthNet:
    driver = ClientDriver(allow_loopback=True, random_bytes=counter_bytes(), shared_store=True)
    return FleetOAuthNet(
        driver,
        handlers={443: mcp_side(world), 9000: as_side(world)},
        dns={"mcp.test": ["93.184.216.34"]},
        world=world,
        store=store,
        **kw,
    )


DRIVER_KEY = token_key("", "", MCP_URL, None)


def test_through_the_driver_a_second_process_uses_the_first_ones_token() -> None:
    world, store = oauth_world(), MemoryStore()
    first = fleet_net(world, store)
    view = first.open(MCP_URL, oauth=OAuth(redirect_uri=REDIRECT))
    assert first.ok("connect", view) is None and len(first.delivered) == 1
    assert [op.command for op in first.ops if op.command == Read(key=DRIVER_KEY)]
    second = fleet_net(world, store)
    view = second.open(MCP_URL, oauth=OAuth(redirect_uri=REDIRECT))
    assert second.ok("connect", view) is None
    assert second.delivered == []  # no person asked: the first process's token
    assert second.ok("list_tools", view)
    assert [p for _, _, p in world.log].count("/token") == 1


def test_through_the_driver_an_answer_for_a_closed_conn_is_dropped() -> None:
    world = oauth_world()
    net = fleet_net(world, None)
    view = net.open(MCP_URL, oauth=OAuth(redirect_uri=REDIRECT))
    net.start("connect", view)
    for _ in range(3):  # the era's read, then the tokens' read
        op = net.ops[-1]
        if op.command == Read(key=DRIVER_KEY):
            break
        net.answer_op(op, Missing())
    assert net.ops[-1].command == Read(key=DRIVER_KEY)
    net.driver.abandon(view.conn_id, now=net.now)
    net.answer_op(net.ops[-1], Missing())
    assert world.log == [] and net.driver.next_command() is None
