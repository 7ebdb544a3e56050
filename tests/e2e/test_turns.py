"""The blocking adapter's turn-taking on its own (``sansmcp.io_adapters.blocking._turns``): real
threads, no driver, no socket.

The owner here is a fake whose poll step blocks on an event (its "select") and then
delivers what a test fed it to the waiters' mailboxes.  A sequential waiter polls for
itself in its own thread; many waiters take turns, one poll step at a time, each
getting its own mail; a follower woken with its own mail passes the turn on; the watcher takes the turn only once it was free for ``GRACE``
and yields it to the first waiter; an interrupt in the leader or in a follower hands
the turn on; the leader's select is woken exactly when it must look again;
``_perform`` answers steps with mail or a call made with the lock let go; the watcher
survives its poll step's exception; ``_end_turns`` ends the watcher and releases once,
when the turn is left.
"""

from __future__ import annotations

import random
import signal
import threading
import time
from collections import deque
from collections.abc import Callable, Generator, Iterator
from typing import Any

import pytest

from sansmcp.io_adapters.blocking._selectloop import Bell
from sansmcp.io_adapters.blocking._turns import GRACE, Turns

from .test_selectloop import Flaky

WAIT = 30.0  # s: a safety net on anything here (a loaded machine), never a speed assertion


class Box:
    """A waiter: a mailbox and a bell."""

    def __init__(self) -> None:
        self._mail: deque[Any] = deque()
        self._bell = Bell()


class Owner(Turns):
    """A fake owner (the turn-taking and its owner in one object, so a test reads both):
    its poll step "selects" on ``ready`` (set by ``wake`` and ``feed``), then posts what
    was fed to the boxes."""

    def __init__(self) -> None:
        super().__init__(
            threading.RLock(),
            now=time.monotonic,
            poll=self.poll,
            wake=self.wake,
            release=self.release,
            name="test-watcher",
        )
        self.ready = threading.Event()
        self.pending: deque[tuple[Box, Any]] = deque()
        self.polls: list[str] = []  # the thread of each poll step
        self.at: list[float] = []  # and when it began
        self.timeouts: list[float | None] = []  # of each select
        self.deadline: float | None = None  # the next deadline the poll step selects until
        self.explode: set[int] = set()  # threads whose next select raises KeyboardInterrupt
        self.inside = self.most = 0  # threads in a poll step now, at most
        self.wakes = self.released = self.hung = 0

    def poll(self) -> None:
        self.inside += 1
        self.most = max(self.most, self.inside)
        try:
            self.polls.append(threading.current_thread().name)
            self.at.append(time.monotonic())
            self._select(self.block, self.deadline)
            while self.pending:
                box, item = self.pending.popleft()
                box._mail.append(item)
                self._post(box)
            self._nudge(self.deadline, True)  # as a pump does: the leader is not in select
        finally:
            self.inside -= 1

    def block(self, timeout: float | None) -> None:
        """The select (lock let go): until fed or woken, or ``timeout``."""
        assert not self._lock._is_owned()
        self.timeouts.append(timeout)
        self.ready.clear()
        if not self.pending and not self.ready.wait(WAIT if timeout is None else timeout):
            self.hung += timeout is None  # a real select would block for ever
        if threading.get_ident() in self.explode:
            self.explode.discard(threading.get_ident())
            raise KeyboardInterrupt("in select")

    def wake(self) -> None:
        self.wakes += 1
        self.ready.set()

    def release(self) -> None:
        self.released += 1

    def feed(self, box: Box, item: Any) -> None:
        """Mail for ``box``: the leader's select must look again."""
        with self._lock:
            self.pending.append((box, item))
            self._nudge(None, True)
        self.ready.set()  # also when no one selects yet: the next select returns at once

    def leading(self) -> bool:
        return self._leader is not None and self._selecting

    def close(self) -> None:
        with self._lock:
            self._end_turns()
        if self._watcher is not None:
            self._watcher.join(WAIT)


class Watching(threading.Condition):
    """The watcher's condition, telling when the watcher first waits on it."""

    def __init__(self, lock: Any) -> None:
        super().__init__(lock)
        self.entered = threading.Event()

    def wait(self, timeout: float | None = None) -> bool:
        self.entered.set()
        return super().wait(timeout)


@pytest.fixture
def owner() -> Iterator[Owner]:
    fake = Owner()
    yield fake
    fake.close()


def until(predicate: Callable[[], bool]) -> None:
    end = time.monotonic() + WAIT
    while not predicate():
        assert time.monotonic() < end, "not reached"
        time.sleep(0.002)


