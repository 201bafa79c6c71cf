"""The re-entrancy matrix, Python's counterpart of Tests/c/test-reentry.c.

From every kind of user code the binding runs (rows) call every public
method on the same objects (columns), each cell in a fresh world, and check
the outcome the docstrings (or, where they are silent, flux.h) give for that
situation; then that the dispatcher still runs every callback, and that no
object libflux holds a Python reference for is left behind.

The world: a dispatcher traced by a ``flux.Trace`` whose ``events`` list runs
the hook rows, a waiter callback (registered first, so it can run the world's
callback through ``wait_for``), that callback, a ``ReduceStore`` with
``are_equal`` and a listener, a plain ``Store``, a group on the reduce store
and a ``Trampoline``. The probe fires once, at the first run of its row's
user code, and records the column's outcome.
"""

from __future__ import annotations

import copy
import gc
import sys
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

import flux
from flux import _native
from flux.dispatcher import live_enqueued

# -- the world ---------------------------------------------------------------


class Probe:
    """Runs the cell's column once, at its row's site, and keeps the outcome."""

    def __init__(self, site: str, column: Callable[[World], object]) -> None:
        self.site = site
        self.column = column
        self.fired = False
        self.value: object = None
        self.error: BaseException | None = None

    def hit(self, world: World, site: str) -> None:
        if site != self.site or self.fired:
            return
        self.fired = True
        try:
            self.value = self.column(world)
        except BaseException as exc:  # noqa: BLE001 -- the outcome is what is checked
            # Without its traceback: one caught in a sys.unraisablehook that
            # a ctypes callback's failure called keeps its frames alive for
            # good (CPython 3.11, plain ctypes too), which the leak count
            # would see. The whole chain's.
            self.error = exc
            seen: set[int] = set()
            link: BaseException | None = exc
            while link is not None and id(link) not in seen:
                seen.add(id(link))
                link.__traceback__ = None
                link = link.__cause__ or link.__context__


class Callback:
    """The world's callback; the world keeps only its token, so that its
    release (``__del__``) is libflux's doing."""

    def __init__(self, world: World) -> None:
        self.world = world

    def __call__(self, payload: Any) -> None:
        w = self.world
        w.ran.add("callback")
        if w.fail_next or payload in ("bad", "discard"):
            w.fail_next = False
            raise Boom
        if payload == "go" and w.row.name == "enqueue's on_error, of a queued dispatch":
            w.d.enqueue("bad", on_error=w.on_error)
        if payload == "go" and w.row.name == "on_error released after its queued dispatch failed":
            w.d.enqueue("bad", on_error=OnError(w))
        if payload == "go" and w.row.name == "payload released after its queued dispatch":
            w.d.enqueue(DyingPayload(w))
        if payload == "go" and w.row.name == "listener released when its owner is collected in a callback":
            w.owner = None
            gc.collect()
        if payload == "go" and w.row.name == "Trace released when replaced in a callback":
            w.trace = flux.Trace(w.d).start()
        if payload == "go" and w.row.name == "callback of a queued dispatch":
            w.d.enqueue("queued")
            return
        w.probe.hit(w, "callback" if payload == "go" or payload == "queued" else "")
        if payload == "go" and w.row.name == "trampoline handler in a callback":
            w.tramp(0, 0)
        if payload == "go" and w.row.name.startswith("callback released at the end of a dispatch"):
            w.d.unregister(w.cb_token)

    def __del__(self) -> None:
        self.world.probe.hit(self.world, "callback release")


class Listener:
    def __init__(self, world: World) -> None:
        self.world = world

    def __call__(self) -> None:
        w = self.world
        w.ran.add("listener")
        w.probe.hit(w, "listener")
        if w.row.name.startswith("listener released after removing itself") and w.sub is not None:
            w.sub.remove()

    def __del__(self) -> None:
        self.world.probe.hit(self.world, "listener release")


class GroupFn:
    def __init__(self, world: World) -> None:
        self.world = world

    def __call__(self) -> None:
        w = self.world
        w.ran.add("group")
        w.probe.hit(w, "group")
        if w.row.name.startswith("group function released at the end of a dispatch") and w.group is not None:
            w.group.release()

    def __del__(self) -> None:
        self.world.probe.hit(self.world, "group release")


