"""Stores: Facebook's FluxStore, FluxReduceStore and FluxStoreGroup, and
JBFlux's actions routed by name -- over libflux's ``flux_store_*``.

::

    class Counter(flux.ReduceStore):
        def get_initial_state(self):
            return 0

        def reduce(self, state, action):
            return state + 1 if action == "inc" else state

    counter = Counter(dispatcher)
    counter.add_listener(lambda: print(counter.state))
    dispatcher.dispatch("inc")

The rules (when a store counts as changed, when listeners run, what a
failure does) are libflux's; this module only hands it Python objects. A
store's state is a ``PyObject*`` the C store holds, and the Python store
keeps the references for it: the state a change replaced is let go inside
that dispatch, once the C store has taken the new one (before the store's
listeners run); a new state the C store discarded because its dispatch
failed, at the store's next handling of a payload (or ``close()``).
"""

from __future__ import annotations

import functools
import inspect
import itertools
import threading
import weakref
from collections.abc import Callable, Iterable, Mapping
from contextlib import ExitStack
from ctypes import ArgumentError, byref, c_int, c_uint64, c_void_p
from threading import get_ident as _get_ident
from types import FunctionType, TracebackType
from typing import Any, ClassVar, Generic, NamedTuple, TypeVar

from . import _native
from ._native import (
    LISTENER as _LISTENER_TYPE,
)
from ._native import (
    REDUCE as _REDUCE_TYPE,
)
from ._native import (
    RELEASE as _RELEASE_TYPE,
)
from ._native import (
    add as _add,
)
from ._native import (
    argument_error as _argument_error,
)
from ._native import (
    destroy_trampoline as _destroy_trampoline,
)
from ._native import (
    escaped as _escaped,
)
from ._native import (
    extras as _extras,
)
from ._native import (
    flux_store_add_listener_raw as _flux_store_add_listener_raw,
)
from ._native import (
    flux_store_create as _flux_store_create,
)
from ._native import (
    flux_store_destroy_raw as _flux_store_destroy_raw,
)
from ._native import (
    flux_store_emit_change as _flux_store_emit_change,
)
from ._native import (
    flux_store_group_create as _flux_store_group_create,
)
from ._native import (
    flux_store_group_release_raw as _flux_store_group_release_raw,
)
from ._native import (
    flux_store_group_token as _flux_store_group_token,
)
from ._native import (
    flux_store_has_changed as _flux_store_has_changed,
)
from ._native import (
    flux_store_is_emitting as _flux_store_is_emitting,
)
from ._native import (
    flux_store_listener_fail_raw as _flux_store_listener_fail_raw,
)
from ._native import (
    flux_store_remove_listener_raw as _flux_store_remove_listener_raw,
)
from ._native import (
    flux_store_state as _flux_store_state,
)
from ._native import (
    flux_store_token as _flux_store_token,
)
from ._native import (
    flux_unregister_raw as _flux_unregister_raw,
)
from ._native import (
    left_over as _left_over,
)
from ._native import (
    objects as _objects,
)
from ._native import (
    trampoline as _trampoline,
)
from .dispatcher import Dispatcher, Token
from .errors import FluxError, InvalidArgumentError, NoMemoryError, NotDispatchingError, Status, UnknownTokenError

__all__ = ["Action", "ReduceStore", "Store", "StoreGroup", "Subscription", "handles"]

S = TypeVar("S")
_id = id
_MISSING = object()
# flux_unregister of a live store's or group's token: refused, nothing changed
# (an orphaned dispatcher, which refuses a destroy or release too, says so
# of every token).
_OWNED = (int(Status.ERR_INVALID_ARGUMENT), int(Status.ERR_ALREADY_DISPATCHING))
_UNKNOWN_TOKEN = int(Status.ERR_UNKNOWN_TOKEN)  # flux_store_remove_listener of a removed listener
_NOT_RUN = -1  # a status libflux never returns: the call did not run (or not known to have)
_NO_WAIT = (False,)  # lock.acquire's blocking argument, for map() (see Store._sweep)

_write_pointer = c_void_p.from_address


# --------------------------------------------------------------------------
# Contexts: what each C store, listener and group hands its trampolines
# --------------------------------------------------------------------------

# Each is a context in the one registry (_native.objects and extras), ended
# by its one destroy. A store's entry is a weak reference to it, with its
# held states; a listener's or a group's, its function, with an _Owner.
# Nothing there refers to a store or a dispatcher: the dispatcher keeps its
# stores alive, so a dispatcher never closed is collected with its stores
# (its finalizer destroys their native side first, see flux/dispatcher.py).
#
# A store's states are PyObject*s the C store holds, created with no
# release_state: the references are kept here, in the store's two-slot list
# of held states, so that a change crosses into Python only for its reduce
# and its listeners. [0] is the state the C store holds; [1] the new state
# the running (or last) change handed it, _SETTLED once settled (not None:
# None is a state like any other, and a change to it is settled too). Only
# the dispatching thread writes them, one slot at a time, each write leaving the
# C store's state in one of the slots (so a reader on another thread always
# finds it there, see ReduceStore.state):
#
# - a reduce that changes the state writes [0] = state (the C store's, which
#   settles any earlier change) and [1] = new;
# - the C store takes new unless the dispatch is failing, and then runs its
#   listeners: the first to run, which sees [1] set, moves it to [0] -- the
#   replaced state goes then, inside the dispatch. A store with no listener
#   of yours has one that only does that (see Store._settle);
# - a new state the C store discarded (its dispatch failed, so no listener
#   ran) goes at the store's next reduce, which knows the C store's state,
#   or at close().
_SETTLED: Any = object()  # held[1] when no change waits to be settled
_NO_HELD: list[Any] = [None, _SETTLED]  # a group's: it holds no state


class _Owner(NamedTuple):
    """What a listener's or group's trampoline needs beside its function."""

    #: The dispatcher's pending-exception table (see _native.park_exception).
    pending: _native.Pending
    #: The native dispatcher, for flux_store_listener_fail().
    dispatcher: int | None
    #: The store's held states (see above).
    held: list[Any]
    #: The token libflux names when the listener fails: the store's (0 for
    #: a group's function: a group's token is never known here).
    token: int


class _Settler:
    """The listener of a store with no other: it runs only to settle a
    change (see above)."""

    __slots__ = ()

    def __call__(self) -> None:
        pass


# Every function below is a trampoline (see _native.trampoline): what
# escapes one is raised by the outermost call, and one that was interrupted
# before its work began is made up for -- a destroy is run again, a
# listener is failed.