def feed_once_leading(owner: Owner, box: Box, item: Any) -> None:
    """Feed ``box`` once its thread has the turn (regardless, after ``WAIT``: no hang)."""
    try:
        until(lambda: owner._leader is box)
    finally:
        owner.feed(box, item)


def waiting(owner: Owner, box: Box, name: str, out: list[Any]) -> threading.Thread:
    """A thread that waits for ``box``'s mail and appends what it got (or raised) to ``out``."""

    def run() -> None:
        try:
            with owner._lock:
                owner._wait(box)
                out.append(box._mail.popleft())
        except BaseException as exc:
            out.append(exc)

    thread = threading.Thread(target=run, name=name, daemon=True)
    thread.start()
    return thread


def test_a_sequential_waiter_polls_for_itself_in_its_own_thread(owner: Owner) -> None:
    box = Box()
    owner.feed(box, "mail")
    threads = threading.active_count()
    with owner._lock:
        owner._wait(box)
        assert box._mail.popleft() == "mail"
    assert owner.polls == [threading.current_thread().name]  # no thread switch
    assert threading.active_count() == threads  # no thread started
    assert owner._leader is None and not owner._selecting and owner.wakes == 0
    with owner._lock:
        box._mail.append("already")
        owner._wait(box)  # mail waits: no poll
    assert len(owner.polls) == 1


def test_many_waiters_take_turns_and_each_gets_its_own_mail(owner: Owner) -> None:
    boxes = [Box() for _ in range(8)]
    got: list[list[Any]] = [[] for _ in boxes]
    names = [f"waiter-{i}" for i in range(len(boxes))]
    threads = [waiting(owner, box, names[i], got[i]) for i, box in enumerate(boxes)]
    until(lambda: owner.leading() and len(owner._followers) == len(boxes) - 1)
    first = next(i for i, box in enumerate(boxes) if box is owner._leader)
    rest = [i for i in range(len(boxes)) if i != first]
    order = [first, *random.Random(7).sample(rest, len(rest))]
    for i in order:  # the leader's first: the turn must be handed on
        owner.feed(boxes[i], i)
        threads[i].join(WAIT)
        assert got[i] == [i]
    assert got == [[i] for i in range(len(boxes))]
    assert owner.most == 1  # one poll step at a time
    assert set(owner.polls) <= set(names) and len(set(owner.polls)) >= 2
    assert owner._leader is None and not owner._followers


def test_a_follower_woken_with_its_own_mail_hands_the_turn_to_the_next(owner: Owner) -> None:
    leader, first, second = Box(), Box(), Box()
    out: dict[str, list[Any]] = {"leader": [], "first": [], "second": []}
    threads = {"leader": waiting(owner, leader, "leader", out["leader"])}
    until(lambda: owner._leader is leader and owner._selecting)
    threads["first"] = waiting(owner, first, "first", out["first"])
    until(lambda: first in owner._followers)
    threads["second"] = waiting(owner, second, "second", out["second"])
    until(lambda: second in owner._followers)
    with owner._lock:  # one poll step brings the leader's mail and the first follower's
        owner.pending.extend([(leader, "L"), (first, "F")])
        owner.wake()
    threads["leader"].join(WAIT)
    threads["first"].join(WAIT)
    until(lambda: owner._leader is second)  # the first passed the turn on as it left
    owner.feed(second, "S")
    threads["second"].join(WAIT)
    assert out == {"leader": ["L"], "first": ["F"], "second": ["S"]}
    assert owner.polls[-1] == "second" and "first" not in owner.polls


def test_the_watcher_takes_the_free_turn_after_grace_and_yields_it_to_a_waiter(
    owner: Owner,
) -> None:
    box = Box()
    owner.feed(box, "first")
    before = time.monotonic()
    with owner._lock:
        owner._wait(box)  # a caller leaves the turn now
        owner._start_watching()
        owner._start_watching()  # one watcher only
        watcher = owner._watcher
    assert watcher is not None and watcher.daemon and watcher.name == "test-watcher"
    until(owner.leading)
    assert owner._leader is owner and owner.polls[1:] == ["test-watcher"]
    assert owner.at[1] - before >= GRACE  # it waited for the turn to be free so long
    later = Box()
    feeder = threading.Thread(target=feed_once_leading, args=(owner, later, "second"))
    feeder.start()
    wakes = owner.wakes
    with owner._lock:
        owner._wait(later)  # the watcher yields the turn; this thread takes it
        assert later._mail.popleft() == "second"
    feeder.join(WAIT)
    assert owner.polls[2:] == [threading.current_thread().name]
    assert owner.wakes > wakes and watcher.is_alive()
    assert owner.hung == 0  # the watcher's select was woken to hand the turn on


