"""The Dispatcher and its tokens: Facebook's Flux dispatcher over libflux."""

from __future__ import annotations

import itertools
import operator
import sys
import threading
import time
import weakref
from collections.abc import Callable, Iterable
from ctypes import ArgumentError, addressof, byref, c_uint64
from threading import get_ident
from types import FrameType, TracebackType
from typing import TYPE_CHECKING, Any, Generic, TypeVar, final

from . import _native
from ._native import (
    DONE as _DONE_TYPE,
)
from ._native import (
    add as _add,
)
from ._native import (
    add_note as _add_note,
)
from ._native import (
    argument_error as _argument_error,
)
from ._native import (
    callback_trampoline as _CALLBACK,
)
from ._native import (
    destroy_trampoline as _DESTROY,
)
from ._native import (
    enqueue_headroom as _enqueue_headroom,
)
from ._native import (
    escaped as _escaped,
)
from ._native import (
    flux_dispatch as _flux_dispatch,
)
from ._native import (
    flux_dispatcher_close as _flux_dispatcher_close,
)
from ._native import (
    flux_dispatcher_create as _flux_dispatcher_create,
)
from ._native import (
    flux_dispatcher_destroy_raw as _flux_dispatcher_destroy_raw,
)
from ._native import (
    flux_dispatcher_set_observer as _flux_dispatcher_set_observer,
)
from ._native import (
    flux_enqueue as _flux_enqueue,
)
from ._native import (
    flux_is_dispatching as _flux_is_dispatching,
)
from ._native import (
    flux_register_raw as _flux_register_raw,
)
from ._native import (
    flux_store_destroy_raw as _flux_store_destroy_raw,
)
from ._native import (
    flux_store_group_release_raw as _flux_store_group_release_raw,
)
from ._native import (
    flux_try_dispatch as _flux_try_dispatch,
)
from ._native import (
    flux_unregister as _flux_unregister,
)
from ._native import (
    flux_wait_for as _flux_wait_for,
)
from ._native import (
    free_contexts as _free_contexts,
)
from ._native import (
    headroom as _headroom,
)
from ._native import (
    last_error_values as _last_error_values,
)
from ._native import (
    left_over as _left_over,
)
from ._native import (
    lower_left_over as _lower_left_over,
)
from ._native import (
    objects as _objects,
)
from ._native import (
    status_error as _status_error,
)
from ._native import (
    take_escaped as _take_escaped,
)
from .errors import (
    AlreadyDispatchingError,
    CircularDependencyError,
    FluxError,
    InvalidArgumentError,
    NoMemoryError,
    Status,
    UnknownStoreError,
    UnknownTokenError,
)

if TYPE_CHECKING:
    from .stores import Store

_id = id
_CALLBACK_FAILED = int(Status.ERR_CALLBACK_FAILED)
_TOO_DEEP = int(Status.ERR_TOO_DEEP)
_ALREADY_DISPATCHING = int(Status.ERR_ALREADY_DISPATCHING)
_UNKNOWN_TOKEN = int(Status.ERR_UNKNOWN_TOKEN)
_INVALID_ARGUMENT = int(Status.ERR_INVALID_ARGUMENT)
_CIRCULAR = int(Status.ERR_CIRCULAR)
_RAN = (0, _CALLBACK_FAILED, _TOO_DEEP)  # a dispatch ran: not a refusal

__all__ = ["Dispatcher", "Token"]

P = TypeVar("P")
StoreT = TypeVar("StoreT", bound="Store")
_serials = itertools.count(1).__next__


@final
class Token:
    """A registration's dispatch token, as returned by :meth:`Dispatcher.register`.

    Hashable and comparable; two tokens are equal when they name the same
    registration of the same dispatcher. A token remembers which dispatcher
    issued it (by a serial number, not a reference, so tokens never keep a
    dispatcher alive), and every other dispatcher rejects it with
    :class:`~flux.UnknownTokenError`. ``int(token)`` is the C ``flux_token``.
    Immutable: ``copy`` and ``deepcopy`` give the token itself (so state
    holding tokens can be deep-copied); ``pickle`` refuses it.
    """

    __slots__ = ("_address", "_cell", "_dispatcher", "_value")

    def __init__(self, dispatcher: int, value: int) -> None:
        # Internal: tokens come from Dispatcher.register.
        self._dispatcher = dispatcher
        self._value = value
        # The value as a flux_token in memory of the token's own, and its
        # address: wait_for on one token hands libflux that address, with no
        # array to build per call. Read-only, so any thread may pass it.
        self._cell = c_uint64(value)
        self._address: int = addressof(self._cell)

    @property
    def value(self) -> int:
        """The C ``flux_token``: unique within its dispatcher, never 0."""
        return self._value

    def __int__(self) -> int:
        return self._value

    def __eq__(self, other: object) -> bool:
        if type(other) is not Token:
            return NotImplemented
        return self._value == other._value and self._dispatcher == other._dispatcher

    def __hash__(self) -> int:
        return hash((self._dispatcher, self._value))

    def __repr__(self) -> str:
        return f"<flux.Token {self._value} of dispatcher #{self._dispatcher}>"

    def __copy__(self) -> Token:
        return self  # immutable: a copy in this process is the token itself

    def __deepcopy__(self, memo: dict[int, object]) -> Token:
        return self

    def __reduce__(self) -> Any:
        raise TypeError("a flux.Token is only meaningful in the process that issued it")


def _not_a_token(token: object) -> TypeError:
    return TypeError(f"expected a flux.Token, not {type(token).__name__}")


def _default_name(callback: object) -> str:
    """A registration's name when none is given: the callback's
    ``__qualname__``, else its ``repr`` -- always a str, and never a reason
    for register() to fail (a callable's repr may raise)."""
    try:
        qualname = getattr(callback, "__qualname__", None)
        return qualname if isinstance(qualname, str) and qualname else repr(callback)
    except Exception:  # noqa: BLE001 -- a name is cosmetic: the type's then
        return f"<{type(callback).__qualname__} object>"


def _closed(operation: str) -> InvalidArgumentError:
    return InvalidArgumentError(f"{operation}: the dispatcher is closed")


def _store_class(cls: object, operation: str) -> None:
    from .stores import Store  # flux.stores imports this module

    if not (isinstance(cls, type) and issubclass(cls, Store)):
        what = cls.__name__ if isinstance(cls, type) else f"a {type(cls).__name__}"
        raise TypeError(f"{operation}: expected a subclass of flux.Store, not {what}")


def _end_errors(erring: dict[int, Any]) -> None:
    """Ends the errors this thread's failed dispatch left on its stores: an
    ``emit_change(error=...)`` whose listeners never ran (the reduce raised
    after it, or the dispatch was failing already), so ``Store.error`` is
    None once that dispatch is over."""
    ident = get_ident()
    for store in list(erring.values()):
        store._end_error(ident)


def _inert(state: Any, payload: Any) -> Any:
    return state  # a half-made store's reduce: never changed, no listener runs


def _discard(store: Store) -> None:
    """Closes a store whose constructor raised after it was made; refused
    (in a dispatch, or in a live group), leaves it registered with libflux
    but inert -- its reduce and listeners never run again -- and the
    dispatcher closes it when it closes."""
    try:
        store.close()
    except FluxError:
        pass  # refused: made inert below
    finally:
        if store._handle is not None:
            store.__dict__["_flux_reduce"] = _inert  # found before the class's by _on_reduce


# -- enqueue's done --------------------------------------------------------
#
# flux_enqueue hands libflux the payload's PyObject* (callbacks must receive
# that very object), one module-level done trampoline, and as done's context
# the call's own record in the registry (see _native.objects): done gets the
# record of the very call it reports, whatever other calls, on this
# dispatcher or another, enqueued the same payload. The registry keeps each
# record (and through it the payload) alive from the call until its done has
# run, which frees the record's slot: libflux runs done exactly once per
# call, so nothing is left behind.