@_trampoline()
def _on_reduce(context: int, state: Any, payload: Any, next_: int) -> int:
    # The hot path: one list lookup, the store's reduce, and -- only when
    # the state changed -- the held states and a write of *next.
    if _left_over.up and _get_ident() in _escaped:
        return 1  # this dispatch already failed (see _native.escaped)
    store = _objects[context]()
    if store is None:  # collected with its dispatcher, whose finalizer destroys it
        return 0
    if _emitted and store._ident in _emitted:
        # An error emitted in an earlier dispatch, whose emit never ran: it
        # failed, and the failed call ends it only once it returns -- after
        # the dispatches queued meanwhile, this one maybe. A store handles
        # a payload once per dispatch, so it is over by now.
        store._end_error(None)
    try:
        new = store._flux_reduce(state, payload)
    except BaseException as exc:  # noqa: BLE001 -- every exception fails the dispatch
        # Re-raised by Dispatcher.dispatch, the very object, with the token
        # libflux names for it: the store's (not known to a reduce that ran
        # before it was recorded). No call before the park.
        try:
            token = store._token._value
        except AttributeError:
            token = 0
        _native.park_exception(store._pending, payload, exc, token)
        return 1
    if _unshown and _unshown.pop(store._ident, False):
        # emit_change(error=...) ran in this handling, which is now over:
        # its emit comes next, and the error is seen from here on -- not
        # before, by stores this one waited for (DESIGN.md 11: only while
        # the listeners run; Swift's StoreBase.error likewise). Tested
        # through a module global, so a reduce with no error pays one load.
        error_state = store._error_state
        if error_state is not None:
            store._error_shown = error_state[0]
    held = _extras[context]
    if new is not state:
        held[0] = state
        held[1] = new
        # *next: a cell kept for the address, which is the same from one
        # dispatch to the next as long as the C stack is. An interrupt
        # before the write: the C store keeps state, and [1] goes later.
        if next_ != store._next_address:
            store._next_cell = _write_pointer(next_)
            store._next_address = next_
        store._next_cell.value = _id(new)
    elif held[1] is not _SETTLED:
        # A new state the C store never took (its dispatch failed, no
        # listener settled it) goes now: the C store holds `state`.
        held[0] = state
        held[1] = _SETTLED
    return 0


def _fail_listener(context: int) -> None:
    owner = _extras[context]
    if owner is not None:
        _flux_store_listener_fail_raw(owner.dispatcher, 1)


@_trampoline(on_escape=_fail_listener)
def _on_listener(context: int) -> None:
    # A listener or a group's function. An exception is parked for the
    # dispatching thread and fails the listener, which aborts the dispatch.
    if _left_over.up and _get_ident() in _escaped:
        # This dispatch already failed (maybe before the C store took
        # [1]: that one goes at the next reduce).
        _fail_listener(context)
        return
    held = _extras[context][2]  # owner.held, by index: the hot path
    taken = held[1]
    if taken is not _SETTLED:
        # The first listener after a change: the C store took [1].
        held[0] = taken
        held[1] = _SETTLED
    try:
        _objects[context]()
    except BaseException as exc:  # noqa: BLE001 -- every exception fails the dispatch
        owner = _extras[context]
        _native.park_exception(owner.pending, _native.UNKNOWN_PAYLOAD, exc, owner.token)
        _flux_store_listener_fail_raw(owner.dispatcher, 1)


_reduce_trampoline = _REDUCE_TYPE(_on_reduce)
_NO_RELEASE = _RELEASE_TYPE()  # the store's states are held here (see above)
_listener_trampoline = _LISTENER_TYPE(_on_listener)


# --------------------------------------------------------------------------
# Actions and routing (JBFlux)
# --------------------------------------------------------------------------


class Action:
    """JBFlux's action: a name (``type``), a payload, and an error.

    Immutable and hashable by value; ``copy``, ``deepcopy`` and ``pickle``
    work as for any value (pickling needs picklable fields). A
    :class:`ReduceStore` routes an ``Action`` (or any object with a ``type``
    attribute, or a mapping with a ``"type"`` key) to its
    ``@flux.handles(type)`` methods.
    """

    __slots__ = ("error", "payload", "type")

    type: Any
    payload: Any
    error: Any

    def __init__(self, type: Any, payload: Any = None, error: Any = None) -> None:
        object.__setattr__(self, "type", type)
        object.__setattr__(self, "payload", payload)
        object.__setattr__(self, "error", error)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("flux.Action is immutable")

    def __delattr__(self, name: str) -> None:
        # The slots' own descriptors would delete a field: no hash, no
        # equality, no repr, no route left.
        raise AttributeError("flux.Action is immutable")

    def __eq__(self, other: object) -> bool:
        if type(other) is not Action:
            return NotImplemented
        return (self.type, self.payload, self.error) == (other.type, other.payload, other.error)

    def __hash__(self) -> int:
        return hash((self.type, self.payload, self.error))

    def __reduce__(self) -> tuple[type[Action], tuple[Any, Any, Any]]:
        # A value: copied and pickled by its three fields (the default would
        # restore them through __setattr__, which refuses).
        return (Action, (self.type, self.payload, self.error))

    def __repr__(self) -> str:
        extra = "".join(
            f", {name}={value!r}"
            for name, value in (("payload", self.payload), ("error", self.error))
            if value is not None
        )
        return f"flux.Action({self.type!r}{extra})"