def test_an_interrupt_in_the_leaders_select_hands_the_turn_on(owner: Owner) -> None:
    first, second = Box(), Box()
    out_first: list[Any] = []
    out_second: list[Any] = []
    leader = waiting(owner, first, "leader", out_first)
    until(lambda: owner._leader is first and owner._selecting)
    follower = waiting(owner, second, "follower", out_second)
    until(lambda: second in owner._followers)
    assert leader.ident is not None
    owner.explode.add(leader.ident)
    owner.wake()
    leader.join(WAIT)
    assert len(out_first) == 1 and isinstance(out_first[0], KeyboardInterrupt)
    until(lambda: owner._leader is second)  # the follower took the turn
    owner.feed(second, "mail")
    follower.join(WAIT)
    assert out_second == ["mail"] and owner.polls[-1] == "follower"
    assert owner._leader is None and not owner._selecting and not owner._followers
    assert not owner._lock._is_owned()


def test_an_interrupt_in_a_followers_wait_unlists_it_and_the_leader_carries_on(
    owner: Owner,
) -> None:
    main = threading.get_ident()
    assert threading.main_thread().ident == main
    mine, theirs = Box(), Box()
    out: list[Any] = []
    leader = waiting(owner, theirs, "leader", out)
    until(owner.leading)

    def interrupt() -> None:
        try:
            until(lambda: mine in owner._followers)
        finally:  # regardless: the main thread must not hang
            signal.pthread_kill(main, signal.SIGINT)

    signaller = threading.Thread(target=interrupt, daemon=True)
    signaller.start()
    with owner._lock:
        with pytest.raises(KeyboardInterrupt):
            owner._wait(mine)
        assert owner._lock._is_owned()
        assert mine not in owner._followers and owner._leader is theirs
    signaller.join(WAIT)
    owner.feed(theirs, "mail")
    leader.join(WAIT)
    assert out == ["mail"]
    owner.feed(mine, "late")
    with owner._lock:
        owner._wait(mine)  # the turn is free now: this thread takes it
        assert mine._mail.popleft() == "late"


@pytest.mark.parametrize(
    ("selecting", "stir", "stirred", "deadline", "woken"),
    [
        (False, True, True, 0.0, False),  # no one selects: nothing to wake
        (True, False, False, None, False),
        (True, False, False, 20.0, False),  # later than the select's timeout
        (True, False, False, 5.0, True),  # sooner
        (True, False, True, None, True),  # what it watches changed
        (True, True, False, None, True),  # the leader's own mail came
    ],
)
def test_the_leaders_select_is_woken_only_when_it_must_look_again(
    owner: Owner,
    selecting: bool,
    stir: bool,
    stirred: bool,
    deadline: float | None,
    woken: bool,
) -> None:
    owner._selecting, owner._stir, owner._until = selecting, stir, 10.0
    owner._nudge(deadline, stirred)
    assert owner.wakes == int(woken)
    assert owner._stir == (stir and not woken)


def test_mail_for_the_leader_stirs_it_and_a_sooner_deadline_shortens_its_select(
    owner: Owner,
) -> None:
    box, other = Box(), Box()
    with owner._lock:
        owner._post(other)  # not the leader: no stir
        assert not owner._stir
    out: list[Any] = []
    thread = waiting(owner, box, "leader", out)
    until(owner.leading)
    assert owner.timeouts == [None]
    with owner._lock:
        owner.deadline = time.monotonic() + 3600.0
        owner._nudge(owner.deadline, False)  # sooner than never
        assert owner.wakes == 1
    until(lambda: len(owner.timeouts) == 2)
    timeout = owner.timeouts[1]
    assert timeout is not None and 0.0 < timeout <= 3600.0
    with owner._lock:
        owner.deadline = time.monotonic() - 1.0  # past: a select that does not block
    owner.wake()
    until(lambda: len(owner.timeouts) >= 3)
    assert owner.timeouts[2] == 0.0
    with owner._lock:
        owner.deadline = None
        box._mail.append("posted by hand")
        owner._post(box)  # the leader's own mail
        assert owner._stir
        wakes = owner.wakes
        owner._nudge(None, False)  # so its select is woken
        assert owner.wakes == wakes + 1 and not owner._stir
    thread.join(WAIT)
    assert out == ["posted by hand"]


