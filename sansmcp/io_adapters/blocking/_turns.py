"""Turn-taking (leader/follower): threads that wait for their own mail take turns to poll.

Theory of operation
-------------------
An owner keeps its state under one lock (an ``RLock`` held once at most, see
:func:`~._selectloop.hold`) and has one poll step that blocks (``select``) with the
lock let go, then feeds what it found to its machine, which posts mail to waiters.
:class:`Turns`, which the owner holds, decides who runs that step; the owner gives it
all it uses when it makes it: the lock, the clock, the poll step, ``wake`` and
``release``.  A waiter is
anything with a ``_mail`` (a deque the poll step appends to) and a ``_bell`` (a
:class:`~._selectloop.Bell`); its thread runs a generator of steps with
:meth:`Turns._perform`, holding the lock but to block: a step None takes the next
mail, any other is a blocking call made with the lock let go.

A thread that wants its waiter's mail (:meth:`Turns._wait`) takes the turn if no one
has it and polls until its own mail came -- a sequential caller thus polls for itself
with no thread switch -- then leaves the turn and rings the first follower's bell.
Otherwise it follows: it waits on its bell, rung when its mail is posted
(:meth:`Turns._post`) or the turn is passed to it.  The leader blocks in
:meth:`Turns._select`, which the owner calls from its poll step; :meth:`Turns._nudge`
wakes that ``select`` (the owner's ``wake``) when the leader's own mail came, what it
watches changed, or the next deadline is sooner than its timeout.

One watcher thread (:meth:`Turns._start_watching`) takes the turn once no one has
wanted it for ``GRACE`` s, so what comes between work items is polled for, and yields
it to the first thread that wants it (it polls until a follower waits).  It never dies
of an exception.  :meth:`Turns._end_turns` (the owner closed) ends the watcher and
calls the owner's ``release`` now if no one has the turn, else once the leader leaves;
then it lets go of what the owner gave it (its poll step may hold the owner, which holds
its :class:`Turns`: a reference cycle until then).

**Interrupts.**  A ``KeyboardInterrupt`` may land wherever a thread blocks: the lock is
re-taken with :func:`~._selectloop.hold`, the turn left or the follower unlisted, the
turn passed on, and then the interrupt raised.
"""

from __future__ import annotations

import contextlib
import math
import threading
from collections import deque
from collections.abc import Callable, Generator
from typing import Any, Protocol, TypeVar, cast

from .._common import Steps
from ._selectloop import Bell, hold, retake, unlocked

__all__ = ["GRACE", "Turns", "Waiter"]

GRACE = 0.05  # s the turn must have been free before the watcher takes it
T = TypeVar("T")


class Waiter(Protocol):
    """What waits for mail (put in ``_mail`` by the poll step): ``_bell`` wakes its thread."""

    @property
    def _mail(self) -> deque[Any]: ...

    @property
    def _bell(self) -> Bell: ...