class Handler:
    """Holds its world weakly: the world's trampoline is left to garbage
    collection (libflux holds the handler until the closure goes)."""

    def __init__(self, world: World) -> None:
        self.world = weakref.ref(world)

    def __call__(self, context: int, payload: int) -> int:
        w = self.world()
        if w is not None:
            w.probe.hit(w, "handler")
            if w.row.site == "unraisablehook":
                raise Boom("from a handler")
        return 0

    def __del__(self) -> None:
        w = self.world()
        if w is not None:
            w.probe.hit(w, "handler release")


class Boom(Exception):
    pass


class Count:
    """A state: its release is user code too."""

    def __init__(self, n: int, world: World) -> None:
        self.n = n
        self.world = world

    def __del__(self) -> None:
        if self.world.state_armed:
            self.world.probe.hit(self.world, "state release")


class Counter(flux.ReduceStore[Count]):
    def __init__(self, dispatcher: flux.Dispatcher[Any], world: World) -> None:
        self.world = world
        super().__init__(dispatcher)

    def get_initial_state(self) -> Count:
        return Count(0, self.world)

    def reduce(self, state: Count, action: Any) -> Count:
        self.world.ran.add("reduce")
        self.world.probe.hit(self.world, "reduce")
        if action == "go" and self.world.row.name == "listener released when its owner is collected in a reduce":
            self.world.owner = None
            gc.collect()
        if action == "discard":
            # Aborts the dispatch from inside this reduce: whatever it
            # returns, the C store keeps its state.
            try:
                self.world.d.wait_for([self.world.cb_token])
            except Boom:
                pass
        if action == "go" and self.world.row.name == "listener of an emit_change(error=)":
            self.emit_change(error=self.world.emitted)
        return Count(state.n + 1, self.world)

    def are_equal(self, one: Count, two: Count) -> bool:
        self.world.probe.hit(self.world, "are_equal")
        return one.n == two.n


class Plain(flux.Store):
    def __init__(self, dispatcher: flux.Dispatcher[Any], world: World) -> None:
        self.world = world
        super().__init__(dispatcher)

    def on_dispatch(self, payload: Any) -> None:
        self.world.ran.add("on_dispatch")
        self.world.probe.hit(self.world, "on_dispatch")
        if payload == "fail":
            raise Boom
        self.emit_change()


class Extra(flux.ReduceStore[int]):
    def get_initial_state(self) -> int:
        return 0

    def reduce(self, state: int, action: Any) -> int:
        return state


class Unregistered(flux.Store):
    def on_dispatch(self, payload: Any) -> None:
        pass


class Registered(flux.Store):
    def on_dispatch(self, payload: Any) -> None:
        pass


class HookEvents(list[Any]):
    """``Trace.events`` (a public attribute): its append is the hook's user code."""

    def __init__(self, world: World) -> None:
        super().__init__()
        self.world = world

    def append(self, event: Any) -> None:
        if not isinstance(event.payload, DyingPayload):
            super().append(event)
        self.world.probe.hit(self.world, f"hook {event.kind}")


class DyingTrace(flux.Trace):
    """A trace the world lets go once started: the dispatcher's observer
    keeps it, and libflux's release of the observer lets it go."""

    def __init__(self, dispatcher: flux.Dispatcher[Any], world: World) -> None:
        super().__init__(dispatcher)
        self.world = world

    def __del__(self) -> None:
        self.world.probe.hit(self.world, "trace release")


class Initial(flux.ReduceStore[int]):
    def __init__(self, dispatcher: flux.Dispatcher[Any], world: World) -> None:
        self.world = world
        super().__init__(dispatcher)

    def get_initial_state(self) -> int:
        self.world.probe.hit(self.world, "get_initial_state")
        return 0

    def reduce(self, state: int, action: Any) -> int:
        return state


class Constructed(flux.Store):
    def __init__(self, dispatcher: flux.Dispatcher[Any], world: World) -> None:
        super().__init__(dispatcher)
        world.probe.hit(world, "register_store constructor")

    def on_dispatch(self, payload: Any) -> None:
        pass