class _Enqueued:
    __slots__ = (
        "done",
        "erring",
        "failure",
        "locate",
        "on_error",
        "payload",
        "pending",
        "queued_errors",
        "reported",
        "serial",
        "status",
    )

    def __init__(
        self,
        payload: object,
        on_error: Callable[[BaseException], object] | None,
        pending: _native.Pending,
        queued_errors: QueuedErrors,
        locate: Callable[[FluxError], FluxError],
        erring: dict[int, Any],
        serial: int,
    ) -> None:
        self.payload = payload
        self.serial = serial  # the dispatcher's: whose tokens its failure names
        self.erring = erring  # the dispatcher's stores with an error emitted
        self.on_error = on_error
        self.pending = pending
        self.queued_errors = queued_errors
        # The dispatcher's _located, until the failure is known: a native
        # callback's failure names its Token.
        self.locate: Callable[[FluxError], FluxError] | None = locate
        self.done = False
        self.status = 0  # done's status, set with done
        # A failed dispatch's exception, once done took it; and whether it
        # was reported (see _report).
        self.failure: BaseException | None = None
        self.reported = False


def _in_chain(exc: BaseException | None, match: Callable[[BaseException], bool]) -> bool:
    """Whether ``match`` holds for ``exc`` or for one it was raised while
    handling (or from), and so on back (a cycle is walked once)."""
    seen: set[int] = set()
    while exc is not None and _id(exc) not in seen:
        if match(exc):
            return True
        seen.add(_id(exc))
        exc = exc.__cause__ or exc.__context__
    return False


def _continues(later: BaseException, earlier: BaseException) -> bool:
    """Whether ``later`` is ``earlier`` again, or was raised while handling
    (or from) it."""
    return _in_chain(later, lambda exc: exc is earlier)


@_native.trampoline(rerun=True)
def _on_done(context: int | None, address: int | None, status: int) -> None:
    # The bookkeeping comes first and makes no call until the record's slot
    # is free, so an interrupt cannot split it (see _native.trampoline). Its
    # context ends here, freed as the one destroy frees a context.
    record = None  # not `try` first: see _native._ENTERED_UNCHECKED
    try:
        record = _objects[context]  # type: ignore[index]
    except (IndexError, TypeError):  # not a context of ours (NULL: None)
        pass
    if record.__class__ is not _Enqueued:
        _native.stray["done"] = _native.stray.get("done", 0) + 1
        return
    record.status = status
    record.done = True
    _objects[context] = None  # type: ignore[index]
    try:
        _free_contexts.append(context)  # type: ignore[arg-type]
        if status == _CALLBACK_FAILED or status == _TOO_DEEP:
            _report(record)
        else:
            record.locate = None  # success, or a refusal that enqueue raises itself
    except BaseException:
        # An interrupt cut the report short: it is finished all the same,
        # each step once, and the interrupt goes the way of what escapes a
        # trampoline (this rerun is not interrupted before its work began).
        if status == _CALLBACK_FAILED or status == _TOO_DEEP:
            _report(record)
        raise


def _report(record: _Enqueued) -> None:
    """A failed enqueued dispatch's done: takes its entries and reports its
    failure, once -- to ``on_error``, else for the outermost call. Run again
    after an interrupt cut it short, it does what is left: each step is
    recorded with no call between it and its record."""
    if record.erring:
        _end_errors(record.erring)  # before the next queued dispatch runs
    ident = get_ident()
    if record.failure is None:
        # This dispatch's entries are the last failed dispatch's (see
        # park_exception), when that one was it: any before them belong to
        # the failed dispatch draining the queue, whose call raises them.
        # Nothing is parked for a native callback's failure, nor for one that
        # refused because an exception escaped (see _native.escaped), so the
        # last entries may be another dispatch's, even with this payload.
        entries = record.pending.get(ident)
        if entries:
            start = _native.own_entries(entries)
            first = entries[start][0]
            if (first is record.payload or first is _native.UNKNOWN_PAYLOAD) and _about(
                entries[start], _last_error_values()[0], record.serial, _escaped.get(ident) if _escaped else None
            ):
                record.failure = entries[-1][1]  # the last raised, as dispatch() re-raises
                del entries[start:]
                if not entries:
                    del record.pending[ident]
        if record.failure is None:  # a native callback failed: no Python exception
            locate = record.locate
            error = _status_error(record.status)
            record.failure = locate(error) if locate else error
    record.locate = None
    if record.reported:
        return
    on_error = record.on_error
    if on_error is not None:
        record.on_error = None  # given once
        try:
            on_error(record.failure)
        except BaseException as handler_exc:  # noqa: BLE001 -- the handler's own failure is not lost
            given = record.failure
            if not _continues(handler_exc, given):  # an interrupt as on_error began, say
                _add_note(handler_exc, f"raised by on_error, given: {_described(given)}")
            record.failure = handler_exc  # for the outermost call, in its place
            del given  # no cycle through this frame (see Dispatcher.dispatch)
        else:
            record.reported = True
            return
    # The done's frame: which call ran this dispatch (see _mine).
    done = sys._getframe(1)
    errors = record.queued_errors.get(ident)
    if errors is None:
        # Counted first, so nothing sees the entry with the flag down.
        _left_over.up = True
        _left_over.queued += 1
        record.queued_errors[ident] = [(record.failure, done)]
    else:
        errors += ((record.failure, done),)  # no call between this and its record
    record.reported = True


def _described(exc: BaseException) -> str:
    """``exc`` for a note: its type's name and its text (see _native.described)."""
    name = type(exc).__name__
    return _native.described(exc, lambda e: f"{name}: {e}", f"{name} (its str() raised)")


def _about(entry: _native.Entry, token: int, serial: int, escaped: BaseException | None) -> bool:
    """Whether ``entry``, the first of a failed dispatch's entries, can be
    the failure of the queued dispatch libflux says ``token`` (of dispatcher
    #``serial``) failed: parked for that token (or for one not known here),
    or raised by a wait that token's failure aborted -- but never what
    continues ``escaped``, this thread's exception that escaped a
    trampoline: the outermost call
    raises that in its dispatch's place, and takes its entries with it
    (the dispatches after it only refused, see Dispatcher.enqueue)."""
    if escaped is not None and _continues(entry[1], escaped):
        return False
    if not token or not entry[4] or entry[4] == token:
        return True
    # By Token, not by value: another dispatcher's error may name the same
    # value (a wait's error is about the waiting dispatcher's token).
    named = Token(serial, token)
    return _in_chain(entry[1], lambda exc: isinstance(exc, FluxError) and exc.token == named)


_DONE = _DONE_TYPE(_on_done)


QueuedErrors = dict[int, list[tuple[BaseException, FrameType]]]


def _mine(entries: list[Any], frame: int, pins: int | None = None) -> int:
    """Where the entries parked by the dispatches of the innermost dispatch
    or enqueue running on this thread (the call) begin in this thread's
    ``entries``, oldest first, whose item ``frame`` is the frame of the
    trampoline that parked each (and item ``pins``, if given, its stack's
    _native.Pins): those that ran under the call, always the last ones.
    Any before them are an enclosing call's, still running: this call ran
    inside its end (from a destroy or a finalizer run there), and leaves
    them for it to raise."""
    call: FrameType | None = sys._getframe(1)
    while call is not None and call.f_code not in _CALL_CODES:
        call = call.f_back
    if call is None:  # not called under a dispatch or enqueue: all of them
        return 0
    start = len(entries)
    while start > 0:
        entry = entries[start - 1]
        if not _native.ran_under(entry[frame].f_back, call, entry[pins] if pins is not None else None):
            break
        start -= 1
    return start