class Turns:
    """The turn-taking of an owner that made it (under its lock: every method runs under
    it) with what it uses: ``lock``, an ``RLock`` held once at most; ``now``, the clock;
    ``poll``, one poll step (under the lock: :meth:`_select`, then handle what it
    returned); ``wake`` cuts a :meth:`_select` short (from any thread); ``release`` frees
    what polling uses once the owner is closed; ``name`` names the watcher thread."""

    def __init__(
        self,
        lock: Any,
        *,
        now: Callable[[], float],
        poll: Callable[[], None],
        wake: Callable[[], None],
        release: Callable[[], None],
        name: str,
    ) -> None:
        self._lock = lock
        self._now, self._poll = now, poll
        self._wake, self._release, self._watcher_name = wake, release, name
        self._leader: Waiter | Turns | None = None  # who has the turn (self: the watcher)
        self._followers: dict[Waiter, None] = {}  # waiting for mail or for the turn, in order
        self._selecting = self._stir = False  # the leader is in select; it must look again
        self._until = math.inf  # when the leader's select times out
        self._armed = math.inf  # the soonest deadline other threads armed during that select
        self._freed = 0.0  # when a caller last left the turn
        self._over = False  # the owner is closed
        self._watching = threading.Condition(lock)
        self._watcher: threading.Thread | None = None

    def _wait(self, waiter: Waiter) -> None:
        """Until ``waiter`` has mail: wait for it, or take the turn to poll."""
        while not waiter._mail:
            if self._leader is None:
                self._take_turn(waiter)
                continue
            self._followers[waiter] = None
            if self._leader is self:  # the watcher: it hands the turn on
                self._wake()
            try:
                waiter._bell.wait(self._lock)
            finally:
                interrupt = hold(self._lock)  # (held, unless an interrupt landed in between)
                del self._followers[waiter]
                self._pass_turn()
                if interrupt is not None:
                    raise interrupt

    def _perform(
        self, waiter: Waiter, steps: Generator[Any, object, T], call: Callable[[Any], object]
    ) -> T:
        """Run ``steps`` in ``waiter``'s thread, holding the lock (taken here, let go when
        this returns or raises, whatever interrupts land while it is taken or let go: the
        last one is raised once it is let go): a step None is answered with ``waiter``'s
        next mail (:meth:`_wait`), any other with ``call(step)``, run with the lock let go;
        what either raises (an interrupt, the callable's own) is thrown in."""
        lock = self._lock
        try:
            retake(lock)
            performing, mail = Steps(steps), waiter._mail
            for step in performing:
                try:
                    if step is None:
                        if not mail:
                            self._wait(waiter)
                        performing.reply = mail.popleft()
                    else:
                        performing.reply = unlocked(lock, call, step)
                except BaseException as exc:  # the interrupt, or the callable's own
                    performing.fail(hold(lock) or exc)
            return cast(T, performing.value)
        finally:  # (held, unless an interrupt landed in a re-take)
            interrupt = None if lock._is_owned() else hold(lock)
            lock.release()
            if interrupt is not None:
                raise interrupt

    def _post(self, waiter: Waiter) -> None:
        """Mail was put in ``waiter``'s ``_mail``: wake its thread."""
        if (bell := waiter._bell)._asleep:  # (Bell.ring's test, inline: every mail)
            bell.ring()
        self._stir |= waiter is self._leader

    def _select(self, wait: Callable[[float | None], T], deadline: float | None) -> T:
        """The leader's ``wait(timeout)`` until ``deadline`` (None: none), lock let go."""
        timeout = None if deadline is None else max(deadline - self._now(), 0.0)
        self._selecting, self._stir, self._armed = True, False, math.inf
        self._until = math.inf if deadline is None else deadline
        self._lock.release()  # (unlocked, inline: every select of every exchange)
        try:
            return wait(timeout)
        finally:
            retake(self._lock)
            self._selecting = False

    def _nudge(self, deadline: float | None, stirred: bool) -> None:
        """After the owner's state changed: wake the leader's select if it must look again
        (its own mail came, ``stirred``: what it watches changed, or ``deadline`` is sooner).
        A sooner ``deadline`` is kept in ``_armed``: the leader's step fires it if it is due
        once that step has pumped (its next step may never come)."""
        sooner = deadline is not None and deadline < self._until
        if self._selecting and sooner:
            self._armed = min(self._armed, cast(float, deadline))
        if self._selecting and (self._stir or stirred or sooner):
            self._stir = False
            self._wake()

    def _start_watching(self) -> None:
        if self._watcher is None:
            self._watcher = threading.Thread(target=self._watch, name=self._watcher_name)
            self._watcher.daemon = True
            self._watcher.start()

    def _end_turns(self) -> None:
        """The owner is closed: the watcher ends; ``release`` now, or when the turn is left."""
        self._over = True
        self._watching.notify()
        if self._leader is None:
            self._let_go()
        else:
            self._wake()

    def _take_turn(self, leader: Waiter | Turns) -> None:
        self._leader = leader
        try:
            if isinstance(leader, Turns):  # the watcher
                while not (self._followers or self._over):
                    self._poll()
            else:
                while not leader._mail:
                    self._poll()
        finally:
            interrupt = None if self._lock._is_owned() else hold(self._lock)
            self._leader, self._selecting, self._freed = None, False, self._now()
            if self._over:
                self._let_go()
            if self._followers:
                self._pass_turn()
            if interrupt is not None:
                raise interrupt

    def _let_go(self) -> None:
        """Closed, the turn free: ``release``, then drop the owner's poll step and release
        (they may hold the owner: no reference cycle through them outlives its close)."""
        release, self._poll, self._release = self._release, _spent, _spent
        release()

    def _pass_turn(self) -> None:
        if self._leader is None and self._followers:  # to the first waiting thread
            next(iter(self._followers))._bell.ring()

    def _watch(self) -> None:
        """The watcher thread: takes the turn once no one has wanted it for ``GRACE`` s
        and hands it to the first thread that wants it."""
        with self._lock:
            while not self._over:
                free = self._leader is None and not self._followers
                calm = self._now() - self._freed
                if free and calm >= GRACE:
                    with contextlib.suppress(Exception):  # the watcher must not die of one
                        self._take_turn(self)
                else:
                    self._watching.wait(GRACE - calm if free else GRACE)


def _spent() -> None:
    """What a closed :class:`Turns` keeps in place of its owner's poll step and release."""