def handles(action_type: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Routes actions of ``action_type`` to the decorated method of a
    :class:`ReduceStore`: ``method(self, state, action) -> new state``
    (called as ``store.method(state, action)``, so a ``staticmethod`` or
    ``classmethod`` under the decorator works too).

    Actions of a type no method handles go to ``reduce`` when the class
    defines one; otherwise the state stays as it is. A subclass that
    overrides the method (decorated again or not) gets them in its override.
    """

    def mark(method: Callable[..., Any]) -> Callable[..., Any]:
        types = getattr(method, "_flux_handles", ())
        method._flux_handles = (*types, action_type)  # type: ignore[attr-defined]
        return method

    return mark


def _action_type(action: Any) -> Any:
    """The type ``action`` is routed by, or _NO_TYPE, which no route has:
    an action with no type is unhandled, not one of type None."""
    if type(action) is Action:
        return action.type
    if isinstance(action, dict):
        return action.get("type", _NO_TYPE)
    found = getattr(action, "type", _NO_TYPE)
    if found is not _NO_TYPE:
        return found
    if isinstance(action, Mapping):  # any other mapping with a "type" key
        return action.get("type", _NO_TYPE)
    return _NO_TYPE


_NO_TYPE: Any = object()


# --------------------------------------------------------------------------
# Stores
# --------------------------------------------------------------------------


class Subscription:
    """A listener's handle: :meth:`remove` ends it. ``id`` numbers the
    store's listeners in the order they were added, from 1."""

    __slots__ = ("_life", "_native_id", "_store", "id")

    def __init__(self, store: Store, id: int, native_id: int) -> None:
        self._store = store
        self.id = id
        self._native_id = native_id  # flux_store_add_listener's
        # The native store it was added to: one closed and made again
        # issues the same native ids anew, to other listeners.
        self._life = store._life

    def remove(self) -> None:
        """Removes the listener: no later emit calls it; when it is running,
        it is released once it returns.

        :raises UnknownTokenError: already removed.
        :raises InvalidArgumentError: the store is closed.
        """
        self._store._unlisten(self._native_id, quiet=False, public_id=self.id, life=self._life)

    def __repr__(self) -> str:
        return f"<flux.Subscription {self.id}>"


class _OwnerWatch(weakref.ref):  # type: ignore[type-arg]
    """The weak reference to an owner-bound listener's owner whose callback
    removes the listener. A weakref callback is given only the reference:
    what it needs is kept on it."""

    __slots__ = ("cell", "gone", "store")

    #: The listener's id (see _OwnerBound.cell).
    cell: c_uint64
    #: The store's listeners whose owner went (Store._gone).
    gone: dict[int, None]
    store: weakref.ref[Store]


class _OwnerBound:
    """What an owner-bound listener (``add_listener(fn, owner=obj)``) hands
    the store to call: ``obj`` held weakly, and the listener removed once
    ``obj`` is collected. Refers to its store weakly too: the store's
    listener entry holds this (see _native.objects)."""

    __slots__ = ("cell", "fn", "method", "store", "watch")

    def __init__(self, store: Store, listener: Callable[[], object], owner: object, cell: c_uint64) -> None:
        self.store = weakref.ref(store)
        #: The listener's id, written by flux_store_add_listener.
        self.cell = cell
        try:
            # The owner's one weak reference here, whose callback is this
            # module's one function (see _owner_collected). No WeakMethod:
            # it adds a weakref callback of its own, a closure where an
            # interrupt would be printed and lost.
            watch = _OwnerWatch(owner, _owner_collected)
        except TypeError:
            raise TypeError(
                f"owner must support weak references ({type(owner).__name__} does not:"
                " add '__weakref__' to its __slots__)"
            ) from None
        watch.cell = cell
        watch.gone = store._gone
        watch.store = self.store
        self.watch = watch  # kept alive: a reference that is gone calls nothing
        #: A bound method of the owner's function, called with the owner (a
        #: bound method refers to its object: kept apart); else None.
        self.method: Callable[[Any], object] | None = None
        #: Any other listener but the owner itself; else None.
        self.fn: Callable[[], object] | None = None
        if inspect.ismethod(listener) and listener.__self__ is owner:
            self.method = listener.__func__
        elif listener is not owner:
            self.fn = listener
        if self.fn is not None and getattr(listener, "__self__", None) is owner:
            # A built-in method of the owner: it would keep the owner alive.
            raise TypeError("listener is a built-in method of owner, which would keep owner alive")

    def __call__(self) -> None:
        owner = self.watch()  # alive for the call
        if owner is None:
            # Collected, maybe by an earlier listener of this emit: skipped
            # from now on, and removed if the weakref callback has not yet.
            self.end()
        elif self.method is not None:
            self.method(owner)
        elif self.fn is None:
            owner()
        else:
            self.fn()

    def end(self) -> None:
        """Removes the listener (again: a no-op)."""
        store = self.store()
        if store is not None:
            store._unlisten(self.cell.value, quiet=True)


@_trampoline(rerun=True, effect_is_last_call=True)
def _owner_collected(watch: _OwnerWatch) -> None:
    # A weakref callback: runs wherever the owner's last reference went, and
    # reports what escapes it (a KeyboardInterrupt from a signal handler) to
    # sys.unraisablehook -- which, as for a trampoline, keeps it for the next
    # call on this thread to raise, and runs this again when it was
    # interrupted before its last call. First, with no call (where an
    # interrupt could land), the listener is noted as gone: should what
    # follows be cut short, the store's next add_listener or remove sweeps
    # it (see Store._sweep).
    watch.gone[watch.cell.value] = None
    store = watch.store()
    if store is not None:
        store._sweep(wait=False)


#: The stores (by id) whose reduce called emit_change(error=...) and has not
#: returned yet: their error is shown as the reduce returns (see _on_reduce).
_unshown: dict[int, bool] = {}

#: The stores (by id) with an emitted error that has not ended (see
#: Store._error_state): tested by every reduce (see _on_reduce).
_emitted: dict[int, bool] = {}


def _error_emitted(store_ref: weakref.ref[Store]) -> None:
    # The listener emit_change(error=...) adds after all others: the emit's
    # listeners have run, so the error ends here (as Swift's StoreBase
    # clears it when the store's callback returns).
    store = store_ref()
    if store is not None:
        store._end_error(None)


def _handle_payload(store: Store, state: Any, payload: Any) -> Any:
    store.on_dispatch(payload)
    return state


_Closing = TypeVar("_Closing", bound="_ClosesOnExit")


class _ClosesOnExit(_native.Unshareable):
    """A context manager that closes what it manages on exit."""

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self: _Closing) -> _Closing:  # noqa: PYI019 -- no typing.Self before Python 3.11
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def _already_made(store: Store) -> RuntimeError:
    return RuntimeError(f"{store!r} is already made: close() it before initializing it again")