def _take_left(pending: _native.Pending, queued_errors: QueuedErrors, exc: BaseException) -> None:
    """As ``exc`` escapes the outermost call of this thread that ran the
    queue (the caller), takes what that call reports: its own dispatch's
    failure (the last of its entries: the queued dispatches took theirs)
    and the queued dispatches' failures; each but the one ``exc`` is
    becomes a note on it -- on an interrupt that took the call's place too.
    Nothing of it is left for a later call, and nothing of an enclosing
    call's is taken (see _mine). Each is deleted with no call after its
    notes: a run an interrupt cut short leaves the rest to a run that
    follows."""
    ident = get_ident()
    entries = pending.get(ident)
    own = None
    if entries:
        start = _mine(entries, 2, 5)
        if start < len(entries):
            own = entries[-1][1]
            # The last entry of each dispatch's (see park_exception): more than
            # one when an interrupt kept a drained dispatch from taking its own.
            for i in range(start, len(entries)):
                failure = entries[i][1]
                if (i + 1 == len(entries) or entries[i + 1][3]) and not _continues(exc, failure):
                    _add_note(exc, f"a dispatch it ran failed: {_described(failure)}")
            if start:
                del entries[start:]
            else:
                del pending[ident]
    errors = queued_errors.get(ident)
    first = _mine(errors, 1) if errors else 0
    if errors and first < len(errors):
        # Skipped by place, not by identity: one object raised by two failed
        # dispatches is two failures, and the second is noted on itself.
        raised = own is None and errors[first][0] is exc  # the first raised by _raise_left_over
        later = "a later" if raised or own is exc else "a"
        for failure, _ in errors[first + 1 :] if raised else errors[first:]:
            _add_note(exc, f"{later} queued dispatch also failed: {_described(failure)}")
        if first:
            del errors[first:]
        else:
            del queued_errors[ident]
            _left_over.queued -= 1
            _lower_left_over()


class _Destroyer:
    """Destroys a collected dispatcher's native side when it goes itself
    (see _destroy_handle)."""

    __slots__ = ("handle", "natives")

    def __init__(self, handle: int, natives: dict[int, bool]) -> None:
        self.handle = handle
        self.natives = natives

    def __del__(self) -> None:
        _destroy_native(self.handle, self.natives)


def _destroy_handle(handle: int, natives: dict[int, bool], lifeline: list[_Destroyer]) -> None:
    # weakref.finalize. A dispatcher never closed is collected with its
    # stores and groups (they refer to each other) by the cycle collector,
    # which runs weakref callbacks before any __del__ of that garbage -- and
    # such a __del__ may still call the dispatcher, a store or a group. So the
    # work goes to an object only `lifeline` holds, and `lifeline` only the
    # Dispatcher once this returns: it goes as the Dispatcher is cleared,
    # after every __del__ (never, should one of them resurrect it). Freed by
    # its reference count alone, the Dispatcher clears it right after this.
    lifeline.append(_Destroyer(handle, natives))


def _destroy_native(handle: int, natives: dict[int, bool]) -> None:
    # weakref.finalize: the native dispatcher is freed when the Dispatcher
    # object is gone. No call can be in flight then -- every call holds a
    # reference to the Dispatcher -- so this never frees memory under a thread.
    # First the native stores and groups never closed (collected with it):
    # newest first, so each group goes before its stores. No errcheck: a
    # finalizer runs wherever the last reference goes (a destroy inside a
    # dispatch, say), and what escaped on this thread is the outermost
    # call's to raise -- taken here, it was lost, and the rest leaked. A
    # refusal (in a child forked during a dispatch of it) leaves it be.
    for native, is_group in reversed(list(natives.items())):
        (_flux_store_group_release_raw if is_group else _flux_store_destroy_raw)(native)
    natives.clear()
    _flux_dispatcher_destroy_raw(handle)