class Unnamed:
    """A callable with no __qualname__: register names it by its repr."""

    def __init__(self, world: World) -> None:
        self.world = world

    def __call__(self, payload: Any) -> None:
        pass

    def __repr__(self) -> str:
        self.world.probe.hit(self.world, "repr")
        return "Unnamed"


class OnError:
    def __init__(self, world: World) -> None:
        self.world = world

    def __call__(self, exc: BaseException) -> None:
        pass

    def __del__(self) -> None:
        self.world.probe.hit(self.world, "on_error release")


class DyingPayload:
    """A payload no one but the queue keeps (the world's records skip it)."""

    def __init__(self, world: World) -> None:
        self.world = world

    def __del__(self) -> None:
        self.world.probe.hit(self.world, "payload release")


class World:
    def __init__(self, row: Row, probe: Probe) -> None:
        self.row = row
        self.emitted = Boom("emitted")
        self.state_armed = row.name.startswith(("replaced state released", "state released by"))
        self.probe = probe
        self.ran: set[str] = set()
        self.seen: list[Any] = []
        self.fail_next = False
        self.made: list[Any] = []  # what a column made, closed at the end
        self.d: flux.Dispatcher[Any] = flux.Dispatcher()
        self.d.register(self._waiter, name="waiter")
        self.cb_token = self.d.register(Callback(self), name="callback")
        self.sub: flux.Subscription | None = None
        self.group: flux.StoreGroup | None = None
        self.store = Counter(self.d, self)
        self.plain = Plain(self.d, self)
        owner = self.owner = Owner() if "its owner is collected" in row.name else None
        self.sub = self.store.add_listener(Listener(self), owner=owner)
        self.group = flux.StoreGroup([self.store], GroupFn(self))
        self.trace: flux.Trace | None = flux.Trace(self.d).start()
        self.trace.events = HookEvents(self)
        self.first_trace: Any = self.trace
        if row.name.startswith("Trace released"):
            DyingTrace(self.d, self).start()  # replaces the one above, kept by the dispatcher alone
            self.trace = None
        self.tramp = flux.Trampoline("i(pp)", Handler(self))

    def _waiter(self, payload: Any) -> None:
        self.ran.add("waiter")
        if not isinstance(payload, DyingPayload):
            self.seen.append(payload)
        if payload == "discard":
            self.d.wait_for([self.store])
        if payload == "go" and self.row.name == "callback run by wait_for":
            try:
                self.d.wait_for([self.cb_token])
            except flux.UnknownTokenError:
                # The wait_for hook (run on entry) unregistered the callback.
                if self.probe.column is not COLUMNS["unregister(callback)"]:
                    raise

    def on_error(self, exc: BaseException) -> None:
        self.probe.hit(self, "on_error")

    def close(self) -> None:
        if self.trace is not None:
            self.trace.stop()
        # The trampoline is not closed: its finalizer must free it (checked).
        for thing in self.made:
            if isinstance(thing, flux.Trace):
                thing.stop()
            else:
                thing.close()
        self.d.close()


class Owner:
    pass


# -- rows: where user code runs, and how the world is driven there ----------


@dataclass(frozen=True)
class Row:
    name: str
    site: str
    trigger: Callable[[World], None]
    kind: str  # which expectations: see expected()
    cb_gone: bool = False  # the world's callback is unregistered when the probe runs
    sub_gone: bool = False  # its listener is removed
    group_gone: bool = False  # its group is released
    store_closed: bool = False  # its reduce store is closed
    stores_open: bool = False  # closing: the stores are not closed yet (groups go first)


def dispatch(w: World) -> None:
    w.d.dispatch("go")


def enqueue_failing(w: World) -> None:
    w.fail_next = True
    w.d.enqueue("go", on_error=w.on_error)


def unregister_callback(w: World) -> None:
    w.d.unregister(w.cb_token)


def close_dispatcher(w: World) -> None:
    w.d.close()


def remove_listener(w: World) -> None:
    assert w.sub is not None
    w.sub.remove()


def close_store(w: World) -> None:
    assert w.group is not None
    w.group.release()
    w.store.close()


def collect_owner(w: World) -> None:
    w.owner = None
    gc.collect()


def release_group(w: World) -> None:
    assert w.group is not None
    w.group.release()


def replace_trace(w: World) -> None:
    w.trace = flux.Trace(w.d).start()