class Store(_ClosesOnExit):
    """Facebook's FluxStore: override :meth:`on_dispatch` to handle every
    payload, and call :meth:`emit_change` there when something changed;
    listeners then run once, after ``on_dispatch``, still in the dispatch.

    The store is registered with its dispatcher until :meth:`close` (or the
    dispatcher's ``close``); until then the dispatcher keeps it alive, and
    initializing it again raises :class:`RuntimeError`. Every method may be
    called from any thread.
    An exception raised by ``on_dispatch`` or by a listener aborts the
    dispatch and comes out of ``dispatch`` unchanged.
    """

    #: What the reduce trampoline calls: method(state, payload) -> the next
    #: state. A class attribute (see ReduceStore.__init_subclass__), so no
    #: store refers to itself: closing one frees it without the cycle
    #: collector.
    _flux_reduce: ClassVar[Callable[..., Any]] = _handle_payload

    def __init__(self, dispatcher: Dispatcher[Any]) -> None:
        self._create(dispatcher, None)

    def _create(self, dispatcher: Dispatcher[Any], initial: Any, settles: bool = False) -> None:
        if not isinstance(dispatcher, Dispatcher):
            raise TypeError(f"expected a flux.Dispatcher, not {type(dispatcher).__name__}")
        # Made again after a close(), the store keeps its lock: a thread that
        # read self._lock before the close may take it only now, and a new
        # lock would let another thread close (free) the new native store
        # under it. Held while the store is made, so that a close() still
        # running on another thread finishes first (its clean-up would undo
        # the new store's records); after the dispatcher's _closing_lock, as
        # in StoreGroup. Only a lock of a past _create is kept: a subclass may
        # have an attribute of that name before its first.
        lock = self.__dict__.get("_lock") if "_life" in self.__dict__ else None
        if lock is None:
            lock = threading.RLock()
        # _closing_lock is the one Dispatcher.close() clears its handle under:
        # either it finds this store among its children and closes it, or
        # this finds it closed and makes nothing.
        with dispatcher._closing_lock, lock:
            if self.__dict__.get("_handle") is not None:
                # A second native store under this object would leave the first
                # running, out of reach of close() and of the dispatcher's.
                raise _already_made(self)
            handle = dispatcher._handle
            if handle is None:
                raise InvalidArgumentError("store: the dispatcher is closed")
            self._dispatcher = dispatcher
            # The dispatcher's key for this store (see Dispatcher._children),
            # taken once: using it makes no call, where an interrupt could land
            # between two steps that go together.
            self._ident = _id(self)
            # The native dispatcher, alive as long as `dispatcher` is (its
            # finalizer frees it), also once it is closed: for listeners and
            # for close(), which may run after the dispatcher closed.
            self._native_dispatcher: int = handle
            self._pending = dispatcher._pending
            self._handle: int | None = None
            # This native store, as Subscriptions know it (see Subscription._life).
            self._life = object()
            # emit_change(error=...)'s error and the dispatching thread that
            # emitted it (for _end_error), until its emit is over; and the id
            # cell of the listener that ends it (see _error_emitted).
            self._error_state: tuple[Any, int] | None = None
            # What `error` reads: that error once the handling that emitted it
            # is over (see _on_reduce), until the emit is; None otherwise.
            self._error_shown: Any = None
            self._error_end: c_uint64 | None = None
            # Held by every call on the native store and by close(), which frees
            # it: no thread is ever inside a call on a freed store, and a call
            # that comes after close() raises the closed error. Reentrant: close()
            # and remove() run destroys on this thread, and what they free may
            # call back into the store. (Dispatcher defers its free
            # to garbage collection instead, but a C store is freed by the same
            # flux_store_destroy that unregisters it: close() cannot wait for GC.)
            self._lock = lock
            # The states the C store holds (see "held states" at the top of
            # this module), and what keeps them alive.
            self._held: list[Any] = [initial, _SETTLED]
            self._next_address = 0
            self._next_cell: Any = None
            # The listeners added and not removed (error ends included; changed
            # only with _fns, and with no call in between: see _add_listener and
            # _drop_listener), the store's own listener's id while it has one
            # (see _settle), whether it has one when it has no other, and the
            # next Subscription.id.
            self._listeners = 0
            # native listener id -> its function, while libflux holds it. What a
            # native removal lets go under self._lock must not be its last
            # reference: freeing a listener can free its owner, whose weakref
            # callback takes another store's lock, and two threads doing that
            # to each other's stores would deadlock. The removals keep it here
            # until they have released the lock (see _unlisten and close).
            self._fns: dict[int, Callable[[], object]] = {}
            # The ids of owner-bound listeners whose owner went, until removed:
            # written by the owner's weakref callback before anything it could
            # be interrupted in (see _owner_collected and _sweep).
            self._gone: dict[int, None] = {}
            self._settler: c_uint64 | None = None
            self._settles = settles
            self._ids = itertools.count(1).__next__
            out = c_void_p(_native.UNTOUCHED)
            out_ref = byref(out)
            me = weakref.ref(self)
            added = [0]  # the context, also when an interrupt is raised as _add returns
            try:
                key = _add(me, self._held, added)
                # Handed over: libflux destroys the context even when the create
                # fails (the states are held here: no release_state).
                _flux_store_create(
                    handle, _id(initial), _reduce_trampoline, None, _NO_RELEASE, key, _destroy_trampoline, out_ref
                )
            except ArgumentError as exc:
                raise _argument_error(exc) from None
            finally:
                # Also when an interrupt is raised after libflux made the store:
                # it is then recorded, and closed with the dispatcher.
                native = out.value
                if native and native != _native.UNTOUCHED:
                    # Recorded first, with no call in between (where an interrupt
                    # could be raised): close() and the dispatcher's finalizer
                    # (if this store is never closed) then destroy it.
                    self._handle = native
                    dispatcher._natives[native] = False
                    dispatcher._children[self._ident] = self
                    self._token = Token(dispatcher._serial, int(_flux_store_token(native)))
                    # Its name in traces and circular-dependency messages.
                    dispatcher._names[self._token.value] = type(self).__name__
                    # Made by register_store(type(self)) on this thread, for
                    # a class whose metaclass has a __call__ of its own (else
                    # register_store knows the instance already)? Then it is
                    # the store to discard should the constructor raise.
                    frames = dispatcher._constructing.get(_get_ident())
                    if frames and frames[-1][0] is type(self) and frames[-1][1] is None:
                        frames[-1][1] = self
                elif added[0]:  # libflux never ran, or destroyed the key
                    _native.drop(added[0], me, native)
        self._settle()

    def on_dispatch(self, payload: Any) -> None:
        """Handles a payload. Subclasses must override it."""
        raise NotImplementedError(f"{type(self).__name__} has not overridden Store.on_dispatch(), which is required")

    # -- Facebook's API ----------------------------------------------------

    @property
    def dispatcher(self) -> Dispatcher[Any]:
        """The dispatcher the store is registered with."""
        return self._dispatcher

    @property
    def dispatch_token(self) -> Token:
        """The store's registration, for ``wait_for`` and groups. It is the
        store's: ``Dispatcher.unregister`` refuses it (use :meth:`close`)."""
        return self._token

    def has_changed(self) -> bool:
        """Whether the store changed in its most recent handling (call it
        after ``wait_for([store.dispatch_token])`` for this dispatch).

        :raises NotDispatchingError: not inside a dispatch on this thread.
        """
        changed = c_int()
        with self._lock:
            try:
                _flux_store_has_changed(self._live_handle("has_changed"), byref(changed))
            except ArgumentError as exc:
                raise _argument_error(exc) from None
        return bool(changed.value)

    def emit_change(self, error: Any = None) -> None:
        """Marks the store changed: its listeners run once the handling ends.

        With an ``error`` (JBFlux's ``emitChangeWithError:``), the change
        happened because something failed: the listeners run even when the
        state is unchanged, and :attr:`error` is ``error`` while they do.

        :raises NotDispatchingError: not called while the store handles a
            payload; no error is kept then.
        :raises NoMemoryError: with an ``error``, out of memory to note when
            its emit ends: the change is marked, the error not kept.
        """
        with self._lock:
            handle = self._live_handle("emit_change")
            try:
                _flux_store_emit_change(handle)
            except ArgumentError as exc:
                raise _argument_error(exc) from None
            if error is None:
                return
            # One left behind (a failed dispatch ends it, unless an interrupt
            # cut that short) would run before listeners added since: a new
            # one, added last, runs after every listener of this emit. Added
            # before the old one goes: refused (NoMemoryError), the old one
            # still ends the error.
            end = c_uint64()
            try:
                self._listen(functools.partial(_error_emitted, weakref.ref(self)), end)
            finally:
                # Also when what escaped a destroy on this thread (an
                # interrupt) comes out of _listen once libflux took the end:
                # unrecorded, it would stay and end every later error early.
                if end.value and end.value != _native.UNTOUCHED:
                    stale, self._error_end = self._error_end, end
                    if stale is not None:
                        self._unlisten(stale.value, quiet=True)
                    self._error_state = (error, _get_ident())
                    self._dispatcher._erring[self._ident] = self
                    _unshown[self._ident] = True
                    _emitted[self._ident] = True

    @property
    def error(self) -> Any:
        """The error of the emit now running (``emit_change(error=...)``):
        set once the handling that made that call is over, as the emit
        begins, until the emit's last listener has run, or it stopped at a
        failure; None otherwise (also between that call and the emit: a
        store it waits for meanwhile reads None). Any thread may read it."""
        if self._error_shown is None:
            return None
        with self._lock:
            # Shown only while the emit runs, as libflux tells (as Swift's
            # FluxStore.error): one stopped by a failure ends no error, and
            # the dispatches queued behind a failed one run before its call
            # returns to end it. Under the lock, whatever ends it waits.
            shown, handle = self._error_shown, self._handle
            try:
                emitting = handle is not None and _flux_store_is_emitting(handle)
            except ArgumentError as exc:
                raise _argument_error(exc) from None
            return shown if emitting else None

    def _end_error(self, ident: int | None) -> None:
        """Ends the error emitted by thread ``ident`` (None: whichever), and
        removes its end listener."""
        with self._lock:
            state = self._error_state
            if ident is not None and (state is None or state[1] != ident):
                return  # another thread's dispatch emitted it, and is running
            self._error_state = self._error_shown = None
            self._dispatcher._erring.pop(self._ident, None)
            _unshown.pop(self._ident, None)
            _emitted.pop(self._ident, None)
            end, self._error_end = self._error_end, None
            if end is not None:
                self._unlisten(end.value, quiet=True)

    def add_listener(self, listener: Callable[[], object], *, owner: object = None) -> Subscription:
        """Runs ``listener()`` once per dispatch that changed the store (from
        the next change on, when added during one).

        With an ``owner`` (JBFlux's ``registerObject:forChangeEvents:``),
        the listener lives only as long as ``owner``: the store holds
        ``owner`` weakly (of a bound method of ``owner``, only its
        function; ``listener`` may also be ``owner`` itself), and once
        ``owner`` is collected the listener is removed, as if
        :meth:`Subscription.remove` ran, and never runs again -- also when
        that happens during an emit. (Should another thread be inside a call
        on the store just then, the removal never waits for it: the store's
        next ``add_listener``, ``remove`` or emit finishes it; the listener
        does not run meanwhile.) An exception raised while that removal
        runs (a KeyboardInterrupt) comes out of the next call on this
        thread into flux, as one raised in a listener's destroy does. Any
        other ``listener`` is held strongly, so it must not refer to
        ``owner``.

        :raises TypeError: ``listener`` is not callable; ``owner`` cannot be
            weakly referenced; ``listener`` is a built-in method of ``owner``.
        :raises InvalidArgumentError: the store is closed.
        :raises NoMemoryError: out of memory; the listener is not added.
        """
        if not callable(listener):
            raise TypeError(f"listener must be callable, not {type(listener).__name__}")
        if self._gone:
            self._sweep()
        out = c_uint64()
        fn = listener if owner is None else _OwnerBound(self, listener, owner, out)
        with self._lock:
            self._listen(fn, out)
            sub = Subscription(self, self._ids(), out.value)
            state = self._error_state
            if state is not None and state[1] == _get_ident():
                # Added while this thread's handling that emitted an error
                # still runs? Then it runs in that emit: the error is
                # emitted again, so that its end goes after this listener.
                # Outside that handling (in a listener of the emit, where
                # the end still runs in it), libflux refuses, and nothing
                # changes. Out of memory, the listener goes again: the
                # caller gets no Subscription to remove it by.
                try:
                    self.emit_change(error=state[0])
                except NotDispatchingError:
                    pass
                except NoMemoryError:
                    sub.remove()
                    raise
            elif state is not None and _unshown.get(self._ident):
                # Added by another thread while the handling that emitted an
                # error still runs: it runs in that emit too, after the end
                # of the error, which goes after it instead. Out of memory,
                # the old end stays (the listener reads None).
                end = c_uint64()
                try:
                    self._listen(functools.partial(_error_emitted, weakref.ref(self)), end)
                except NoMemoryError:
                    pass
                finally:
                    # As in emit_change: recorded once libflux took it.
                    if end.value and end.value != _native.UNTOUCHED:
                        stale, self._error_end = self._error_end, end
                        if stale is not None:
                            self._unlisten(stale.value, quiet=True)
            return sub

    def _listen(self, fn: Callable[[], object], out: c_uint64) -> None:
        """Adds ``fn`` as a listener; its id goes to ``out``. The store's
        own listener goes once it has another (see _settle)."""
        error: FluxError | None = None
        with self._lock:
            handle = self._live_handle("add_listener")
            try:
                status = self._add_listener(fn, out, handle, counted=True)
                if status:
                    error = _native.status_error(status)  # read at once, on this thread
                else:
                    settler, self._settler = self._settler, None
                    if settler is not None:
                        self._drop_listener(handle, settler.value, counted=False)  # only a _Settler goes
            except ArgumentError as exc:
                raise _argument_error(exc) from None
        # What escaped the settler's destroy (an interrupt) comes out of this
        # call, the outermost one, as out of any other with an errcheck --
        # not out of the next dispatch, which it would stop before it began.
        try:
            _native.raise_outcome(error)
        finally:
            error = None  # no exception -> traceback -> frame cycle

    def _add_listener(self, fn: Callable[[], object], out: c_uint64, handle: int, *, counted: bool) -> int:
        """Adds ``fn`` with libflux and to _fns, and to the count of
        listeners when ``counted`` (all but the store's own). Returns
        libflux's status, and raises nothing that escaped on this thread:
        the store's own listener is added inside calls that must not (an
        owner's removal, a dispatch), and _listen raises it."""
        out.value = _native.UNTOUCHED
        out_ref = byref(out)
        token = getattr(self, "_token", None)  # None: creation was interrupted
        owner = _Owner(self._pending, self._native_dispatcher, self._held, token.value if token is not None else 0)
        added = [0]  # the context, also when an interrupt is raised as _add returns
        try:
            key = _add(fn, owner, added)
            status: int = _flux_store_add_listener_raw(handle, _listener_trampoline, key, _destroy_trampoline, out_ref)
        except BaseException:
            if added[0]:
                _native.drop(added[0], fn, out.value)  # libflux never ran
            raise
        finally:
            # Also when an interrupt came after libflux took it. No call in
            # here: _fns and the count change together.
            if out.value and out.value != _native.UNTOUCHED:
                self._fns[out.value] = fn
                if counted:
                    self._listeners += 1
        return status

    def _settle(self) -> None:
        """Gives a ReduceStore with no listener one of its own, which only
        lets a replaced state go (see "held states" at the top of this
        module): then that happens inside the dispatch, as for a store with
        listeners. Out of memory, the store goes without: a replaced state
        then waits for the store's next reduce."""
        with self._lock:
            handle = self._handle
            if handle is None or not self._settles or self._listeners or self._settler is not None:
                return
            out = c_uint64()
            try:
                self._add_listener(_Settler(), out, handle, counted=False)  # out of memory: not added
            except ArgumentError:
                return  # libflux never ran (the recursion limit): as out of memory
            finally:
                # Also when an interrupt came after libflux took it.
                if out.value and out.value != _native.UNTOUCHED:
                    self._settler = out

    def _unlisten(self, native_id: int, *, quiet: bool, public_id: int | None = None, life: object = None) -> None:
        """Removes a listener: ``quiet``, one no caller asked to remove (its
        owner went, an emit's error ended), silently, as the store may be
        closed or the listener removed; otherwise as Subscription.remove,
        whose ``id`` is ``public_id`` and ``life`` the native store it was
        added to."""
        if not quiet and self._gone:
            self._sweep()
        error: FluxError | None = None
        with self._lock:
            kept = self._fns.get(native_id)  # let go once the lock is (see _fns)
            if quiet:
                handle = self._handle
                if handle is None or kept is None:
                    return  # closed, or removed already: libflux holds only what _fns does
            else:
                handle = self._live_handle("remove")
                if life is not None and life is not self._life:
                    # Added before a close() and a new __init__: it went with
                    # the old native store, whose ids the new one reuses.
                    raise UnknownTokenError(f"remove: subscription {public_id} was already removed")
            try:
                status = self._drop_listener(handle, native_id, counted=True)
                if status and not quiet:
                    error = _native.status_error(status)  # read at once, on this thread
                    if status == _UNKNOWN_TOKEN and public_id is not None:
                        # libflux names its own id, which the store's own
                        # listeners make differ from Subscription.id.
                        message = f"remove: subscription {public_id} was already removed"
                        error.args = (message,)
                        error.message = message
            except ArgumentError as exc:
                raise _argument_error(exc) from None
            finally:
                self._settle()  # also when an interrupt came after the removal
        del kept  # its last reference may go here, with no lock held
        if not quiet:
            # As an errcheck would: what escaped (the listener's destroy)
            # first, once the removal is recorded.
            try:
                _native.raise_outcome(error)
            finally:
                error = None  # no exception -> traceback -> frame cycle

    def _drop_listener(self, handle: int, native_id: int, *, counted: bool) -> int:
        """flux_store_remove_listener(); ``native_id`` leaves _fns (and the
        count, when ``counted``) once libflux holds it no more -- the two
        change together, also when an interrupt cuts the call short. Returns
        the call's status. Under self._lock."""
        status: int = _NOT_RUN
        try:
            status = _flux_store_remove_listener_raw(handle, native_id)
        finally:
            if status == _NOT_RUN:
                # Cut short: before libflux ran (the recursion limit), or
                # after it returned (where an interrupt lands). Asked again,
                # libflux tells: an unknown id is one the first call removed.
                # Should this fail too, the id stays, and a later removal of
                # it (a sweep, say) finds it unknown and takes it out.
                status = _flux_store_remove_listener_raw(handle, native_id)
            if (status == 0 or status == _UNKNOWN_TOKEN) and native_id in self._fns:
                # No call from here on: an interrupt cannot come in between.
                del self._fns[native_id]  # not the last reference (the caller's)
                if counted:
                    self._listeners -= 1
        return status

    def _sweep(self, wait: bool = True) -> None:
        """Removes the owner-bound listeners whose owner went (see
        _owner_collected): the owner's weakref callback does, and so does the
        store's next add_listener or remove, should an interrupt have cut
        that callback short -- or the store's lock have been held by another
        thread. Takes the lock one removal at a time (see _fns); with no
        ``wait``, only when no other thread holds it, and then for all."""
        gone = self._gone
        if wait:
            for native_id in list(gone):  # other threads' callbacks may add to it
                self._unlisten(native_id, quiet=True)
                gone.pop(native_id, None)  # once removed: if cut short, swept again
            return
        # The weakref callback runs wherever the owner's last reference went:
        # in the collector, on a thread holding any lock (the registry's,
        # another store's, the caller's own), whose holder a thread holding
        # this store's lock may be waiting for -- a close() of this store
        # waits for the registry lock, a StoreGroup for its other stores'.
        # Waiting here would deadlock them. Taken only if free (this thread's
        # own call holding it counts as free), the result recorded by C with
        # no call in between (where an interrupt could leave it taken).
        lock = self._lock
        taken: list[bool] = []
        kept: list[object] = []  # the listeners, let go once the lock is (see _fns)
        try:
            taken.extend(map(lock.acquire, _NO_WAIT))
            if taken[0]:
                for native_id in list(gone):
                    kept.append(self._fns.get(native_id))
                    self._unlisten(native_id, quiet=True)
                    gone.pop(native_id, None)
        finally:
            if taken and taken[0]:
                lock.release()
        del kept

    # -- lifetime ----------------------------------------------------------

    @property
    def closed(self) -> bool:
        """True once :meth:`close` ran (or the dispatcher closed it)."""
        return self._handle is None

    def close(self) -> None:
        """Unregisters the store and releases its state and listeners.
        Idempotent. Safe while other threads call the store: a call already
        inside libflux finishes first, and every later call raises
        :class:`~flux.InvalidArgumentError` (reading a ``ReduceStore``'s
        ``state`` too) -- but ``close()``, which does nothing, a ``with``
        block, which enters and closes again, and :attr:`closed`,
        :attr:`dispatch_token`, :attr:`dispatcher` and ``error`` (None),
        which still answer.

        :raises AlreadyDispatchingError: a dispatch is running; nothing changed.
        :raises InvalidArgumentError: the store is in a live group; release it first.
        """
        dispatcher = self._dispatcher
        status: int | None = None
        error: BaseException | None = None
        # Whether this call closed the store: the registry learns it once the
        # store's lock is let go. Waiting for the registry lock under it
        # deadlocked with a finalizer the collector ran on a thread holding
        # the registry lock, which then waited for this store's lock (to
        # close the store too, say).
        closed = False
        try:
            with self._lock:
                handle = self._handle
                if handle is None:
                    return
                # What libflux lets go here -- the listeners, and through them
                # their owners -- and the states are kept until the lock is
                # released (see _fns): their finalizers may take other locks.
                kept = (self._fns, self._held)
                # Cleared first: calls made by the destroys (an owner's weakref
                # callback removing its listener, say) find the store closed.
                self._handle = None
                try:
                    # No errcheck: it would raise what escaped on this thread
                    # before looking at the status, and only the status says
                    # whether libflux destroyed the store. What escaped is
                    # raised below, once the store is fully open or closed.
                    status = _flux_store_destroy_raw(handle)
                    if status:
                        error = _native.status_error(status)  # read at once, on this thread
                except ArgumentError as exc:
                    status = _NOT_RUN  # libflux never ran (the recursion limit): the store is open
                    error = _argument_error(exc)
                finally:
                    try:
                        if status is None:
                            # An interrupt came after libflux returned, before
                            # the status was read: libflux knows.
                            status = 0
                            status = self._registered_status()
                    finally:
                        if status:
                            self._handle = handle  # refused: nothing changed, the store is open
                        else:
                            closed = True  # first: no call before it
                            # The C store's states go with the list its context
                            # holds, when libflux runs that destroy, within the
                            # call (a dispatch starting meanwhile on another
                            # thread makes it refuse): kept above, with the
                            # lock. Emptying the list itself would free them.
                            # Before any call: an interrupt raised after one
                            # would leave the closed store holding them.
                            self._held = [None, _SETTLED]
                            # No call before the native handle is forgotten: an
                            # interrupt raised after one (a dict's pop is one)
                            # would skip it, and the dispatcher's finalizer would
                            # destroy the freed store again.
                            dispatcher._natives.pop(handle, None)
                            self._fns = {}
                            self._listeners = 0  # as _fns: they went with the store
                            self._settler = None
                            # Its end listener went with the store.
                            self._error_state = self._error_end = self._error_shown = None
                            _unshown.pop(self._ident, None)
                            _emitted.pop(self._ident, None)
                            dispatcher._children.pop(self._ident, None)
                            token = getattr(self, "_token", None)  # None: creation was interrupted
                            if token is not None:
                                dispatcher._names.pop(token.value, None)
        finally:
            if closed:
                # Before the listeners go: their finalizers find the store
                # out of the registry, as under the lock.
                dispatcher._store_closed(self)  # the registry's lock, with no store's held
        del kept  # the listeners and states go here, with no lock held
        try:
            _native.raise_outcome(error)  # this call is the outermost one
        finally:
            error = None  # no exception -> traceback -> frame cycle

    def _registered_status(self) -> int:
        """0 when libflux has unregistered this store (destroyed it), else
        non-zero (see _registration_status)."""
        token = getattr(self, "_token", None)
        if token is None:
            return 0  # not knowable: taken for closed
        return _registration_status(self._native_dispatcher, token.value)

    def _live_handle(self, operation: str) -> int:
        handle = self._handle
        if handle is None:
            raise InvalidArgumentError(f"{operation}: the store is closed")
        return handle

    def __repr__(self) -> str:
        state = "closed" if self._handle is None else f"token {self._token.value}"
        return f"<{type(self).__name__} {state}>"