class Dispatcher(_native.Unshareable, Generic[P]):
    """Facebook's Flux dispatcher: every payload goes to every callback.

    ::

        d = flux.Dispatcher()
        token = d.register(callback)   # callback(payload) -> None
        d.dispatch(payload)            # any object; callbacks get that very object
        d.wait_for([token])            # from inside a callback
        d.unregister(token)
        d.close()                      # or: with flux.Dispatcher() as d: ...

    Callbacks run in registration order, synchronously, on the thread that
    calls :meth:`dispatch`; a callback may first let others run with
    :meth:`wait_for`. The dispatcher keeps each callback alive until it is
    unregistered or the dispatcher is closed, so a lambda with no other
    reference is fine.

    Every method may be called from any thread. Dispatches on one dispatcher
    are serialized: a second thread's :meth:`dispatch` waits (without holding
    the GIL) until the first is done. :meth:`register`, :meth:`unregister`
    and :attr:`is_dispatching` never wait. ``dispatch`` from inside one of its
    own callbacks raises :class:`~flux.AlreadyDispatchingError`; dispatching a
    *different* dispatcher from a callback is fine -- unless threads doing so
    would wait for each other for good (each dispatching, from a callback, a
    dispatcher another is dispatching): the dispatch that would close that
    cycle raises :class:`~flux.AlreadyDispatchingError` instead.
    Initializing a dispatcher that is not closed again raises
    :class:`RuntimeError` (nothing is changed).

    A dispatcher that is garbage collected without :meth:`close` is closed by
    a ``weakref.finalize``, which first destroys the stores and groups that
    were collected with it; but a callback (or a store's listener) that refers
    to its dispatcher keeps it alive while registered, so close dispatchers
    you are done with.
    """

    __slots__ = (
        "__weakref__",
        "_children",
        "_closer",
        "_closing_lock",
        "_constructing",
        "_creating",
        "_cycle_failed",
        "_erring",
        "_finalizer",
        "_handle",
        "_lifeline",
        "_names",
        "_natives",
        "_pending",
        "_queued_errors",
        "_registry",
        "_registry_lock",
        "_serial",
        "_tokens",
        "_unfinished",
        "_wait_registry",
        "_waiting",
    )

    def __init__(self) -> None:
        if getattr(self, "_handle", None) is not None or getattr(self, "_unfinished", None) is not None:
            # A second native dispatcher under this object would leave the
            # first's callbacks and stores out of reach of close(), as for
            # a store (see Store._create).
            raise RuntimeError(f"{self!r} is already made: close() it before initializing it again")
        handle = _flux_dispatcher_create()
        if not handle:
            raise NoMemoryError("flux_dispatcher_create: out of memory")
        # The address as a plain int: a void* argument converts from an int
        # faster than from a c_void_p instance (make bench). None once closed,
        # which reaches libflux as NULL.
        self._handle: int | None = handle
        # The handle, from when close() clears _handle until it has closed
        # everything: an exception can cut a close short (an interrupt), and
        # the next close() finishes it. And the thread running close() now
        # (0: none), which another close() leaves to it.
        self._unfinished: int | None = None
        self._closer: int = 0
        self._serial: int = _serials()
        # thread ident -> the exception a callback raised in the dispatch that
        # thread is running. Dispatches of one dispatcher are serialized, but a
        # finished dispatch's thread may read its entry after the next thread's
        # dispatch started, so the key is the thread, not the dispatcher.
        # Entries are oldest first, each with its payload (see _native.Pending).
        self._pending: _native.Pending = {}
        # The token values registered and not yet unregistered, for close().
        self._tokens: set[int] = set()
        # The live stores and groups on this dispatcher (flux/stores.py), in
        # creation order: close() closes them, groups before their stores.
        # By id() (each keeps its object): never by the stores' own
        # __eq__/__hash__, which a subclass may define by value.
        self._children: dict[int, Any] = {}
        # Held by close() as it clears the handle and takes the children, and
        # by every store and group creation from its check of the handle to
        # its record in _children: a store or group made while close() runs
        # is either closed by it or refused. Reentrant: what a creation
        # frees (a finalizer) may create another.
        self._closing_lock = threading.RLock()
        # Their native handles (True: a group), for the finalizer: a
        # dispatcher never closed is collected with its stores, and its
        # finalizer cannot reach them.
        self._natives: dict[int, bool] = {}
        # token value -> its name in traces and circular-dependency messages.
        self._names: dict[int, str] = {}
        # thread ident -> failures of queued dispatches that thread ran with
        # no on_error, for its outermost dispatch/enqueue to raise.
        self._queued_errors: QueuedErrors = {}
        # register_store's stores, one per class, in registration order; the
        # classes being made now, by thread; and a condition other threads
        # wait on for a class being made. A C lock: its with-statement makes
        # no Python call (Condition's does), where an interrupt could leave
        # it held. Reentrant, and the registry is copied on write, never
        # changed in place: the garbage collector may run a finalizer inside
        # a region the lock guards, on the thread holding it, and one that
        # closes a registered store or reads `stores` deadlocked on a plain
        # lock (or, let in, would change the dict under an iteration).
        # Keyed by id(cls), never by the class's own __eq__/__hash__, which a
        # metaclass may define (two classes equal, or a hash that raises); a
        # registry entry keeps its class: (cls, store).
        self._registry: dict[int, tuple[type, Any]] = {}
        self._creating: dict[int, int] = {}
        # Thread ident -> the class it waits for another thread to make, and
        # -> why it must not make that class itself once the maker fails (a
        # cycle across threads, see _check_cycle).
        self._waiting: dict[int, type] = {}
        self._cycle_failed: dict[int, str] = {}
        # Thread ident -> its register_store calls running a constructor,
        # innermost last: [cls, the instance cls(...) is making (known before
        # its __init__ runs), or None].
        self._constructing: dict[int, list[list[Any]]] = {}
        self._registry_lock = threading.RLock()
        self._wait_registry = threading.Condition(self._registry_lock)
        # The stores with an error emitted whose emit is not over (see
        # Store.emit_change): a failed dispatch ends them.
        self._erring: dict[int, Any] = {}  # id() -> store, as _children
        # Kept across a new __init__ (see _destroy_handle).
        lifeline: list[_Destroyer] | None = getattr(self, "_lifeline", None)
        if lifeline is None:
            lifeline = []
            self._lifeline: list[_Destroyer] = lifeline
        self._finalizer = weakref.finalize(self, _destroy_handle, handle, self._natives, lifeline)
        self._finalizer.atexit = False  # the process is ending; leave it be

    # -- registration ------------------------------------------------------

    def register(self, callback: Callable[[P], object], name: str | None = None) -> Token:
        """Registers ``callback(payload)`` to be called by every dispatch.

        ``name`` names the registration in traces (:class:`flux.Trace`) and
        circular-dependency messages; by default the callback's
        ``__qualname__`` (or its ``repr``; or, when that raises, its type's
        name).

        A callback registered during a dispatch is first called by the next
        one. Its return value is ignored; an exception it raises aborts the
        dispatch and propagates out of :meth:`dispatch`.

        :returns: the registration's :class:`Token`, for :meth:`unregister`
            and :meth:`wait_for`.
        :raises TypeError: ``callback`` is not callable, or ``name`` is
            neither a str nor None (nothing is changed).
        :raises InvalidArgumentError: the dispatcher is closed.
        :raises AlreadyDispatchingError: in a child process forked while
            another thread dispatched this dispatcher: the registration would
            join when that dispatch ends, which never happens there.
        """
        if not callable(callback):
            raise TypeError(f"callback must be callable, not {type(callback).__name__}")
        if name is not None and not isinstance(name, str):
            raise TypeError(f"name must be a str or None, not {type(name).__name__}")
        handle = self._handle
        if handle is None:
            raise _closed("register")
        label = name if name is not None else _default_name(callback)
        out = c_uint64(_native.UNTOUCHED)
        out_ref = byref(out)
        record = _native.Registration(self._pending, self._names)
        error: FluxError | None = None
        added = [0]  # the context, also when an interrupt is raised as _add returns
        try:
            context = _add(callback, record, added)
            # On failure libflux has already run the destroy trampoline, which
            # took the entries out again: one leak-free path.
            status = _flux_register_raw(handle, _CALLBACK, context, _DESTROY, out_ref)
            if status:
                error = _status_error(status)  # read at once, on this thread
        except BaseException as exc:
            if added[0]:
                _native.drop(added[0], callback, out.value)  # an interrupt before libflux ran
            if isinstance(exc, ArgumentError):
                raise _argument_error(exc) from None
            raise
        finally:
            # Recorded before anything can raise once libflux registered it
            # (an interrupt included), so close() unregisters it. No call
            # before the last step. Named before close() can see the token:
            # the destroy that ends the registration drops the name (see
            # _native.Registration).
            value = out.value
            if value and value != _native.UNTOUCHED:
                record.value = value
                self._names[value] = label
                self._tokens.add(value)
        try:
            _native.raise_outcome(error)
        finally:
            error = None  # no exception -> traceback -> frame cycle
        if self._handle is None:
            # close() ran on another thread meanwhile and may have missed this
            # one: take it out again (the handle stays valid, see close()).
            try:
                _flux_unregister(handle, value)
            except UnknownTokenError:
                pass
            except ArgumentError as exc:
                raise _argument_error(exc) from None
            raise _closed("register")
        return Token(self._serial, value)

    def unregister(self, token: Token) -> None:
        """Removes a registration; its callback is not called again.

        Legal from inside a callback, the callback's own token included; the
        callback is then released when the running dispatch finishes.

        :raises UnknownTokenError: ``token`` was already unregistered, or
            belongs to another dispatcher.
        :raises NoMemoryError: during a dispatch, no memory to note the
            removal; the callback stays registered.
        :raises TypeError: ``token`` is not a :class:`Token`.
        :raises InvalidArgumentError: the dispatcher is closed; or ``token``
            is a store's ``dispatch_token`` or a group's (end those with the
            store's :meth:`~flux.Store.close` or the group's
            :meth:`~flux.StoreGroup.release`); nothing changed.
        :raises AlreadyDispatchingError: in a child process forked while
            another thread dispatched this dispatcher (the release would wait
            for that dispatch's end, which never comes); nothing changed.
        """
        if type(token) is not Token:
            raise _not_a_token(token)
        handle = self._handle
        if handle is None:  # the header's order: a closed (NULL) dispatcher first
            raise _closed("unregister")
        value = self._token_value(token)
        try:
            _flux_unregister(handle, value)
        except ArgumentError as exc:
            raise _argument_error(exc) from None
        except InvalidArgumentError:
            # The dispatcher is open: libflux refused an owned registration.
            raise self._owned_error(value) from None
        except FluxError as exc:
            raise self._located(exc)
        # The name stays until libflux destroys the registration -- now, or
        # at the end of the running dispatch -- so that dispatch's trace
        # events for the callback still carry it.
        self._tokens.discard(value)

    def name_of(self, token: Token | int) -> str | None:
        """The name a registration was given (see :meth:`register`), by token
        or token value; None once unregistered (unregistered during a
        dispatch: once that dispatch has finished). A token of another
        dispatcher names no registration of this one: None.

        :raises TypeError: ``token`` is neither a :class:`Token` nor an int.
        """
        if type(token) is Token:
            return self._names.get(token._value) if token._dispatcher == self._serial else None
        try:
            value = operator.index(token)
        except TypeError:
            raise TypeError(f"expected a flux.Token or an int, not {type(token).__name__}") from None
        return self._names.get(value)

    # -- registered stores (JBFlux's registerStore:, Fluxible's getStore) --

    def register_store(self, cls: type[StoreT], /, *args: Any, **kwargs: Any) -> StoreT:
        """The store of class ``cls`` on this dispatcher: made with
        ``cls(self, *args, **kwargs)`` the first time, the same instance
        every time after (the arguments are then unused). ``cls.__init__``
        may register the store classes it depends on.

        The dispatcher keeps the store until it closes (which closes it);
        a registered store closed by hand leaves the registry, and the next
        call makes a new one. From any thread: two threads registering a
        class at once get one instance (the second waits for the first to
        make it). Registered during a dispatch, a store takes part from the
        next dispatch.

        :raises TypeError: ``cls`` is not a subclass of :class:`flux.Store`,
            or made no store of this dispatcher.
        :raises RuntimeError: ``cls.__init__`` registers ``cls`` again (a
            cycle of store classes), also through other threads: a call that
            would wait for a class whose making waits, in turn, for a class
            this thread is making raises it, and so do the calls of that
            cycle waiting on other threads when the class they wait for
            then fails.
        :raises InvalidArgumentError: the dispatcher is closed.
        :raises BaseException: what ``cls(self, *args, **kwargs)`` raised;
            nothing is registered (another thread waiting for the class
            then makes it). A store the constructor made of itself before
            it raised is closed (during a dispatch, where it cannot be, it
            is left inert -- it never handles a payload -- until the
            dispatcher closes).
        """
        _store_class(cls, "register_store")
        if self._handle is None:
            raise _closed("register_store")
        key = _id(cls)  # by identity (see __init__)
        me = get_ident()
        creating, waiting = self._creating, self._waiting
        marked = False
        store = None
        record: list[Any] = [cls, None]  # the store cls(...) made, see Store._create
        waited = False
        try:
            with self._registry_lock:
                try:
                    while True:
                        found = self._registry.get(key)  # replaced, not changed: read it anew
                        if found is not None:
                            return found[1]  # type: ignore[no-any-return]
                        maker = creating.get(key)
                        if maker is None:
                            if waited and me in self._cycle_failed:
                                # Its maker failed, in a cycle through this
                                # thread: making it here would meet it again.
                                raise RuntimeError(self._cycle_failed[me])
                            break
                        if maker == me:
                            raise RuntimeError(
                                f"register_store({cls.__name__}): its constructor registers it again"
                                " (a cycle of store classes)"
                            )
                        # Waiting would close a cycle through other threads?
                        self._check_cycle(cls, maker, me)
                        if not waited:
                            self._cycle_failed.pop(me, None)  # a mark left by an interrupt
                            waited = True
                        waiting[me] = cls
                        self._wait_registry.wait()
                finally:
                    if waited:
                        waiting.pop(me, None)
                        self._cycle_failed.pop(me, None)
                creating[key] = me
                marked = True  # no call in between: the finally always sees the mark
                self._constructing.setdefault(me, []).append(record)  # (the finally checks for it)
            # Made outside the lock: __init__ registers the store with libflux,
            # and may register its dependencies.
            try:
                if type(cls).__call__ is type.__call__:
                    # type.__call__'s two steps, spelled out, so that the
                    # instance is known before its __init__ runs: a store of
                    # the same class that __init__ makes directly (a child)
                    # is then not taken for it (see Store._create).
                    new: Any = cls.__new__  # object.__new__ takes the arguments when __init__ is overridden
                    made: StoreT = new(cls, self, *args, **kwargs)
                    if isinstance(made, cls):
                        record[1] = made
                        init: Any = type(made).__init__
                        if init(made, self, *args, **kwargs) is not None:
                            raise TypeError("__init__() should return None")
                else:  # a metaclass of its own: the first store of cls made here is taken
                    made = cls(self, *args, **kwargs)
            except BaseException:
                # "Nothing is registered": a store the constructor made of
                # itself before it raised (after super().__init__) goes too.
                half_made = record[1]
                if half_made is not None and half_made.__dict__.get("_handle") is not None:
                    _discard(half_made)
                raise
            if getattr(made, "_dispatcher", None) is not self:
                if isinstance(made, cls) and made.__dict__.get("_handle") is not None:
                    _discard(made)  # a store of another dispatcher: raising, nothing stays registered
                raise TypeError(
                    f"register_store: {cls.__name__}(dispatcher) made no store of this dispatcher"
                    " (does its __init__ call super().__init__(dispatcher)?)"
                )
            if self._handle is None:  # closed meanwhile, maybe before it saw this store
                made.close()
                raise _closed("register_store")
            store = made
        finally:
            if marked:
                with self._registry_lock:
                    del creating[key]
                    # Not if closed by hand already (close() leaves the registry).
                    if store is not None and not store.closed:
                        self._replace_registry(lambda old: {**old, key: (cls, store)})
                    self._wait_registry.notify_all()
                # Only this thread reads or writes its own entry: no lock.
                frames = self._constructing.get(me)
                if frames and frames[-1] is record:
                    frames.pop()
                if not frames:
                    self._constructing.pop(me, None)
        return store

    def _check_cycle(self, cls: type, maker: int, me: int) -> None:
        """Raises RuntimeError when thread ``me`` waiting for ``cls``, which
        thread ``maker`` is making, would close a cycle: ``maker`` waits for
        a class whose maker waits ... for a class ``me`` is making. Each
        thread waits for one class at a time, so the chain is a path. The
        other threads of the cycle are marked: when the class each waits for
        fails, it raises too (see register_store). Under the registry lock."""
        chain = [cls]
        waiter: int | None = maker
        members: list[int] = []
        while waiter is not None and waiter not in members:
            members.append(waiter)
            wanted = self._waiting.get(waiter)
            if wanted is None:
                return  # the chain ends in a thread that is not waiting
            chain.append(wanted)
            waiter = self._creating.get(_id(wanted))  # None: made by no one now, the waiter will make it
            if waiter == me:
                names = " -> ".join(c.__name__ for c in (*chain, cls))
                message = (
                    f"register_store({cls.__name__}): a cycle of store classes across threads"
                    f" (each constructor registers the next: {names})"
                )
                for member in members:
                    self._cycle_failed[member] = message
                raise RuntimeError(message)

    def store(self, cls: type[StoreT], /) -> StoreT:
        """The store of class ``cls`` that :meth:`register_store` made. Any
        thread; it never waits (a class another thread is making now is not
        registered yet).

        :raises UnknownStoreError: no store of exactly that class is
            registered (never, or it was closed).
        :raises TypeError: ``cls`` is not a subclass of :class:`flux.Store`.
        :raises InvalidArgumentError: the dispatcher is closed.
        """
        _store_class(cls, "store")
        if self._handle is None:
            raise _closed("store")
        found = self._registry.get(_id(cls))  # one step under the GIL
        if found is None:
            raise UnknownStoreError(
                f"no {cls.__name__} is registered with dispatcher #{self._serial} (see register_store)", cls
            )
        return found[1]  # type: ignore[no-any-return]

    @property
    def stores(self) -> tuple[Store, ...]:
        """The registered stores, in the order their making finished (a store
        whose constructor registers its dependencies comes after them); empty
        once closed."""
        return tuple(store for _, store in self._registry.values())  # a copy no one changes (see __init__): no lock

    def _store_closed(self, store: Store) -> None:
        """``store`` was closed: it leaves the registry and the stores with
        an error emitted."""
        self._erring.pop(store._ident, None)
        with self._registry_lock:
            self._replace_registry(lambda old: {key: kept for key, kept in old.items() if kept[1] is not store})

    def _replace_registry(self, change: Callable[[dict[int, tuple[type, Any]]], dict[int, tuple[type, Any]]]) -> None:
        """Replaces the registry with ``change(registry)``. Under the
        registry lock -- which a finalizer that the collector runs while
        ``change`` allocates may take again on this thread, and replace the
        registry itself: then ``change`` is applied again, to its result."""
        while True:
            old = self._registry
            new = change(old)
            if self._registry is old:  # no allocation from here to the store: no collection
                self._registry = new
                return

    # -- dispatching -------------------------------------------------------

    def dispatch(self, payload: P) -> None:
        """Calls every registered callback with ``payload``, in registration
        order (those that :meth:`wait_for` runs early are not called again).

        ``payload`` may be any object; every callback receives that very
        object. The callbacks taking part are fixed when the dispatch starts.

        :raises BaseException: whatever a callback raised -- the same object,
            with its traceback; the rest of the dispatch was skipped and the
            dispatcher is ready for the next one. This holds wherever the
            exception escaped, even before the callback's body ran (a
            KeyboardInterrupt from a SIGINT that arrived while the thread was
            in C) -- and likewise for any Python code the library calls
            (a store's reduce, are_equal or listener, a group function, a
            destroy, a Trace hook: see
            ``_native.trampoline``) -- as long as ``sys.unraisablehook`` is
            the one this package chained in at import, or calls it.
        :raises AlreadyDispatchingError: called from inside a callback of this
            dispatcher, or waiting for another thread's dispatch would
            deadlock (see the class); the running dispatch goes on unharmed.
        :raises InvalidArgumentError: the dispatcher is closed.
        :raises NoMemoryError: another thread was dispatching and there was
            no memory to note this call's wait for it; nothing ran.
        """
        # The hot path: one ctypes call and a test. The payload crosses libflux
        # as its PyObject* (id() in CPython); the frame keeps it alive
        # meanwhile, and the trampoline turns the pointer back into the very
        # same object.
        handle = self._handle
        _headroom()  # the limit hit here, not in a trampoline (see headroom)
        try:
            try:
                # Keeping the GIL, so the callbacks it runs take no GIL handoff:
                # a try never waits for another thread's dispatch (whose Python
                # callbacks would need the GIL).
                status = _flux_try_dispatch(handle, _id(payload))
            except ArgumentError as exc:
                raise _argument_error(exc) from None
            if status:
                if status == _ALREADY_DISPATCHING:
                    # Nothing ran: another thread dispatches (or this one does,
                    # and flux_dispatch answers the same). Wait without the GIL.
                    # Unbound meanwhile, so an interrupt as it returns reads as
                    # one as libflux returned (see the except below).
                    del status
                    status = _flux_dispatch(handle, _id(payload))
                if status:
                    if self._erring and (status == _CALLBACK_FAILED or status == _TOO_DEEP):
                        # Only this call's own failed dispatch ends the errors it left:
                        # a refusal (from inside a running dispatch, say) ran nothing,
                        # and the running emit's error is not over.
                        _end_errors(self._erring)
                    # Raised here, so the traceback goes dispatch -> the callback.
                    error = self._dispatch_error(status)
                    try:
                        raise error
                    finally:
                        # This frame is in the traceback: a local naming the exception
                        # would make a cycle (exception -> traceback -> frame -> exception)
                        # that only the cycle collector frees, with every frame in it.
                        del error
            if _left_over.up:  # a flag: no call on the hot path (see _native.Flag)
                self._raise_left_over()
        except BaseException as exc:
            # Whatever escapes -- its own failure, or an interrupt anywhere after
            # libflux returned -- this call ran the queue unless libflux refused it
            # (refused within a running dispatch of this thread: the entries and
            # the queue's failures are the outer call's), so it takes what its
            # dispatches left with it (see _take_left).
            if self._pending or self._queued_errors:
                try:
                    ran = status == 0 or status == _CALLBACK_FAILED or status == _TOO_DEEP
                except UnboundLocalError:  # interrupted as libflux returned
                    # Whether it ran is not known here: is_dispatching cannot
                    # tell this thread's dispatch from another thread's that
                    # began as this one ended (the fallback's case). Taking is
                    # safe either way: _take_left takes only entries parked
                    # under this call (see _mine), none when it ran nothing.
                    ran = True
                if ran:
                    # Inline, not a helper: an interrupt can land as a Python
                    # function is entered, and would then skip the take.
                    try:
                        _take_left(self._pending, self._queued_errors, exc)
                    except BaseException as interrupt:  # cut short: the interrupt takes the rest
                        _take_left(self._pending, self._queued_errors, interrupt)
                        raise
            raise

    def _raise_left_over(self) -> None:
        """Raises what the dispatches this call ran left to its outermost
        call: an exception that escaped where C could not see it fail (see
        ``_native.escaped``: the dispatch failed all the same), else the
        first queued failure with no ``on_error``. The caller's ``except``
        takes the rest with it (see _take_left)."""
        if _left_over.up:
            escaped = _take_escaped(get_ident())
            if escaped is not None:
                try:
                    raise escaped
                finally:
                    del escaped  # no exception -> traceback -> frame cycle
        errors = self._queued_errors.get(get_ident())
        if errors:
            first = _mine(errors, 1)
            if first < len(errors):
                try:
                    raise errors[first][0]
                finally:
                    del errors  # no exception -> traceback -> frame cycle

    def enqueue(self, payload: P, on_error: Callable[[BaseException], object] | None = None) -> None:
        """Dispatches ``payload`` now when the dispatcher is idle; while a
        dispatch runs -- from a callback, or on another thread -- queues it
        and returns at once, never waiting. The thread running the dispatch
        dispatches every queued payload, in order, each a full dispatch of
        its own, before its own ``dispatch``/``enqueue`` returns.

        A failed dispatch of ``payload`` (the exception a callback raised,
        or :class:`~flux.TooDeepError` for a ``wait_for`` chain too deep) is
        given to ``on_error(exc)`` when passed, on the thread that ran it,
        and to nothing else. Otherwise the outermost ``dispatch``/``enqueue``
        call of that thread raises it once the queue has drained -- this
        very call when it dispatched ``payload`` at once -- the first
        failure, with any later ones attached as notes (``add_note``).
        Either way each failure is reported exactly once, never by a later
        call: one exception object raised by two failed dispatches is two
        failures (given to each one's ``on_error``, or raised for one and
        noted on itself for the other). An exception that cuts the call
        short in its place -- a KeyboardInterrupt -- carries them instead,
        chained or as notes.

        An exception that escapes Python code the library calls before its
        body ran (a KeyboardInterrupt from a signal that arrived in C, see
        :meth:`dispatch`) fails, besides the dispatch it landed in, every
        dispatch the thread drains from the queue after it, before the
        outermost call raises it: which callback ran last in which dispatch
        is not known to Python then (C may even have read the interrupted
        callback as a success), so every Python callback, reduce and
        listener refuses until that call. None of their Python code runs;
        each fails with a :class:`~flux.CallbackFailedError` naming the
        first that refused, reported as above. The interrupt itself is
        raised by that call alone, never given to an ``on_error``.

        :raises BaseException: as above.
        :raises TypeError: ``on_error`` is neither callable nor None
            (nothing is queued or dispatched).
        :raises InvalidArgumentError: the dispatcher is closed.
        :raises NoMemoryError: the queue could not grow.
        :raises AlreadyDispatchingError: in a child process forked while
            another thread dispatched this dispatcher: no dispatch will ever
            drain a queue there (nothing is queued or dispatched).
        """
        if on_error is not None and not callable(on_error):
            raise TypeError(f"on_error must be callable or None, not {type(on_error).__name__}")
        handle = self._handle
        if handle is None:
            raise _closed("enqueue")
        _enqueue_headroom()  # before the record: nothing to undo
        record = _Enqueued(
            payload, on_error, self._pending, self._queued_errors, self._located, self._erring, self._serial
        )
        address = _id(payload)
        # flux_enqueue has no out-parameter to say whether libflux ran, so
        # `context` does: still 0 when an interrupt was raised as _add
        # returned (only `added` has the slot then), set otherwise -- and
        # from its store to the call there is no call, so no interrupt.
        added = [0]
        context = 0
        try:
            try:
                try:
                    context = _add(record, None, added)
                    status = _flux_enqueue(handle, address, _DONE, context)
                except (ArgumentError, RecursionError) as exc:
                    # The call failed before libflux ran (at the recursion limit,
                    # calling it or converting its arguments): no done will let the
                    # record go, nor has one run (so the take below is skipped). Any
                    # other exception came after libflux returned, and a queued
                    # record must stay alive for its done.
                    if added[0]:
                        _native.drop(added[0], record, _native.UNTOUCHED)  # libflux never ran
                    if isinstance(exc, ArgumentError):
                        raise _argument_error(exc) from None
                    raise
                except BaseException:
                    if added[0] and not context:
                        _native.drop(added[0], record, _native.UNTOUCHED)  # libflux never ran
                    raise
                if status and status != _CALLBACK_FAILED and status != _TOO_DEEP:
                    # Refused: done has run and let the record go.
                    raise _closed("enqueue") if self._handle is None else self._error(status)
                if record.done:
                    # Dispatched here, so this call ran the queue (the payload's own
                    # failure, if any, is first in line).
                    self._raise_left_over()
            except BaseException as exc:
                # Dispatched here (done's status says so), this call takes what its
                # dispatches left even when an interrupt cuts it short, as libflux
                # returns or after: never a later call (see dispatch).
                if record.done and (self._pending or self._queued_errors) and record.status in _RAN:
                    try:
                        _take_left(self._pending, self._queued_errors, exc)
                    except BaseException as interrupt:  # cut short: the interrupt takes the rest
                        _take_left(self._pending, self._queued_errors, interrupt)
                        raise
                raise
        finally:
            # A failure's traceback reaches this frame (the callback's frame
            # was called from it), and this frame would reach the failure
            # through the record (its failure): a cycle, holding this
            # dispatcher, that only the cycle collector frees. The registry
            # keeps a queued record alive for its done.
            del record

    def _dispatch_error(self, status: int) -> BaseException:
        if status == _CALLBACK_FAILED or status == _TOO_DEEP:
            # Queued dispatches drained since took their own entries: what
            # is left is this dispatch's, the last one the one to raise.
            # Left in place: dispatch() takes them as the exception escapes,
            # whatever escapes (an interrupt before this returns included).
            ident = get_ident()
            entries = self._pending.get(ident)
            # Not an enclosing call's (see _mine): this call's native failure.
            exc = entries[-1][1] if entries and _mine(entries[-1:], 2, 5) == 0 else None
            if _left_over.up:
                # What escaped a trampoline of this call (an interrupt, in a
                # callback of this dispatch or of one it drained) comes out in
                # place of the failure, which goes with it (see _take_left).
                other = _take_escaped(ident)
                if other is not None:
                    exc = other
            if exc is not None:
                # The callback's own object, with its traceback (for a chain
                # too deep: the TooDeepError that unwound it).
                return exc
            # A native callback failed: there is no Python exception to re-raise.
        elif status == _INVALID_ARGUMENT and self._handle is None:
            return _closed("dispatch")
        return self._error(status)

    def wait_for(self, tokens: Iterable[Token | Store]) -> None:
        """From inside a callback: runs the callbacks of ``tokens`` that have
        not yet run in this dispatch, in the order given, then returns.

        A :class:`flux.Store` stands for its ``dispatch_token`` (a store of
        another dispatcher is a token of another dispatcher); stores and
        tokens may be mixed. Every token is checked before any callback runs;
        a token whose callback one of them unregisters is then skipped.

        :raises NotDispatchingError: not inside a dispatch of this dispatcher
            on this thread.
        :raises UnknownTokenError: a token is unregistered, belongs to another
            dispatcher, or was registered during this dispatch.
        :raises CircularDependencyError: a token's callback is running further
            up the stack (a cycle, or a callback waiting on itself).
        :raises BaseException: the exception of a callback that failed in this
            dispatch -- the same object ``dispatch`` will raise. The dispatch is
            aborted even if the caller catches it.
        :raises TypeError: ``tokens`` is not an iterable of :class:`Token`
            and :class:`flux.Store`.
        :raises InvalidArgumentError: the dispatcher is closed.
        """
        if type(tokens) is not list and type(tokens) is not tuple:
            tokens = list(tokens)
        if len(tokens) == 1:
            # The common case, and every link of a chain of waits: no list,
            # no array, the token's own memory.
            token = tokens[0]
            if type(token) is not Token or token._dispatcher != self._serial:
                return self._wait_for_foreign(tokens)
            handle = self._handle
            if handle is None:
                raise _closed("wait_for")
            _headroom()  # the limit hit here, not in a trampoline (see headroom)
            try:
                status = _flux_wait_for(handle, token._address, 1)
            except ArgumentError as exc:
                raise _argument_error(exc) from None
        else:
            serial = self._serial
            for token in tokens:
                if type(token) is not Token or token._dispatcher != serial:
                    return self._wait_for_foreign(tokens)
            values = [token._value for token in tokens]  # type: ignore[union-attr]  # all Tokens: checked above
            count = len(values)
            handle = self._handle
            if handle is None:
                raise _closed("wait_for")
            array = (c_uint64 * count)(*values) if count else None
            _headroom()
            try:
                status = _flux_wait_for(handle, addressof(array) if array is not None else None, count)
            except ArgumentError as exc:
                raise _argument_error(exc) from None
        if status:
            raise self._wait_error(status)
        if _left_over.up:
            # A callback run by this wait failed where C could not see it.
            escaped = _escaped.get(get_ident())
            if escaped is not None:
                try:
                    raise escaped
                finally:
                    del escaped  # no cycle through this frame (see dispatch)

    def _error(self, status: int) -> FluxError:
        """The error of this thread's call that just failed with ``status``,
        its token and cycle as this dispatcher's Tokens (see _located)."""
        return self._located(_status_error(status))

    def _located(self, error: FluxError) -> FluxError:
        """``error`` (a libflux error of a call on this dispatcher) with its
        token and cycle values made Tokens; a cycle's message written anew
        from them, each token with its registration's name. Values, never
        the library's wording."""
        value, cycle = error._values
        error.token = Token(self._serial, value) if value else None
        if isinstance(error, CircularDependencyError) and cycle:
            error.cycle = tuple(Token(self._serial, v) for v in cycle)
            named = [self._label(v) for v in cycle]
            if len(cycle) == 2 and cycle[0] == cycle[1]:
                text = f"token {named[0]} waits for itself"
            else:
                text = f"token {named[0]} waits for {named[1]}" + "".join(
                    f", which is waiting for {n}" for n in named[2:]
                )
            error.message = f"flux_wait_for: circular dependency: {text}"  # only a wait meets a cycle
            error.args = (error.message,)
        return error

    def _label(self, value: int) -> str:
        name = self._names.get(value)
        return f"{value} ({name})" if name else str(value)

    def _wait_error(self, status: int) -> BaseException:
        """What a wait that failed with ``status`` raises: the exception of
        the Python callback aborting this thread's dispatch, if there is one
        (not popped: dispatch() re-raises it when the abort reaches it,
        whether or not the waiting callback lets it propagate); else the
        libflux error -- also when the entries are those of the failed
        dispatch draining the queue, not this queued one's. Returned, not
        raised: no frame holding it is in its traceback (see dispatch)."""
        if status == _CALLBACK_FAILED or status == _TOO_DEEP:
            ident = get_ident()
            entries = self._pending.get(ident)
            if entries and _native.parked_under_caller(entries[-1][2], entries[-1][5]):
                return entries[-1][1]
            if _left_over.up and ident in _escaped:
                return _escaped[ident]
        return self._error(status)

    def _wait_for_foreign(self, tokens: list[Token | Store] | tuple[Token | Store, ...]) -> None:
        """wait_for with stores, or a token of another dispatcher, among
        ``tokens``. Stores are waited for by their tokens. A foreign token is
        an error, but reported in the header's order -- a closed dispatcher,
        not dispatching on this thread, an aborting dispatch (its exception),
        and only then the first bad token in the list. libflux makes every
        check but the foreign one; a foreign token reaches it as 0, a token
        it rejects without running anything, so no callback runs."""
        from .stores import Store  # flux.stores imports this module

        if any(isinstance(token, Store) for token in tokens):
            self.wait_for([token.dispatch_token if isinstance(token, Store) else token for token in tokens])
            return
        checked: list[Token] = []
        for token in tokens:
            if type(token) is not Token:
                raise TypeError(f"expected a flux.Token or a flux.Store, not {type(token).__name__}")
            checked.append(token)
        handle = self._handle
        if handle is None:
            raise _closed("wait_for")
        serial = self._serial
        values = [token._value if token._dispatcher == serial else 0 for token in checked]
        array = (c_uint64 * len(values))(*values)
        try:
            status = _flux_wait_for(handle, addressof(array), len(values))
        except ArgumentError as exc:
            raise _argument_error(exc) from None
        if status == _UNKNOWN_TOKEN and _last_error_values()[0] == 0:
            # The first token libflux rejected is a 0: a foreign one.
            first = next(token for token in checked if token._dispatcher != serial)
            raise self._foreign_error(first)
        raise self._wait_error(status)

    @property
    def is_dispatching(self) -> bool:
        """True exactly while a dispatch of this dispatcher runs, on any thread;
        False once closed."""
        # A closed dispatcher reaches libflux as NULL, which is never dispatching.
        try:
            return bool(_flux_is_dispatching(self._handle))
        except ArgumentError as exc:  # at the recursion limit (see _native.argument_error)
            raise _argument_error(exc) from None

    # -- lifetime ----------------------------------------------------------

    @property
    def closed(self) -> bool:
        """True once :meth:`close` has begun, and was not refused: from then
        on no store, group or dispatch can start (a close still running on
        another thread may not have closed every store yet)."""
        return self._handle is None

    def close(self) -> None:
        """Closes its stores and groups, unregisters every callback,
        releasing them, clears its observer (a :class:`flux.Trace` stops
        recording), and closes the dispatcher. Idempotent.

        From then on every method raises :class:`~flux.InvalidArgumentError`
        but these, which still answer: :attr:`closed` (True),
        :attr:`is_dispatching` (False), :attr:`stores` (``()``: every store
        is closed), :meth:`name_of` (None: every registration has ended),
        ``close()`` itself (does nothing -- or, after a close an exception
        cut short, such as a KeyboardInterrupt, finishes it) and a ``with``
        block, which enters and closes again.

        The native dispatcher itself is freed when this object is garbage
        collected: then no thread can still be inside a call on it, so closing
        while other threads use the dispatcher can never free memory under
        them, and the hot path needs no bookkeeping of calls in flight.

        A store or group made on another thread meanwhile is closed with it,
        or refused with :class:`~flux.InvalidArgumentError`. A dispatch on
        another thread racing this runs whole before the callbacks are
        unregistered (waited for), or raises
        :class:`~flux.InvalidArgumentError`: never with part of them (but
        for a dispatcher a store made outside this package keeps open, whose
        callbacks are unregistered one by one). Not so for the stores and
        groups: libflux closes a dispatcher only once they are gone, so they
        are closed one by one first, and such a dispatch that starts
        meanwhile (its call read the dispatcher before this began, or was
        waiting for another thread's dispatch) runs without the stores closed
        before it, and with the others, whose close waits for it.

        :raises AlreadyDispatchingError: a dispatch is running (from inside a
            callback, or on another thread); nothing is changed.
        """
        if self._handle is None and (self._unfinished is None or self._closer):
            return  # closed, or being closed by a close() still running
        me = get_ident()
        mine = False  # whether this call is the close() running (see _closer)
        try:
            with self._closing_lock:
                handle = self._handle
                if handle is None:
                    # A close cut short is finished here; one running (on
                    # another thread, or further up this one) is left to it.
                    handle = self._unfinished
                    if handle is None or self._closer:
                        return
                try:
                    dispatching = _flux_is_dispatching(handle)
                except ArgumentError as exc:
                    raise _argument_error(exc) from None
                if dispatching:
                    raise AlreadyDispatchingError("close: a dispatch of this dispatcher is running")
                # No call from marking this call the closer to clearing the
                # handle: from then on, whatever cuts this close short leaves
                # it unfinished, for the next close() to finish (or the
                # finalizer, which destroys what the native dispatcher holds).
                self._closer = me
                mine = True
                self._unfinished = handle
                # Cleared before anything is closed: no store or group can be
                # made from here on (see _closing_lock), and no dispatch can
                # start but one whose call read the handle before this.
                self._handle = None
                children = list(self._children.values())
            escaped = self._close_all(handle, children)
            self._unfinished = None  # everything is closed
        finally:
            if mine:
                self._closer = 0
        if escaped is not None:
            try:
                raise escaped
            finally:
                escaped = None  # no cycle through this frame (see dispatch)

    def _forget_child(self, child: Any) -> None:
        """Drops a closed store or group from this dispatcher's records, as
        its own close() does: again, for a close an exception cut short
        after the child was closed. Out of _children last: close() cut short
        before that finds the child again."""
        self._store_closed(child)  # a group is in neither table
        token = getattr(child, "_token", None)  # a store's (a group keeps none)
        if token is not None:
            self._names.pop(token.value, None)
        self._children.pop(child._ident, None)

    def _close_all(self, handle: int, children: list[Any]) -> BaseException | None:
        """close()'s work once the handle is cleared: every step may run
        again (a close cut short is finished by running them all again).
        Returns what escaped a destroy (see _native.trampoline), for close()
        to raise once everything is released."""
        escaped: BaseException | None = None
        for child in reversed(children):
            while True:
                refusal: FluxError | None = None
                try:
                    child.close()
                except FluxError as exc:
                    refusal = exc
                except BaseException as exc:  # noqa: BLE001 -- raised by close()
                    escaped = escaped or _argument_error(exc)  # closed or not: see below
                if child._handle is None:
                    self._forget_child(child)
                    break
                if refusal is not None and not isinstance(refusal, AlreadyDispatchingError):
                    # A store in a live group made outside this package: open
                    # again, as before (what closed so far stays closed).
                    self._unfinished = None
                    self._handle = handle
                    raise refusal
                # A dispatch whose call read the handle before it was cleared
                # started on another thread: no other can start now, so it is
                # waited for. It runs without the children closed before it
                # (libflux closes the dispatcher only once they are gone), but
                # the callbacks stay all or nothing (below).
                while _flux_is_dispatching(handle):
                    time.sleep(0.0002)
        # Closed in one step: a dispatch whose call read the handle before it
        # was cleared either started first, and is waited for (the close is
        # refused while it runs), or is refused -- never run with part of the
        # callbacks unregistered, as one could start between unregistrations.
        while True:
            try:
                _flux_dispatcher_close(handle)
            except AlreadyDispatchingError:
                time.sleep(0.0002)
                continue
            except InvalidArgumentError:
                break  # a store made outside this package keeps it open: below
            except BaseException as exc:  # noqa: BLE001 -- raised by close()
                escaped = escaped or _argument_error(exc)
            self._tokens.clear()
            return escaped
        # Unregistered one by one instead, and the observer cleared.
        for value in list(self._tokens):
            try:
                _flux_unregister(handle, value)
            except UnknownTokenError:  # unregistered concurrently, or by a close cut short
                pass
            except BaseException as exc:  # noqa: BLE001 -- raised by close()
                escaped = escaped or _argument_error(exc)
        self._tokens.clear()
        # Clearing the observer runs its destroy now: a flux.Trace started on
        # this dispatcher is let go, with its events and payloads.
        try:
            _flux_dispatcher_set_observer(handle, None, None, _native.NO_DESTROY)
        except BaseException as exc:  # noqa: BLE001 -- raised by close()
            escaped = escaped or _argument_error(exc)
        return escaped

    def __enter__(self) -> Dispatcher[P]:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._handle is None else "open"
        return f"<flux.Dispatcher #{self._serial} {state}>"

    # -- helpers -----------------------------------------------------------

    def _token_value(self, token: object) -> int:
        if type(token) is not Token:
            raise _not_a_token(token)
        if token._dispatcher != self._serial:
            raise self._foreign_error(token)
        return token._value

    def _owned_error(self, value: int) -> InvalidArgumentError:
        """libflux refused to unregister ``value`` on an open dispatcher, which
        it does only for a store's or a group's registration: say how to end
        it in Python terms."""
        token = Token(self._serial, value)
        for child in list(self._children.values()):
            if getattr(child, "_token", None) == token:
                return InvalidArgumentError(
                    f"unregister: token {value} is the dispatch token of {child!r}: end it with the store's close()",
                    token=token,
                )
        # Not one of this dispatcher's stores: a group's (a StoreGroup does
        # not keep its token), or a store made by native code.
        return InvalidArgumentError(
            f"unregister: token {value} belongs to a store group: end it with the group's release()"
            " (or, for a store made outside Python, flux_store_destroy())",
            token=token,
        )

    def _foreign_error(self, token: Token) -> UnknownTokenError:
        return UnknownTokenError(
            f"token {token._value} was issued by dispatcher #{token._dispatcher}, not by this one (#{self._serial})",
            token=token,
        )


#: The code of the calls that raise what their dispatches left (see _mine).
_CALL_CODES = frozenset({Dispatcher.dispatch.__code__, Dispatcher.enqueue.__code__})


def live_callbacks(dispatcher: Dispatcher[Any]) -> int:
    """How many registrations of ``dispatcher`` still hold a Python callback
    (registered, or unregistered during a dispatch that has not finished).
    For tests and debugging."""
    pending = dispatcher._pending
    return _native.live(lambda obj, extra: type(extra) is _native.Registration and extra.pending is pending)


def live_enqueued() -> int:
    """How many enqueued calls' records wait for their done. For tests."""
    return _native.live(lambda obj, extra: type(obj) is _Enqueued)