def drop_dispatcher(w: World) -> None:
    """Lets go of everything but what the dispatcher holds (whose callback,
    listener, group function and states keep the world), so that the
    dispatcher's finalizer releases them."""
    assert w.trace is not None
    w.trace.stop()
    w.sub = w.group = w.trace = w.first_trace = w.owner = None
    del w.d, w.store, w.plain, w.cb_token
    gc.collect()


def closed_meanwhile(make: Callable[[World], object]) -> Callable[[World], None]:
    """A trigger that makes something: refused once the probe closed the
    dispatcher (each maker documents InvalidArgumentError for that)."""

    def trigger(w: World) -> None:
        try:
            made = make(w)
        except flux.InvalidArgumentError:
            assert w.d.closed
            return
        if isinstance(made, flux.Store):
            assert made.closed is w.d.closed
            made.close()

    return trigger


def collect_trampoline(w: World) -> None:
    w.tramp = None  # type: ignore[assignment]
    gc.collect()


def hook_handler_failure(w: World) -> None:
    """A hook of the user's, chained in front of the one the package chains
    in at import (as its docs ask), reports a handler's exception."""
    chained = sys.unraisablehook
    reported: list[BaseException | None] = []

    def hook(unraisable: Any) -> None:
        reported.append(unraisable.exc_value)
        w.probe.hit(w, "unraisablehook")
        if not isinstance(unraisable.exc_value, Boom):
            chained(unraisable)

    sys.unraisablehook = hook
    try:
        assert w.tramp(0, 0) == 0  # C gets 0
    finally:
        sys.unraisablehook = chained
    assert [type(exc) for exc in reported] == [Boom]


def discard_a_state(w: World) -> None:
    """The reduce makes a state in a dispatch that is failing (see
    Counter.reduce): discarded, it goes at the store's next handling."""
    with pytest.raises(Boom):
        w.d.dispatch("discard")
    assert w.store.state.n == 0
    w.state_armed = True
    w.d.dispatch("go")


def call_trampoline(w: World) -> None:
    w.tramp(0, 0)


def close_trampoline(w: World) -> None:
    w.tramp.close()