class ReduceStore(Store, Generic[S]):
    """Facebook's FluxReduceStore: override :meth:`get_initial_state` and
    :meth:`reduce` (or route actions with ``@flux.handles``). When the new
    state is not the old one (``are_equal``, by default ``is``), the store
    keeps it and its listeners run once.

    Overriding :meth:`are_equal` makes the comparison Python's; left alone,
    libflux compares the objects' identities and never calls into Python.
    """

    _routes: ClassVar[dict[Any, Callable[..., Any]]] = {}
    #: _routes as functions of (store, state, action) (see _as_route).
    _flux_routes: ClassVar[dict[Any, Callable[..., Any]]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        # action type -> the name of the method that handles it, then that
        # name's definition in this class (an override of a routed method,
        # decorated or not, handles its types, as a method call would).
        names: dict[Any, str] = {}
        for klass in reversed(cls.__mro__):
            for name, value in vars(klass).items():
                for action_type in getattr(value, "_flux_handles", ()):
                    names[action_type] = name
        cls._routes = {action_type: inspect.getattr_static(cls, name) for action_type, name in names.items()}
        cls._flux_routes = {action_type: _as_route(method) for action_type, method in cls._routes.items()}
        cls._flux_reduce = _reducer(cls)

    def __init__(self, dispatcher: Dispatcher[Any]) -> None:
        # A live store is refused before get_initial_state runs: a refused
        # __init__ runs no user code ("called once, by the constructor").
        # _create checks again, under its locks.
        if self.__dict__.get("_handle") is not None:
            raise _already_made(self)
        self._create(dispatcher, self.get_initial_state(), settles=True)

    def get_initial_state(self) -> S:
        """Override: the state the store starts with (called once, by the
        constructor)."""
        raise NotImplementedError(f"{type(self).__name__} must override ReduceStore.get_initial_state()")

    def reduce(self, state: S, action: Any) -> S:
        """Override (or route actions with :func:`flux.handles`): the state
        after ``action``; return ``state`` itself when nothing changes. Runs
        on the dispatching thread; an exception fails the dispatch and the
        store keeps its state.

        Left alone in a class that routes, it routes as a dispatch does
        (an unhandled action leaves ``state`` as it is), so an override may
        hand ``super().reduce()`` the actions it does not handle."""
        routes = type(self)._flux_routes
        if routes:
            method = _route(routes, action)
            return state if method is None else method(self, state, action)
        raise NotImplementedError(f"{type(self).__name__} must override ReduceStore.reduce() or route with @handles")

    def are_equal(self, one: S, two: S) -> bool:
        """Override to compare states by value: true when ``reduce`` changed
        nothing that listeners care about. The default is identity
        (Facebook's ``===``), which costs no call into Python."""
        return one is two

    @property
    def state(self) -> S:
        """The current state (Facebook's ``getState()``). Any thread may read
        it: while another thread dispatches, it is the state before or after
        that dispatch's reduce -- always a live object."""
        # Not the PyObject* itself (another thread's dispatch may let it go
        # before we take a reference): the one of the held states (see the
        # top of this module) at that address, and the C store's state is
        # always one of them. That one may be a newer state than the
        # pointer's: the old one let go, a new one made at its address and
        # held before the C store takes it (so a reader could see a state,
        # then an older one). So the pointer is read again: unchanged, the C
        # store holds the object at that address now, and the object found,
        # alive (we hold it), is that one.
        if _left_over.up:
            _native.raise_escaped()  # what an owner's weakref callback kept, say
        with self._lock:  # not closed meanwhile (see _create)
            handle = self._live_handle("state")
            # Taken after the handle, which _create sets after them: the
            # states of this native store, not of one closed meanwhile
            # (among which the loop below would never find its state).
            held = self._held
            try:
                pointer = _flux_store_state(handle)
                while True:
                    state = held[0]
                    if _id(state) != pointer:
                        state = held[1]
                        if _id(state) != pointer:
                            state = _MISSING
                    again = _flux_store_state(handle)
                    if again == pointer and state is not _MISSING:
                        return state  # type: ignore[no-any-return]
                    pointer = again
            except ArgumentError as exc:
                raise _argument_error(exc) from None

    def get_state(self) -> S:
        """:attr:`state`, under Facebook's name."""
        return self.state


def _reduce(store: ReduceStore[Any], state: Any, action: Any) -> Any:
    return store.reduce(state, action)


def _as_route(method: Any) -> Callable[..., Any]:
    """A routed method as a function of ``(store, state, action)``, called
    as ``store.method(state, action)`` would call it: a function as it is
    (the fast path), any other attribute -- a staticmethod, a classmethod
    -- bound the way attribute access binds it."""
    if type(method) is FunctionType:
        return method
    get = getattr(type(method), "__get__", None)
    if get is None:  # not a descriptor: store.method is the object itself

        def plain(store: Any, state: Any, action: Any) -> Any:
            return method(state, action)

        return plain

    def bound(store: Any, state: Any, action: Any) -> Any:
        return get(method, store, type(store))(state, action)

    return bound


def _route(routes: dict[Any, Callable[..., Any]], action: Any) -> Callable[..., Any] | None:
    """The route of ``action``'s type, or None when it is unhandled."""
    action_type = _action_type(action)
    try:
        return routes.get(action_type)
    except TypeError:
        # An unhashable type (a list, a dict) names no route: it is
        # unhandled, like any type no method handles. Only a failing hash
        # counts as that; an __eq__ that raised is raised.
        try:
            hash(action_type)
        except TypeError:
            return None
        raise


def _reducer(cls: type[ReduceStore[Any]]) -> Callable[..., Any]:
    """A ReduceStore class's _flux_reduce: its own ``reduce`` as it is (the
    fast path: one method call), or a function that routes actions
    (``@handles``) and compares with a Python ``are_equal``."""
    routes = cls._flux_routes
    has_reduce = cls.reduce is not ReduceStore.reduce
    if routes:

        def routed(store: Any, state: Any, action: Any) -> Any:
            method = _route(routes, action)
            if method is not None:
                return method(store, state, action)
            return store.reduce(state, action) if has_reduce else state

    if cls.are_equal is ReduceStore.are_equal:
        # Identity: libflux compares the pointers itself. The class's own
        # attribute, descriptor and all (a staticmethod stays one).
        return routed if routes else inspect.getattr_static(cls, "reduce")
    plain = routed if routes else _reduce

    def reduce_and_compare(store: Any, state: Any, action: Any) -> Any:
        # Compared here rather than through flux_equal_fn, which cannot
        # fail: an are_equal that raises then fails the dispatch like a
        # reduce that raises. Equal: hand libflux the old state back,
        # and the new one is let go.
        new = plain(store, state, action)
        if new is not state and store.are_equal(state, new):
            return state
        return new

    return reduce_and_compare


ReduceStore._flux_reduce = _reducer(ReduceStore)


class StoreGroup(_ClosesOnExit):
    """Facebook's FluxStoreGroup: ``fn()`` runs once per dispatch, after
    every store of the group. Needs at least one store, all on one
    dispatcher. The group is registered until :meth:`release` (or the
    dispatcher's ``close``); until then the dispatcher keeps it alive (a
    group dropped unreleased goes on running ``fn``), its stores cannot be
    closed, and initializing it again raises :class:`RuntimeError`.

    An exception ``fn`` raises aborts the dispatch and comes out of
    ``dispatch`` unchanged.
    """

    def __init__(self, stores: Iterable[Store], fn: Callable[[], object]) -> None:
        stores = list(stores)
        if not callable(fn):
            raise TypeError(f"fn must be callable, not {type(fn).__name__}")
        for store in stores:
            if not isinstance(store, Store):
                raise TypeError(f"expected flux stores, not {type(store).__name__}")
        if not stores:
            raise InvalidArgumentError("StoreGroup: a group needs at least one store")
        dispatcher = stores[0]._dispatcher
        if any(store._dispatcher is not dispatcher for store in stores):
            raise InvalidArgumentError("StoreGroup: all stores in a group must use the same dispatcher")
        # Makes release() one step for all threads (see Store._lock). Made
        # again after a release(), the group keeps it, and holds it while it
        # is made, as a store does (see Store._create): a release() still
        # running on another thread finishes first, and then forgets the
        # native group it released, not this one.
        lock = self.__dict__.get("_lock") if "_ident" in self.__dict__ else None
        if lock is None:
            lock = threading.RLock()
        out = c_void_p(_native.UNTOUCHED)
        with ExitStack() as held:
            # As in Store._create: Dispatcher.close() either finds this group
            # among its children and releases it (before closing its
            # stores), or this finds the dispatcher closed.
            held.enter_context(dispatcher._closing_lock)
            held.enter_context(lock)
            if self.__dict__.get("_handle") is not None:
                # As for a store (see Store._create): the first would stay live.
                raise RuntimeError("StoreGroup: this group is already made: release() it before initializing it again")
            self._stores = stores
            self._dispatcher = dispatcher
            self._ident = _id(self)  # its key in Dispatcher._children (see Store._create)
            self._lock = lock
            if dispatcher._handle is None:
                raise InvalidArgumentError("StoreGroup: the dispatcher is closed")
            # Every store's lock, in one global order (no two creations
            # deadlock): none can be freed while libflux reads it.
            # Told apart by identity, never by a store's own __eq__/__hash__.
            for store in sorted({_id(store): store for store in stores}.values(), key=_id):
                held.enter_context(store._lock)
            handles = (c_void_p * len(stores))(*(store._live_handle("StoreGroup") for store in stores))
            out_ref = byref(out)
            owner = _Owner(dispatcher._pending, stores[0]._native_dispatcher, _NO_HELD, 0)
            self._handle: int | None = None
            added = [0]  # the context, also when an interrupt is raised as _add returns
            try:
                key = _add(fn, owner, added)
                _flux_store_group_create(handles, len(stores), _listener_trampoline, key, _destroy_trampoline, out_ref)
            except ArgumentError as exc:
                raise _argument_error(exc) from None
            finally:  # as in Store._create: no call before it is recorded
                native = out.value
                if native and native != _native.UNTOUCHED:
                    self._handle = native
                    self._fn: Callable[[], object] | None = fn  # for release() to keep (see there)
                    dispatcher._natives[native] = True
                    dispatcher._children[self._ident] = self
                elif added[0]:
                    _native.drop(added[0], fn, native)

    def release(self) -> None:
        """Unregisters the group: no later dispatch runs ``fn``. Idempotent.

        :raises NoMemoryError: only during a dispatch, out of memory to note
            the removal; nothing changed: the group is live, keeps its
            stores, and must still be released.
        :raises AlreadyDispatchingError: only in a child process, on a
            dispatch the fork orphaned; nothing changed.
        """
        # fn, kept until the lock is let go: idle, libflux lets go of it
        # inside the call, and its finalizer (user code) must not run holding
        # the lock (Dispatcher.close on another thread waits on it), as for
        # a store's listeners (see Store.close).
        with self._lock:  # two threads releasing at once: one releases
            handle = self._handle
            if handle is None:
                return
            kept = self.__dict__.get("_fn")
            # For asking libflux whether the group is live, should an
            # interrupt take the status (read here, where one changes nothing).
            token = int(_flux_store_group_token(handle))
            native_dispatcher = self._stores[0]._native_dispatcher
            # Nothing between this and the call where an interrupt could be
            # raised (no call): once cleared, the group is released -- unless
            # libflux says it refused.
            self._handle = None
            status = _NOT_RUN
            error: FluxError | None = None
            try:
                # No errcheck: it would raise what escaped on this thread
                # before looking at the status, which alone says whether the
                # group is gone (as in Store.close()).
                status = _flux_store_group_release_raw(handle)
                if status:
                    error = _native.status_error(status)  # read at once, on this thread
            except ArgumentError as exc:
                self._handle = handle  # libflux never ran (the recursion limit): the group is live
                raise _argument_error(exc) from None
            finally:  # released even when what escaped its destroy is raised
                if status == _NOT_RUN and self._handle is None:
                    # An interrupt came after libflux returned, before the
                    # status was stored (else the call never ran, and the
                    # handle is back): libflux knows. Cut short too, taken
                    # for released, as before the question.
                    status = 0
                    status = _registration_status(native_dispatcher, token)
                if status > 0:
                    # Refused (out of memory during a dispatch): nothing
                    # changed, the group is live and must still be released.
                    self._handle = handle
                elif self._handle != handle:
                    # Released. The one call comes last: an interrupt raised
                    # after it would leave the rest undone (the group a child
                    # still, whose close() order a new __init__ then kept).
                    if self._handle is None:
                        self._fn = None  # not its last reference: `kept`
                        children = self._dispatcher._children
                        if self._ident in children:  # it is, since __init__ recorded it
                            del children[self._ident]
                    # Forgotten also when fn's destroy made the group again
                    # meanwhile (a new handle): kept, the dispatcher's
                    # finalizer would release the freed one.
                    self._dispatcher._natives.pop(handle, None)
        del kept  # fn goes here, with no lock held
        try:
            _native.raise_outcome(error)  # this call is the outermost one
        finally:
            error = None  # no exception -> traceback -> frame cycle

    close = release


def _registration_status(native_dispatcher: int, token: int) -> int:
    """Whether a store's or a group's registration is live, for a destroy or
    release whose status an interrupt lost: non-zero when libflux refused it
    (flux_unregister then refuses the owned token, changing nothing), 0
    when it ran (flux_unregister knows no ended token: never reused). Asked
    under the object's lock, so nothing closed the dispatcher meanwhile."""
    return 1 if _flux_unregister_raw(native_dispatcher, token) in _OWNED else 0


def live_objects() -> int:
    """How many stores, listeners and groups libflux still holds a Python
    object for. For tests."""
    return _native.live(
        lambda obj, extra: type(obj) is weakref.ref or (type(extra) is _Owner and type(obj) is not _Settler)
    )
