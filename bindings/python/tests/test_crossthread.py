"""The cross-thread matrix: test_reentry.py's other dimension.

Thread A drives test_reentry's world to one kind of user code (a row) and
parks there; meanwhile thread B makes one public call (a column) on the same
objects. Then A is let go, both finish, and the cell checks B's outcome
against the docstrings' "another thread" rules, that A's dispatch went on
unharmed, that the dispatcher is idle and usable, and that nothing libflux
held is left behind.

Only ``dispatch`` waits for another thread's dispatch (Dispatcher's
docstring); every other call must return while A is still parked.
"""

from __future__ import annotations

import gc
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import test_reentry as reentry

import flux
from flux.dispatcher import live_enqueued

PARK_SECONDS = 10.0  # bounds: a bug fails the cell instead of hanging the run
PROMPT_SECONDS = 2.0
WAITS_SECONDS = 0.05  # how long a waiting dispatch is given to (wrongly) return


class ParkingProbe(reentry.Probe):
    """At its row's site (once): tells the test, then waits for the gate. The
    column runs on thread B, not here."""

    def __init__(self, site: str, column: Callable[[reentry.World], object]) -> None:
        super().__init__(site, column)  # the world's waiter reads the column
        self.parked = threading.Event()
        self.gate = threading.Event()

    def hit(self, world: reentry.World, site: str) -> None:
        if site != self.site or self.fired:
            return
        self.fired = True
        self.parked.set()
        self.gate.wait(PARK_SECONDS)


# Rows whose user code A runs inside its dispatch (or its queue's drain),
# "idle" ones: outside any dispatch (a release at a dispatch's end, in
# unregister or remove, a trampoline's handler); and "closing" ones: a
# release that Dispatcher.close runs.
OUTSIDE = ("idle", "closing")
ROWS = [row for row in reentry.ROWS if row.kind in reentry.IN_DISPATCH or row.kind in OUTSIDE]


def expected(row: reentry.Row, column: str) -> type[BaseException] | None | str:
    """The exception class B's call raises, None for success, or "skip"."""
    if row.kind in OUTSIDE:
        return outside_expected(row, column)
    if row.site == "handler" and "(the world's)" in column:
        return "skip"  # closing or re-making a trampoline under its running call is undefined
    if column in ("wait_for(callback)", "wait_for(store)", "wait_for([])"):
        return flux.NotDispatchingError  # "not inside a dispatch of this dispatcher on this thread"
    if column in ("emit_change", "emit_change(error=)", "has_changed", "plain.emit_change", "plain.has_changed"):
        return flux.NotDispatchingError  # "not inside a dispatch on this thread"
    if column in ("close", "store.close (in a group)", "plain.close"):
        return flux.AlreadyDispatchingError  # "a dispatch is running (... or on another thread)"
    if column == "Subscription.remove" and row.sub_gone:
        return flux.UnknownTokenError  # A's row removed it before parking
    if column == "unregister(store token)":
        return flux.InvalidArgumentError  # a store's registration is its own, from any thread
    if column in ("Dispatcher.__init__ again", "store.__init__ again", "group.__init__ again"):
        return RuntimeError  # not closed
    if column == "Trampoline.__init__ again (the world's)":
        return RuntimeError
    if column == "copy.copy":
        return TypeError
    if column == "store(cls)":
        return flux.UnknownStoreError
    return None


def outside_expected(row: reentry.Row, column: str) -> type[BaseException] | None | str:
    """A parked outside any dispatch: B's call acts as test_reentry's rows
    have it on A's thread (docs silent on the thread there: "any thread"),
    and returns at once."""
    return reentry.expected(row, column)


COLUMNS = dict(reentry.COLUMNS)
CELLS = [
    pytest.param(row, column, id=f"{row.name} / {column}")
    for row in ROWS
    for column in COLUMNS
    if expected(row, column) != "skip"
]


@pytest.fixture(scope="module", autouse=True)
def frozen_heap() -> Iterator[None]:
    gc.collect()
    gc.freeze()
    yield
    gc.unfreeze()


def run_on_thread(fn: Callable[[], object]) -> tuple[threading.Thread, dict[str, Any]]:
    out: dict[str, Any] = {}

    def body() -> None:
        try:
            out["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 -- the outcome is what is checked
            out["error"] = exc
            exc.__traceback__ = None

    thread = threading.Thread(target=body, daemon=True)
    thread.start()
    return thread, out


@pytest.mark.parametrize(("row", "column"), CELLS)
def test_crossthread(row: reentry.Row, column: str) -> None:
    before = reentry.everything_live()
    probe = ParkingProbe(row.site, COLUMNS[column])
    world = reentry.World(row, probe)
    if row.name in reentry.WAITING_ROWS:
        world.row = reentry.Row("callback run by wait_for", row.site, row.trigger, row.kind)
    try:
        check_cell(world, row, column)
    finally:
        probe.gate.set()
        world.close()
    del world, probe
    gc.collect()
    assert live_enqueued() == 0
    assert reentry.everything_live() == before, "an object libflux held is still held"


def check_cell(world: reentry.World, row: reentry.Row, column: str) -> None:
    probe = world.probe
    assert isinstance(probe, ParkingProbe)
    a, a_out = run_on_thread(lambda: row.trigger(world))
    assert probe.parked.wait(PARK_SECONDS), "A never reached the row's user code"
    b, b_out = run_on_thread(lambda: COLUMNS[column](world))
    if column == "dispatch" and row.kind not in OUTSIDE:
        b.join(WAITS_SECONDS)
        assert b.is_alive(), "dispatch returned while another thread's dispatch ran"
    else:
        b.join(PROMPT_SECONDS)
        assert not b.is_alive(), f"{column} waited for the dispatch parked on another thread"
    probe.gate.set()
    a.join(PARK_SECONDS)
    b.join(PARK_SECONDS)
    assert not a.is_alive() and not b.is_alive(), "deadlock once the gate opened"

    want = expected(row, column)
    got = b_out.get("error")
    if want is None:
        assert got is None, f"expected success, got {got!r}"
    else:
        assert type(got) is want, f"expected {want.__name__}, got {got!r}"  # type: ignore[union-attr]
    if column == "is_dispatching":
        assert b_out["value"] is (row.kind not in OUTSIDE)
    # A's own outcome: the rows' triggers raise nothing (enqueue_failing's
    # failure goes to on_error).
    assert "error" not in a_out, f"A's trigger raised {a_out['error']!r}"
    # Accepted, B's payload was dispatched: queued for A, or by B itself.
    if column in ("enqueue", "enqueue(on_error=)") and got is None:
        assert "probe-queued" in world.seen, "the enqueued payload was dispatched"
    if column == "dispatch" and got is None:
        assert "probe" in world.seen
    assert not world.d.is_dispatching
    if world.d.closed:
        return
    world.ran.clear()
    started = time.monotonic()
    world.d.dispatch("check")
    assert time.monotonic() - started < PROMPT_SECONDS
    assert "waiter" in world.ran
    assert not world.d.is_dispatching