ROWS = [
    Row("callback", "callback", dispatch, "callback"),
    Row("callback run by wait_for", "callback", dispatch, "callback"),
    Row("callback of a queued dispatch", "callback", dispatch, "callback"),
    Row("reduce", "reduce", dispatch, "reduce"),
    Row("are_equal", "are_equal", dispatch, "are_equal"),
    Row("listener", "listener", dispatch, "listener"),
    Row("Store.on_dispatch", "on_dispatch", dispatch, "on_dispatch"),
    Row("group function", "group", dispatch, "group"),
    Row("Trace hook dispatch_begin", "hook dispatch_begin", dispatch, "hook"),
    Row("Trace hook callback_begin", "hook callback_begin", dispatch, "hook"),
    Row("Trace hook wait_for", "hook wait_for", dispatch, "hook"),
    Row("Trace hook dispatch_end", "hook dispatch_end", dispatch, "hook"),
    Row("enqueue's on_error", "on_error", enqueue_failing, "hook"),
    Row("enqueue's on_error, of a queued dispatch", "on_error", dispatch, "hook"),
    Row("Trace hook callback_end", "hook callback_end", dispatch, "hook"),
    Row("on_error released after its queued dispatch failed", "on_error release", dispatch, "hook"),
    Row("payload released after its queued dispatch", "payload release", dispatch, "hook"),
    Row("listener released by Dispatcher.close", "listener release", close_dispatcher, "closing"),
    Row(
        "group function released by Dispatcher.close",
        "group release",
        close_dispatcher,
        "closing",
        stores_open=True,
    ),
    Row("trampoline handler released by its finalizer", "handler release", collect_trampoline, "idle"),
    Row("trampoline handler, idle", "handler", call_trampoline, "idle"),
    Row("sys.unraisablehook, for a handler's exception", "unraisablehook", hook_handler_failure, "idle"),
    Row("trampoline handler in a callback", "handler", dispatch, "callback"),
    Row("callback released by unregister", "callback release", unregister_callback, "idle", cb_gone=True),
    Row(
        "callback released at the end of a dispatch it unregistered itself in",
        "callback release",
        dispatch,
        "idle",
        cb_gone=True,
    ),
    Row("callback released by Dispatcher.close", "callback release", close_dispatcher, "closing"),
    Row("listener released by remove", "listener release", remove_listener, "idle", sub_gone=True),
    Row(
        "listener released after removing itself in its emit",
        "listener release",
        dispatch,
        "listener",
        sub_gone=True,
    ),
    Row(
        "listener released by Store.close",
        "listener release",
        close_store,
        "idle",
        sub_gone=True,
        group_gone=True,
        store_closed=True,
    ),
    Row("listener released when its owner is collected", "listener release", collect_owner, "idle", sub_gone=True),
    Row("group function released by release", "group release", release_group, "idle", group_gone=True),
    Row(
        "group function released at the end of a dispatch that released it",
        "group release",
        dispatch,
        "idle",
        group_gone=True,
    ),
    Row("trampoline handler released by close", "handler release", close_trampoline, "idle"),
    Row("listener of an emit_change(error=)", "listener", dispatch, "listener"),
    Row("replaced state released in its dispatch", "state release", dispatch, "listener"),
    Row("discarded state released at the next handling", "state release", discard_a_state, "reduce"),
    Row(
        "state released by Store.close",
        "state release",
        close_store,
        "idle",
        sub_gone=True,
        group_gone=True,
        store_closed=True,
    ),
    Row("state released by Dispatcher.close", "state release", close_dispatcher, "closing"),
    Row("get_initial_state", "get_initial_state", closed_meanwhile(lambda w: Initial(w.d, w)), "idle"),
    Row(
        "register_store's constructor",
        "register_store constructor",
        closed_meanwhile(lambda w: w.d.register_store(Constructed, w)),
        "idle",
    ),
    Row(
        "a callback's repr, naming it in register", "repr", closed_meanwhile(lambda w: w.d.register(Unnamed(w))), "idle"
    ),
    Row(
        "listener released when its owner is collected in a reduce",
        "listener release",
        dispatch,
        "reduce",
        sub_gone=True,
    ),
    Row(
        "listener released when its owner is collected in a callback",
        "listener release",
        dispatch,
        "callback",
        sub_gone=True,
    ),
    Row("Trace released when replaced", "trace release", replace_trace, "idle"),
    Row("Trace released when replaced in a callback", "trace release", dispatch, "idle"),
    Row("Trace released by Dispatcher.close", "trace release", close_dispatcher, "closing"),
    Row("callback released by the finalizer of a dispatcher never closed", "callback release", drop_dispatcher, "gone"),
    Row("listener released by the finalizer of a dispatcher never closed", "listener release", drop_dispatcher, "gone"),
    Row("state released by the finalizer of a dispatcher never closed", "state release", drop_dispatcher, "gone"),
    Row(
        "group function released by the finalizer of a dispatcher never closed",
        "group release",
        drop_dispatcher,
        "gone",
    ),
]

# The trace-hook wait_for row needs a wait: the callback-run-by-wait_for world.
WAITING_ROWS = {"Trace hook wait_for"}


# -- columns: every public call, on the world's objects ----------------------


def col_register(w: World) -> object:
    return w.d.register(lambda payload: w.ran.add("registered"))


def col_unregister(w: World) -> object:
    w.d.unregister(w.cb_token)
    return None


def col_add_listener(w: World) -> object:
    return w.store.add_listener(lambda: None)


def col_remove_listener(w: World) -> object:
    assert w.sub is not None
    w.sub.remove()
    return None


def col_group_release(w: World) -> object:
    assert w.group is not None
    w.group.release()
    return None


def col_group_create(w: World) -> object:
    group = flux.StoreGroup([w.plain], lambda: None)
    w.made.append(group)
    return group


def col_store_create(w: World) -> object:
    store = Extra(w.d)
    w.made.append(store)
    return store


def col_trace_start(w: World) -> object:
    trace = flux.Trace(w.d).start()
    w.made.append(trace)  # stopped at the end (close = stop)
    return trace


def col_trampoline(w: World) -> object:
    with flux.Trampoline("i(ii)", lambda a, b: a + b) as t:
        return t(2, 3)


def col_new_dispatcher(w: World) -> object:
    seen: list[object] = []
    other: flux.Dispatcher[str] = flux.Dispatcher()
    with other:
        other.register(seen.append)
        other.dispatch("other")
    return seen