def test_perform_answers_steps_with_mail_or_a_call_made_with_the_lock_let_go(
    owner: Owner,
) -> None:
    box = Box()
    seen: list[Any] = []

    def steps() -> Generator[Any, object, str]:
        seen.append((yield None))  # the next mail
        seen.append((yield "call me"))
        try:
            yield "raise"
        except ValueError as exc:
            seen.append(exc.args)
        return "done"

    def call(step: Any) -> object:
        assert not owner._lock._is_owned()
        if step == "raise":
            raise ValueError("the callable's own")
        return f"answered {step}"

    owner.feed(box, "mail")
    assert owner._perform(box, steps(), call) == "done"
    assert not owner._lock._is_owned()  # taken for the steps, let go after
    assert seen == ["mail", "answered call me", ("the callable's own",)]

    def uncaught() -> Generator[Any, object, str]:
        yield "raise"
        return "unreached"

    with pytest.raises(ValueError, match="own"):
        owner._perform(box, uncaught(), call)
    assert not owner._lock._is_owned()


@pytest.mark.parametrize(
    "interrupts", [{}, {1: "before"}, {1: "after"}, {2: "before"}, {2: "after"}]
)
@pytest.mark.parametrize("outcome", ["returns", "raises"])
def test_perform_lets_the_lock_go_whatever_lands(
    owner: Owner, interrupts: dict[int, str], outcome: str
) -> None:
    """``_perform`` runs the steps holding the lock once, and the lock is free afterwards,
    whether an interrupt lands while it is taken (no step then runs), while a call's
    ``unlocked`` re-takes it, or nowhere; an interrupt escapes, else what the steps
    returned or raised."""
    real, lock = owner._lock, Flaky(interrupts)
    owner._lock = lock  # (no thread waits on it: the watcher is not started)
    ran: list[int] = []

    def steps() -> Generator[Any, object, int]:
        ran.append(lock.depth())
        yield "call"  # made with the lock let go: its re-take is the lock's second take
        if outcome == "raises":
            raise ValueError("the steps' own")
        return 7

    def perform() -> int:
        return owner._perform(Box(), steps(), lambda step: None)

    try:
        if interrupts:
            with pytest.raises(KeyboardInterrupt):
                perform()
        elif outcome == "raises":
            with pytest.raises(ValueError, match="own"):
                perform()
        else:
            assert perform() == 7
    finally:
        owner._lock = real
    assert lock.depth() == 0
    assert ran == ([] if 1 in interrupts else [1])


@pytest.mark.parametrize("state", ["idle", "leading"])
def test_end_turns_ends_the_watcher_and_releases_once(owner: Owner, state: str) -> None:
    watching = Watching(owner._lock)
    with owner._lock:
        if state == "idle":
            owner._freed = owner._now() + 3600.0  # the turn was not free long enough
        owner._watching = watching
        owner._start_watching()
        watcher = owner._watcher
    assert watcher is not None
    until(owner.leading if state == "leading" else watching.entered.is_set)
    with owner._lock:
        owner._end_turns()
        released = owner.released
    watcher.join(WAIT)
    assert not watcher.is_alive() and owner.released == 1
    assert released == (1 if state == "idle" else 0)  # the leader releases as it leaves
    assert owner._leader is None


def test_a_leader_left_when_closed_releases_as_it_leaves(owner: Owner) -> None:
    box = Box()
    out: list[Any] = []
    thread = waiting(owner, box, "leader", out)
    until(owner.leading)
    with owner._lock:
        owner._end_turns()
        assert owner.released == 0
        box._mail.append("closed")  # what a closing owner posts
        owner._post(box)
    thread.join(WAIT)
    assert out == ["closed"] and owner.released == 1


def test_the_watcher_does_not_die_of_an_exception_in_the_poll_step(owner: Owner) -> None:
    failures = 0
    real = owner.block

    def flaky(timeout: float | None) -> None:
        nonlocal failures
        if threading.current_thread().name == "test-watcher" and failures < 3:
            failures += 1
            raise OSError("the poll step's own")
        real(timeout)

    owner.block = flaky  # type: ignore[method-assign]
    with owner._lock:
        owner._start_watching()
    until(lambda: failures == 3 and owner.leading())
    assert owner._watcher is not None and owner._watcher.is_alive()
    assert owner.inside == 1 and owner._leader is owner