def col_store_init(w: World) -> object:
    Counter.__init__(w.store, w.d, w)
    return None


# From fn's release inside release() this crashed: release() kept the freed
# native group for the dispatcher's finalizer to release again.
def col_group_init(w: World) -> object:
    assert w.group is not None
    flux.StoreGroup.__init__(w.group, [w.store], lambda: None)
    return None


def col_wait_for_nothing(w: World) -> object:
    w.d.wait_for([])
    return None


def col_properties(w: World) -> object:
    things = [w.d, w.store, w.plain, w.group, w.sub, w.first_trace, w.tramp, w.cb_token]
    tramp_closed = w.tramp is None or w.tramp.closed
    return [
        [repr(thing) for thing in things],
        w.d.closed,
        w.store.closed,
        w.store.dispatch_token,
        w.store.dispatcher,
        w.plain.closed,
        tramp_closed,
    ]


COLUMNS: dict[str, Callable[[World], object]] = {
    "dispatch": lambda w: w.d.dispatch("probe"),
    "enqueue": lambda w: w.d.enqueue("probe-queued"),
    "register": col_register,
    "unregister(callback)": col_unregister,
    "unregister(store token)": lambda w: w.d.unregister(w.store.dispatch_token),
    "wait_for(callback)": lambda w: w.d.wait_for([w.cb_token]),
    "wait_for(store)": lambda w: w.d.wait_for([w.store]),
    "is_dispatching": lambda w: w.d.is_dispatching,
    "close": lambda w: w.d.close(),
    "name_of": lambda w: w.d.name_of(w.cb_token),
    "register_store": lambda w: w.d.register_store(Registered),
    "store.close (in a group)": lambda w: w.store.close(),
    "plain.close": lambda w: w.plain.close(),
    "add_listener": col_add_listener,
    "Subscription.remove": col_remove_listener,
    "state": lambda w: w.store.state,
    "error": lambda w: w.store.error,
    "emit_change": lambda w: w.store.emit_change(),
    "emit_change(error=)": lambda w: w.store.emit_change(error=Boom()),
    "has_changed": lambda w: w.store.has_changed(),
    "group.release": col_group_release,
    "StoreGroup": col_group_create,
    "ReduceStore": col_store_create,
    "Trace.start": col_trace_start,
    "Trace.stop": lambda w: w.first_trace.stop(),
    "Trampoline": col_trampoline,
    "Trampoline.close (the world's)": lambda w: w.tramp.close(),
    # From the handler's release inside close(): close() detached the new
    # closure's finalizer, so collecting the trampoline leaked it.
    "Trampoline.__init__ again (the world's)": lambda w: w.tramp.__init__("i(pp)", Handler(w)),
    "Dispatcher (another)": col_new_dispatcher,
    "Dispatcher.__init__ again": lambda w: w.d.__init__(),  # type: ignore[misc]
    "store.__init__ again": col_store_init,
    "group.__init__ again": col_group_init,
    "stores": lambda w: w.d.stores,
    "store(cls)": lambda w: w.d.store(Unregistered),
    "plain.emit_change": lambda w: w.plain.emit_change(),
    "plain.has_changed": lambda w: w.plain.has_changed(),
    "Trace.render": lambda w: w.first_trace.render(),
    "wait_for([])": col_wait_for_nothing,
    "enqueue(on_error=)": lambda w: w.d.enqueue("probe-queued", on_error=lambda exc: None),
    "properties and repr": col_properties,
    "copy.copy": lambda w: copy.copy(w.d),
}

# -- what each cell should give ----------------------------------------------

OK = None
# The user code of these rows runs inside a dispatch, on its thread.
IN_DISPATCH = {"callback", "reduce", "are_equal", "listener", "on_dispatch", "group", "hook"}
# Which registration is running: wait_for on it is circular.
RUNNING = {"callback": "callback", "reduce": "store", "are_equal": "store", "listener": "store"}


def expected(row: Row, column: str) -> type[BaseException] | None | str:
    """The exception class expected, None for success, or "skip"."""
    kind = row.kind
    if kind == "gone":
        # Only the world's callback is left, released by the finalizer: no
        # world object to call; what a finalizer may do is make new ones.
        return OK if column in ("Trampoline", "Dispatcher (another)") else "skip"
    if "(the world's)" in column and row.name == "trampoline handler released by its finalizer":
        return "skip"  # the world has let go of it
    if column == "Trampoline.close (the world's)" and row.site == "handler":
        return "skip"  # closing a trampoline from its own handler is undefined (its docstring)
    if column == "Trampoline.__init__ again (the world's)":
        if row.site == "handler":
            return "skip"  # from its own handler: a closure replaced under its running call
        # A closed trampoline may be made again: from its handler's release in close().
        return OK if row.site == "handler release" else RuntimeError
    if column == "Dispatcher.__init__ again":
        return RuntimeError  # not closed (or its close is still running)
    if column in ("Trace.render", "properties and repr"):
        return OK
    if column == "copy.copy":
        return TypeError  # what owns native state cannot be copied
    if kind == "closing":
        if column == "stores":
            return OK
        # close() has cleared the handle: every method but these raises
        # InvalidArgumentError (Dispatcher.close), and the stores and groups
        # are closed already (close() does that first).
        if column in ("is_dispatching", "close", "name_of", "error", "Trace.stop", "Trampoline"):
            return OK
        if column in ("store.close (in a group)", "plain.close", "group.release"):
            return OK  # idempotent
        if row.stores_open:
            # Dispatcher.close releases groups before it closes their stores:
            # those still answer as open stores out of a dispatch (docs silent).
            if column in ("add_listener", "Subscription.remove", "state"):
                return OK
            if column in (
                "emit_change",
                "emit_change(error=)",
                "has_changed",
                "plain.emit_change",
                "plain.has_changed",
            ):
                return flux.NotDispatchingError
            if column == "store.__init__ again":
                return RuntimeError
        if column in ("Trampoline.close (the world's)", "Dispatcher (another)"):
            return OK
        return flux.InvalidArgumentError
    store_closed = row.store_closed
    if column == "store.__init__ again":
        return OK if store_closed else RuntimeError  # a closed store may be made again
    if column == "group.__init__ again":
        if not row.group_gone:
            return RuntimeError
        return flux.InvalidArgumentError if store_closed else OK  # made again, on a closed store: refused
    if column == "stores":
        return OK
    if column == "store(cls)":
        return flux.UnknownStoreError
    if column == "unregister(store token)":
        # A store's registration is its own; once closed, it is gone.
        return flux.UnknownTokenError if store_closed else flux.InvalidArgumentError
    if column in ("Trace.start", "Trace.stop", "Trampoline", "Trampoline.close (the world's)"):
        return OK
    if column in (
        "register",
        "enqueue",
        "enqueue(on_error=)",
        "name_of",
        "register_store",
        "error",
        "Dispatcher (another)",
    ):
        return OK
    if column in ("StoreGroup", "ReduceStore", "group.release"):
        return OK
    if column == "unregister(callback)":
        return flux.UnknownTokenError if row.cb_gone else OK
    if column in ("add_listener", "state"):
        return flux.InvalidArgumentError if store_closed else OK
    if column == "Subscription.remove":
        if store_closed:
            return flux.InvalidArgumentError
        return flux.UnknownTokenError if row.sub_gone else OK
    if kind in IN_DISPATCH:
        if column in ("dispatch", "close", "store.close (in a group)", "plain.close"):
            # store.close while in a live group and dispatching: the dispatch
            # is named first, as flux_store_destroy's order (docs silent).
            return flux.AlreadyDispatchingError
        if column == "is_dispatching":
            return OK
        if column in ("has_changed", "plain.has_changed"):
            return OK
        if column == "wait_for([])":
            return flux.NotDispatchingError if kind == "hook" else OK
        if column == "plain.emit_change":
            return OK if kind == "on_dispatch" else flux.NotDispatchingError
        if column in ("wait_for(callback)", "wait_for(store)"):
            if kind == "hook":
                # No callback is running: flux.h's observer rule (docs silent).
                return flux.NotDispatchingError
            target = "callback" if column == "wait_for(callback)" else "store"
            if RUNNING.get(kind) == target:
                return flux.CircularDependencyError
            return OK
        if column in ("emit_change", "emit_change(error=)"):
            # Only while that store handles a payload: its reduce, and the
            # are_equal the binding calls from inside it.
            return OK if kind in ("reduce", "are_equal") else flux.NotDispatchingError
        raise AssertionError(column)
    assert kind == "idle"
    if column in ("dispatch", "close", "plain.close"):
        return OK
    if column == "store.close (in a group)":
        return OK if row.group_gone else flux.InvalidArgumentError
    if column in ("wait_for(callback)", "wait_for(store)", "wait_for([])"):
        return flux.NotDispatchingError
    if column in ("plain.emit_change", "plain.has_changed"):
        return flux.NotDispatchingError
    if column == "is_dispatching":
        return OK
    if column in ("emit_change", "emit_change(error=)", "has_changed"):
        return flux.InvalidArgumentError if store_closed else flux.NotDispatchingError
    raise AssertionError(column)


CELLS = [
    pytest.param(row, column, id=f"{row.name} / {column}", marks=[])
    for row in ROWS
    for column in COLUMNS
    if expected(row, column) != "skip"
]


@pytest.fixture(scope="module", autouse=True)
def frozen_heap() -> Iterator[None]:
    """Leaves what exists now (pytest's own objects, the cells' parameters)
    out of every collection of this module's cells: ~3x faster, and each
    cell's world is made later, so it is still collected."""
    gc.collect()
    gc.freeze()
    yield
    gc.unfreeze()


def everything_live() -> int:
    return _native.live(lambda obj, extra: True)


@pytest.mark.parametrize(("row", "column"), CELLS)
def test_reentry(row: Row, column: str) -> None:
    before = everything_live()  # the previous cell ended with a collection (conftest's)
    probe = Probe(row.site, COLUMNS[column])
    world = World(row, probe)
    if row.name in WAITING_ROWS:
        world.row = Row("callback run by wait_for", row.site, row.trigger, row.kind)
    try:
        check_cell(world, row, column)
    except BaseException:
        # A failed cell must not leave its world to the next one's count.
        if row.kind != "gone":
            world.close()
        raise
    if row.kind != "gone":
        world.close()
    del world, probe
    gc.collect()
    assert live_enqueued() == 0
    assert everything_live() == before, "an object libflux held is still held"


def check_cell(world: World, row: Row, column: str) -> None:
    want = expected(row, column)
    probe = world.probe
    row.trigger(world)
    assert probe.fired, "the row's user code never ran"
    if want is None:
        assert probe.error is None, f"expected success, got {probe.error!r}"
    else:
        assert type(probe.error) is want, f"expected {want.__name__}, got {probe.error!r}"  # type: ignore[union-attr]
    if column == "is_dispatching":
        assert probe.value is (row.kind in IN_DISPATCH)
    if column == "error":
        assert probe.value is (world.emitted if row.name == "listener of an emit_change(error=)" else None)
    if column == "name_of":
        # None once unregistered (Dispatcher.name_of). Inside close(), which
        # closes stores and groups, then unregisters callbacks, then clears
        # the observer, the callback is registered until its own release
        # (docs silent).
        gone = row.cb_gone or (row.kind == "closing" and row.site in ("callback release", "trace release"))
        assert probe.value == (None if gone else "callback")
    if column == "Trampoline":
        assert probe.value == 5
    if column == "Dispatcher (another)":
        assert probe.value == ["other"]
    if row.kind == "gone":
        return
    if column in ("enqueue", "enqueue(on_error=)") and not world.d.closed:
        assert "probe-queued" in world.seen, "the queued payload was dispatched"
    # The dispatcher still works: a plain dispatch runs every live callback.
    if not world.d.closed:
        world.ran.clear()
        world.d.dispatch("check")
        want_ran = {"waiter"}
        if world.d.name_of(world.cb_token) is not None:
            want_ran.add("callback")
        if not world.store.closed:
            want_ran.add("reduce")
            if world.sub is not None and not row.sub_gone and column != "Subscription.remove":
                want_ran.add("listener")
        if not world.plain.closed:
            want_ran.add("on_dispatch")
        if world.group is not None and not row.group_gone and column != "group.release":
            want_ran.add("group")
        if column == "register":
            want_ran.add("registered")
        assert world.ran == want_ran
        assert not world.d.is_dispatching
