"""The ctypes layer: finding libflux, declaring its functions, the trampolines.

Nothing here is public API. Three things live in this module:

* ``load()`` finds ``libflux.so`` -- ``$FLUX_LIBRARY``; a copy inside this
  package; the repository's ``build/lib``; the system loader -- and checks that
  its ABI version is the one this binding speaks.
* Every C function is declared once (argtypes, restype) and the ones that
  return a ``flux_status`` share one ``errcheck`` that raises the matching
  :class:`~flux.FluxError` carrying ``flux_last_error()``, read right away on
  the same thread. The two hot paths, ``flux_dispatch`` and ``flux_wait_for``,
  test the status inline instead and raise the same :func:`status_error`
  only on failure: ctypes calls an errcheck on every call, successful or not,
  and that Python call cost ~100 ns, a sixth of a whole dispatch to one
  callback (measured beside ``make bench``'s figures).
* ONE registry of live contexts and ONE ``flux_destroy`` trampoline, for
  every context this package hands libflux (a registration's, a store's, a
  listener's, a flux.Trampoline's, a trace's, an enqueued call's), and ONE
  ``flux_callback`` trampoline, all module-level and living as long as the
  process. A ``context`` is a small integer keyed into :data:`objects`;
  libflux's destroy callback -- run exactly once per context, whatever
  happens -- removes the entry. So a callback with no other reference stays
  alive exactly as long as its registration, and nothing leaks after
  ``unregister`` or ``close``.

``ctypes.CDLL`` releases the GIL for the duration of each C call, and the
trampolines take it again, so a thread blocked in ``flux_dispatch`` (waiting
for another thread's dispatch) does not hold up the interpreter. The calls
that never wait for another thread -- ``flux_try_dispatch``, which
``Dispatcher.dispatch`` calls first, ``flux_wait_for`` and ``flux_enqueue``
-- keep the GIL instead (:data:`holding_lib`): a crossing into a trampoline
then takes no GIL handoff.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import dis
import functools
import glob
import itertools
import os
import sys
import weakref
from collections.abc import Callable
from ctypes import (
    CFUNCTYPE,
    POINTER,
    ArgumentError,
    c_char_p,
    c_int,
    c_size_t,
    c_uint,
    c_uint64,
    c_void_p,
)
from threading import get_ident, local
from types import FrameType
from typing import Any

from ._version import __version__
from .errors import FluxError, error_for_status

__all__ = ["BINDING_ABI", "BINDING_MAJOR", "LIBRARY_ENV", "load"]

#: The libflux major version this binding is written against (flux.h's
#: FLUX_VERSION_MAJOR).
BINDING_MAJOR = int(__version__.split(".")[0])


def abi(major: int, minor: int) -> str:
    """The part of a version that names its ABI (flux.h, "Versioning"): the
    major number, or "0.MINOR" while it is 0."""
    return f"0.{minor}" if major == 0 else str(major)


#: The ABI this binding speaks: a library with another one cannot be loaded.
BINDING_ABI = abi(BINDING_MAJOR, int(__version__.split(".")[1]))

#: The environment variable that names the library to load.
LIBRARY_ENV = "FLUX_LIBRARY"

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
#: bindings/python/flux/../../../build/lib: the build tree of the repository
#: this package lives in, when it is run from the source tree.
_REPOSITORY = os.path.normpath(os.path.join(_PACKAGE_DIR, os.pardir, os.pardir, os.pardir))
_BUILD_TREE_LIBRARY = os.path.join(_REPOSITORY, "build", "lib", "libflux.so")
#: Whether this package is bindings/python/flux of a libflux checkout (an
#: installed copy's ../../.. is some unrelated directory: not worth naming).
_IN_SOURCE_TREE = os.path.isfile(os.path.join(_REPOSITORY, "include", "flux.h"))

_HOW_TO_BUILD = (
    "Build the library with `make lib` at the root of the libflux repository "
    "(it writes build/lib/libflux.so), install it with `make install`, or set "
    f"{LIBRARY_ENV} to the path of libflux.so."
)
_HOW_TO_POINT = (
    "If libflux is installed under a prefix the system loader does not search "
    "(anything but /usr and /usr/local after `ldconfig`), set "
    f"{LIBRARY_ENV}=PREFIX/lib/libflux.so, or add PREFIX/lib to /etc/ld.so.conf.d/ and run `ldconfig`. "
)


# --------------------------------------------------------------------------
# Loading
# --------------------------------------------------------------------------


#: Every function of libflux this package calls: a library of the right
#: version that lacks one (built from other sources, or cut down) is not
#: loaded. declare() refuses any other name, so this cannot fall behind.
SYMBOLS = (
    "flux_version",
    "flux_version_string",
    "flux_status_name",
    "flux_last_error",
    "flux_last_error_token",
    "flux_last_error_cycle",
    "flux_dispatcher_create",
    "flux_dispatcher_close",
    "flux_dispatcher_destroy",
    "flux_dispatcher_set_observer",
    "flux_register",
    "flux_unregister",
    "flux_dispatch",
    "flux_try_dispatch",
    "flux_wait_for",
    "flux_is_dispatching",
    "flux_enqueue",
    "flux_store_create",
    "flux_store_state",
    "flux_store_token",
    "flux_store_is_emitting",
    "flux_store_has_changed",
    "flux_store_emit_change",
    "flux_store_add_listener",
    "flux_store_remove_listener",
    "flux_store_listener_fail",
    "flux_store_destroy",
    "flux_store_group_create",
    "flux_store_group_release",
    "flux_store_group_token",
    "flux_closure_create",
    "flux_closure_code",
    "flux_closure_destroy",
    "flux_call",
)


def _known(name: str) -> str:
    if name not in SYMBOLS:  # load() checks only SYMBOLS: a library may lack it
        raise RuntimeError(f"{name} is not in flux._native.SYMBOLS")
    return name


def _open(path: str) -> tuple[ctypes.CDLL | None, str]:
    """Loads one candidate; returns (library, "") or (None, why it failed)."""
    try:
        lib = ctypes.CDLL(path)
    except OSError as exc:
        return None, str(exc)
    try:
        version = lib.flux_version
    except AttributeError:
        return None, "loads, but has no flux_version(): not libflux"
    version.argtypes = ()
    version.restype = c_uint
    number = version()
    major, minor = number // 10000, number // 100 % 100
    if abi(major, minor) != BINDING_ABI:
        found = f"{major}.{minor}.{number % 100}"
        return None, (f"is libflux {found}, but this binding needs ABI version {BINDING_ABI} (libflux {BINDING_ABI}.x)")
    # Found here, not as AttributeError from the declarations once loaded,
    # which would also end the search at a broken candidate.
    missing = [name for name in SYMBOLS if not hasattr(lib, name)]
    if missing:
        named = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
        return None, f"has flux_version() but not {named}: not a complete libflux"
    return lib, ""


def _package_copies() -> list[str]:
    names = glob.glob(os.path.join(glob.escape(_PACKAGE_DIR), "libflux.so*"))
    # libflux.so first, then libflux.so.MAJOR, then anything more specific.
    return sorted(names, key=lambda p: (len(os.path.basename(p)), p))


def load() -> tuple[ctypes.CDLL, str]:
    """Finds and loads libflux; returns the library and where it came from.

    Tries, in this order, and takes the first that loads, has the right ABI
    version (see :func:`abi`) and every function in :data:`SYMBOLS`: the
    path in ``$FLUX_LIBRARY`` (when set, it is the only place tried, so a
    wrong setting is reported rather than papered over);
    a copy inside this package (``flux/libflux.so*``); the repository's
    ``build/lib/libflux.so`` (only when this package is run from a libflux
    checkout); ``ctypes.util.find_library("flux")``.

    :raises ImportError: naming every place tried and why each failed, and how
        to build the library.
    """
    tried: list[str] = []

    explicit = os.environ.get(LIBRARY_ENV)
    if explicit:
        lib, why = _open(explicit)
        if lib is not None:
            return lib, explicit
        raise ImportError(
            f"flux: cannot load libflux from ${LIBRARY_ENV}={explicit!r}: {why}.\n"
            f"Unset {LIBRARY_ENV} to search the default places. {_HOW_TO_BUILD}"
        )
    tried.append(f"${LIBRARY_ENV}: not set")

    copies = _package_copies()
    if not copies:
        tried.append(f"a copy inside the package, {os.path.join(_PACKAGE_DIR, 'libflux.so*')}: none")
    for path in copies:
        lib, why = _open(path)
        if lib is not None:
            return lib, path
        tried.append(f"a copy inside the package, {path}: {why}")

    if not _IN_SOURCE_TREE:
        pass  # an installed package: there is no build tree to try
    elif os.path.exists(_BUILD_TREE_LIBRARY):
        lib, why = _open(_BUILD_TREE_LIBRARY)
        if lib is not None:
            return lib, _BUILD_TREE_LIBRARY
        tried.append(f"the build tree, {_BUILD_TREE_LIBRARY}: {why}")
    else:
        tried.append(f"the build tree, {_BUILD_TREE_LIBRARY}: does not exist")

    found = ctypes.util.find_library("flux")
    if found:
        lib, why = _open(found)
        if lib is not None:
            return lib, found
        tried.append(f'the system loader, ctypes.util.find_library("flux") -> {found}: {why}')
    else:
        tried.append('the system loader, ctypes.util.find_library("flux"): not found')

    raise ImportError(
        "flux: cannot find a usable libflux. Tried, in order:\n"
        + "".join(f"  - {line}\n" for line in tried)
        + ("" if _IN_SOURCE_TREE else _HOW_TO_POINT)
        + _HOW_TO_BUILD
    )


lib, library_path = load()


# --------------------------------------------------------------------------
# Declarations: every function once
# --------------------------------------------------------------------------

#: flux_callback: int (*)(void *context, const void *payload). A Python
#: dispatcher hands libflux the payload's PyObject* (a borrowed reference: the
#: dispatching frame holds the object), so the trampoline declares it as
#: py_object and receives the very object passed to dispatch().
CALLBACK = CFUNCTYPE(c_int, c_void_p, ctypes.py_object)
#: flux_destroy: void (*)(void *context)
DESTROY = CFUNCTYPE(None, c_void_p)


_read_last_error = getattr(lib, _known("flux_last_error"))
_read_last_error.argtypes = ()
_read_last_error.restype = c_char_p


def last_error() -> str:
    """This thread's message for its last failed libflux call ("" if none)."""
    raw = _read_last_error()
    return raw.decode("utf-8", "replace") if raw else ""


_read_last_error_token = getattr(lib, _known("flux_last_error_token"))
_read_last_error_token.argtypes = ()
_read_last_error_token.restype = c_uint64
_read_last_error_cycle = getattr(lib, _known("flux_last_error_cycle"))
_read_last_error_cycle.argtypes = (c_void_p, c_size_t)
_read_last_error_cycle.restype = c_size_t


def last_error_values() -> tuple[int, tuple[int, ...]]:
    """This thread's last failed call's token (0: none) and cycle (a
    circular dependency's tokens, else empty): the facts its message names,
    as values (flux_last_error_token(), flux_last_error_cycle())."""
    token = _read_last_error_token()
    length = _read_last_error_cycle(None, 0)
    if not length:
        return token, ()
    cycle = (c_uint64 * length)()
    _read_last_error_cycle(ctypes.addressof(cycle), length)
    return token, tuple(cycle)


def status_error(status: int) -> FluxError:
    """The FluxError for a non-zero status, carrying flux_last_error(); the
    token and cycle values wait in ``_values`` for the dispatcher, which alone
    can make them :class:`~flux.Token` objects (see Dispatcher._located).
    Make it right after the failed call, on the thread that made it."""
    # Message, token and cycle length first, with nothing between that the
    # cycle collector counts (bytes and ints are untracked): a collection
    # may run finalizers, whose failing libflux calls replace the record.
    cycle: tuple[int, ...] = ()
    try:
        raw = _read_last_error()
        token = _read_last_error_token()
        length = _read_last_error_cycle(None, 0)
        if length:
            tokens = (c_uint64 * length)()  # may collect: checked below
            copied = _read_last_error_cycle(ctypes.addressof(tokens), length)
            # Replaced meanwhile, the record's cycle is another call's: none.
            if copied == length and _read_last_error_token() == token and _read_last_error() == raw:
                cycle = tuple(tokens)
    except ArgumentError as exc:  # at the recursion limit, converting an argument
        raise argument_error(exc) from None
    error = error_for_status(status, raw.decode("utf-8", "replace") if raw else "")
    error._values = (token, cycle)
    return error


def argument_error(exc: BaseException) -> BaseException:
    """What a libflux call that failed before libflux ran raises: ctypes
    converts the arguments in Python code and wraps what that raised -- a
    RecursionError, at the interpreter's recursion limit -- in
    ArgumentError. Our arguments always convert, so it can only be that:
    the caller gets Python's own error for it. The one translation, used in
    ``except ArgumentError`` clauses (free when nothing is raised) by every
    call into libflux a caller can see fail that way."""
    if isinstance(exc, ArgumentError) and "RecursionError" in str(exc):
        return RecursionError(f"maximum recursion depth exceeded ({exc})")
    return exc


def _room_3() -> None:
    pass


def _room_2() -> None:
    _room_3()


def _room_1() -> None:
    _room_2()


def _four_frames() -> None:
    """Raises RecursionError unless four more Python frames fit (this one
    included): a chain of functions of no argument, the cheapest calls."""
    _room_1()


def _nested(depth: int) -> tuple[Any, ...]:
    return (int,) if depth <= 1 else (_nested(depth - 1),)


def _recurses(depth: int) -> Callable[[], object]:
    """A function that raises RecursionError unless ``depth`` more levels of
    recursion fit. Before 3.12 one limit counts Python frames and C
    recursion alike, and ``isinstance`` recurses in C once per level of a
    nested tuple of classes, each level cheaper than a Python call."""
    return functools.partial(isinstance, None, _nested(depth))


# A trampoline that libflux enters at the recursion limit fails before its
# ``try``, and so does the unraisable hook ctypes then calls, which loses the
# exception: the callback returns garbage to C (it is skipped, or its
# failure lost). So a call into libflux first checks there is room for them,
# and the limit is hit in its caller's frame: ``headroom()``, and for an
# enqueue, whose failure goes through its done trampoline too,
# ``enqueue_headroom()``. How much room: test_depth calls at every depth
# near the limit (callbacks, stores, listeners, groups, a trace), and these
# are one level above what it needs. Since 3.12 the limit counts Python
# frames alone; before, calls from C too (ctypes calling a trampoline, the
# hook, a group's or listener's failure reported through libflux).
headroom: Callable[[], object]
enqueue_headroom: Callable[[], object]
if sys.version_info >= (3, 12):
    headroom = enqueue_headroom = _four_frames
else:
    headroom, enqueue_headroom = _recurses(6), _recurses(8)


def described(obj: object, how: Callable[[object], str], unprintable: str) -> str:
    """``how(obj)`` (``repr`` or ``str``) for a note, or ``unprintable`` when
    that raises: a note is cosmetic, and an exception out of it would
    replace the one it goes on (an interrupt lost with it)."""
    try:
        return how(obj)
    except Exception:  # noqa: BLE001 -- see above
        return unprintable


def add_note(exc: BaseException, note: str) -> None:
    """``exc.add_note(note)``. Python 3.10, which the package supports,
    has no ``add_note``: there the note goes on the same list,
    ``__notes__``, so a caller finds it where 3.11 would put it."""
    add = getattr(exc, "add_note", None)
    if add is not None:
        add(note)
        return
    notes = getattr(exc, "__notes__", None)
    if notes is None:
        exc.__notes__ = notes = []
    notes.append(note)


def raise_outcome(error: BaseException | None) -> None:
    """What an errcheck raises (see :func:`_check`), for a call whose error
    was read right after it returned -- before releasing what the call let
    go of, whose finalizers may call libflux and overwrite
    ``flux_last_error()``: first what escaped a trampoline on this thread,
    then ``error``, if any."""
    if left_over.up:
        raise_escaped()
    if error is not None:
        try:
            raise error
        finally:
            error = None  # no exception -> traceback -> frame -> exception cycle


def _check(status: int, func: Any, args: tuple[Any, ...]) -> int:
    """errcheck for every function returning flux_status but the hot two.
    First raises what escaped a trampoline this call ran (a destroy: see
    :func:`trampoline`): this call is the outermost one."""
    if left_over.up:
        raise_escaped()
    if status:
        raise status_error(status)
    return status


def declare(name: str, restype: Any, argtypes: tuple[Any, ...], errcheck: bool = False) -> Any:
    fn = getattr(lib, _known(name))
    fn.argtypes = argtypes
    fn.restype = restype
    if errcheck:
        fn.errcheck = _check
    return fn


def declare_raw(name: str, restype: Any, argtypes: tuple[Any, ...], library: ctypes.CDLL | None = None) -> Any:
    """A second declaration of ``name`` with no errcheck, for a caller that
    must record what libflux did before anything can raise (an interrupt as
    an errcheck is entered, or what escaped on this thread, which the
    errcheck raises first). ``lib[name]`` makes a function object of its
    own; ``lib.name``, which :func:`declare` sets up, is shared. From
    ``library`` when given (see :data:`holding_lib`)."""
    fn = (library or lib)[_known(name)]
    fn.argtypes = argtypes
    fn.restype = restype
    return fn


#: The library again, as ctypes.PyDLL: its functions keep the GIL through
#: the call, so the trampolines the call runs need not take it back -- a
#: GIL handoff each, the larger part of a crossing's cost. Only for calls
#: that cannot wait for another thread: holding the GIL there, the thread
#: it waits for could never run its Python callbacks.
holding_lib = ctypes.PyDLL(library_path)


def declare_holding(name: str, restype: Any, argtypes: tuple[Any, ...]) -> Any:
    """A declaration of ``name`` called holding the GIL, with no errcheck
    (see :data:`holding_lib`)."""
    return declare_raw(name, restype, argtypes, holding_lib)


flux_dispatcher_create = declare("flux_dispatcher_create", c_void_p, ())
flux_dispatcher_destroy = declare("flux_dispatcher_destroy", c_int, (c_void_p,), True)
flux_dispatcher_close = declare("flux_dispatcher_close", c_int, (c_void_p,), True)
#: The same function with no errcheck, for the Dispatcher's finalizer: it must
#: not raise what escaped on this thread, which the outermost call raises.
flux_dispatcher_destroy_raw = declare_raw("flux_dispatcher_destroy", c_int, (c_void_p,))
flux_register = declare("flux_register", c_int, (c_void_p, CALLBACK, c_void_p, DESTROY, POINTER(c_uint64)), True)
flux_unregister = declare("flux_unregister", c_int, (c_void_p, c_uint64), True)
#: flux_register with no errcheck, for Dispatcher.register: it records the
#: registration before anything can raise (an interrupt as the errcheck is
#: entered would leave it registered and unknown to close()).
flux_register_raw = declare_raw("flux_register", c_int, (c_void_p, CALLBACK, c_void_p, DESTROY, POINTER(c_uint64)))
# The payload is declared void* and passed as id(payload): in CPython that is
# the object's address, and c_void_p's int conversion is the cheapest path
# ctypes has (py_object's from_param costs an isinstance check through the
# metaclass and more on every call).
# No errcheck on these two: callers test the status (see the module docstring).
flux_dispatch = declare("flux_dispatch", c_int, (c_void_p, c_void_p))
#: Tried first, keeping the GIL: it never waits (flux.h).
flux_try_dispatch = declare_holding("flux_try_dispatch", c_int, (c_void_p, c_void_p))
# The token array as a plain address: callers pass a token's own cell or an
# array they keep alive across the call (an int converts fastest). Called
# holding the GIL: a wait never waits for another thread (see above).
flux_wait_for = declare_holding("flux_wait_for", c_int, (c_void_p, c_void_p, c_size_t))
flux_is_dispatching = declare("flux_is_dispatching", c_int, (c_void_p,))
#: flux_done_fn: void (*)(void *context, void *payload, flux_status status).
#: Dispatcher.enqueue's context is the call's record's slot in the registry
#: (see objects), which done frees.
DONE = CFUNCTYPE(None, c_void_p, c_void_p, c_int)
# No errcheck: Dispatcher.enqueue tests the status (a failed own dispatch
# re-raises the callback's exception, as dispatch does).
#: Called holding the GIL: an enqueue never waits (flux.h).
flux_enqueue = declare_holding("flux_enqueue", c_int, (c_void_p, c_void_p, DONE, c_void_p))


class Observer(ctypes.Structure):
    """struct flux_observer (FLUX_OBSERVER_VERSION 1)."""

    _fields_ = [
        ("version", c_int),
        # The payload is a PyObject* for every dispatch a Python Dispatcher makes.
        ("dispatch_begin", CFUNCTYPE(None, c_void_p, ctypes.py_object)),
        ("dispatch_end", CFUNCTYPE(None, c_void_p, ctypes.py_object, c_int)),
        ("callback_begin", CFUNCTYPE(None, c_void_p, c_uint64)),
        ("callback_end", CFUNCTYPE(None, c_void_p, c_uint64, c_int)),
        ("wait_for", CFUNCTYPE(None, c_void_p, c_uint64, POINTER(c_uint64), c_size_t)),
    ]


flux_dispatcher_set_observer = declare(
    "flux_dispatcher_set_observer", c_int, (c_void_p, POINTER(Observer), c_void_p, DESTROY), True
)
#: The same function with no errcheck, for flux.Trace.start: libflux may
#: have made the trace the observer when what escaped on this thread (the
#: replaced trace's destroy, say) is raised, so it records that first.
flux_dispatcher_set_observer_raw = declare_raw(
    "flux_dispatcher_set_observer", c_int, (c_void_p, POINTER(Observer), c_void_p, DESTROY)
)
flux_status_name = declare("flux_status_name", c_char_p, (c_int,))
flux_version = declare("flux_version", c_uint, ())
flux_version_string = declare("flux_version_string", c_char_p, ())

#: The loaded library's flux_version() and flux_version_string(), read once:
#: like library_path, facts about the library this process loaded.
library_version: int = int(flux_version())
library_version_string: str = (flux_version_string() or b"").decode("ascii", "replace")


# --------------------------------------------------------------------------
# The registry of live contexts
# --------------------------------------------------------------------------

# Every context this package hands libflux -- a registration's, a store's, a
# listener's or group's, a flux.Trampoline's, a trace's, an enqueued call's
# -- is a slot index into two parallel lists: the object the context stands
# for, and a companion its trampolines need beside it. A list indexed by a
# small int is the cheapest keyed lookup CPython has (cheaper than a dict
# lookup by the same int), and it stays small: slots whose context ended are
# reused, newest first -- which also keeps a context a small cached int, so
# converting it costs no allocation. A context ends exactly once: libflux
# runs its destroy (the one :func:`_on_destroy` below), or an enqueued
# call's done, which frees its slot the same way.
#: context -> what it stands for (None: a free slot): a registration's
#: callable, a store's weak reference, a listener's or group's function, a
#: flux.Trampoline's entry, a flux.Trace, an enqueued call's record.
objects: list[Any] = [None]  # slot 0 unused: context 0 is NULL
#: context -> its companion: a registration's :class:`Registration`, a
#: store's held states, a listener's or group's pending table and native
#: dispatcher; None for the others.
extras: list[Any] = [None]
free_contexts: list[int] = []
#: The next slot never made: slots are numbered by one call of this.
_next_slot = itertools.count(len(objects)).__next__
# No lock: CPython runs a signal handler, and switches threads, only at a
# call, a backward jump or a function's entry. The steps below that must be
# one step -- taking a slot and filling it, freeing one -- make no call, so
# neither an interrupt nor another thread can come between them (nor a
# collection: they allocate no object the cycle collector tracks).
#: Calls of a trampoline with a context that is not registered: never happens
#: unless the library breaks its contract (tests assert these stay 0).
stray = {"callback": 0, "destroy": 0}


# weakref.finalize imports atexit and registers with it when the first one
# is made. Made first by a Trampoline or Dispatcher, that import ran inside
# the constructor, where an interrupt could land in importlib's module-lock
# weakref callback and be printed as unraisable, lost. Done here, at import.
weakref.finalize(FluxError, int).detach()


class Unshareable:
    """A base for what owns native state (a dispatcher, a store, a group, a
    trace's observer, a trampoline's closure): a copy would share it, and
    the original's close() or finalizer would free it under the copy."""

    __slots__ = ()

    def __reduce__(self) -> Any:
        raise TypeError(f"{type(self).__name__} owns native state: it cannot be copied or pickled")


class Registration:
    """A registration's companion in the registry: its dispatcher's
    pending-exception table (thread ident -> the exceptions its callbacks
    raised on that thread), and where its name is kept -- the dispatcher's
    names, under the token value, set once flux_register returned. The
    destroy drops the name: traces and cycle messages find it until the
    registration ends, which for one unregistered during a dispatch is at
    that dispatch's end."""

    __slots__ = ("names", "pending", "value")

    def __init__(self, pending: Pending, names: dict[int, str]) -> None:
        self.pending = pending
        self.names = names
        self.value = 0  # no token yet


def add(obj: object, extra: object = None, into: list[int] | None = None) -> int:
    """Puts ``obj`` (and its companion) in the registry; returns its context
    (never 0), for a call that hands it to libflux with the destroy below.

    From taking the slot to the return there is no call, so no interrupt:
    one cannot leave a filled slot that no caller knows of, nor a slot taken
    and never filled. But a signal that arrives meanwhile is raised as this
    returns, before the caller has the context: so the context is also
    written to ``into[0]``, with no call in between, where the caller finds
    it (to :func:`drop` it) whatever is raised. The caller makes no call
    between this and handing the context over, or records it first."""
    while not free_contexts:  # another thread may take the slot made
        # The slot's number comes from one call, so no two takers get the
        # same: read from the list's length after growing it (calls, where
        # another thread or a signal handler's add may run), two adds
        # could each make a slot and both hand out the second. Each then
        # grows both lists past its slot -- maybe past another's too, which
        # that one's loop then skips -- before freeing it. An interrupt here
        # can leave a slot made but never freed: an unused None, which
        # nothing reads.
        slot = _next_slot()
        while len(extras) <= slot:
            extras.append(None)
        while len(objects) <= slot:
            objects.append(None)
        free_contexts.append(slot)
    context = free_contexts[-1]
    del free_contexts[-1]
    extras[context] = extra
    objects[context] = obj
    if into is not None:
        into[0] = context
    return context


#: What a call that hands libflux a context finds in its out-parameter when
#: libflux never ran (an interrupt, or a failed argument conversion, before
#: it): every such function of libflux writes the out-parameter first (NULL
#: or 0 on failure), and neither a token nor a pointer is ever this.
UNTOUCHED = 2**64 - 1 if ctypes.sizeof(c_void_p) == 8 else 2**32 - 1


def drop(context: int, obj: object, out: int | None) -> None:
    """Empties the slot :func:`add` filled for ``obj`` when libflux never took
    it, which ``out`` -- the out-parameter's value after the call, preset to
    :data:`UNTOUCHED` -- tells: libflux wrote it, so it ran, and it destroyed
    the context itself when it failed (the slot may already serve another
    call that added the same object)."""
    if out == UNTOUCHED and objects[context] is obj:
        _on_destroy(context)


def live(test: Callable[[Any, Any], bool]) -> int:
    """How many live contexts pass ``test(object, extra)``. For tests."""
    return sum(1 for obj, extra in zip(list(objects), list(extras)) if obj is not None and test(obj, extra))


# --------------------------------------------------------------------------
# Exceptions that escape a trampoline
# --------------------------------------------------------------------------

#: thread ident -> an exception that escaped one of the library's
#: trampolines, where no ``try`` of ours could catch it: raised as the
#: trampoline is entered (a KeyboardInterrupt from a SIGINT that arrived
#: while the thread was in C, a RecursionError from the call) or while it
#: handles another exception. ctypes hands such an exception to
#: sys.unraisablehook and returns whatever happened to be in the result
#: slot to C; :func:`_unraisable_hook` keeps it here instead. The outermost
#: call raises it: dispatch, wait_for and enqueue themselves, any other call
#: through its errcheck (:func:`_check`). Meanwhile every later trampoline of
#: that thread that can fail fails at once, so the dispatch stops. A weakref
#: callback reports what escapes it the same way, and flux/stores.py's one
#: (an owner-bound listener's removal) is marked like a trampoline to be
#: kept here too. Added to by :func:`park_escaped`, taken by
#: :func:`take_escaped`, which keep :data:`left_over` up while it has any.
escaped: dict[int, BaseException] = {}


class Flag:
    """What the hot paths test before a dict: an attribute that is True or
    False, which CPython tests with no call (a dict's truth is a call: per
    callback and per dispatch, 3-5% of a dispatch of Python callbacks)."""

    __slots__ = ("queued", "up")

    def __init__(self) -> None:
        self.up = False
        self.queued = 0


#: Up whenever a thread may have something left for its outermost call to
#: raise: an entry in :data:`escaped`, or failures of queued dispatches with
#: no on_error (flux/dispatcher.py, which counts the threads that have some in
#: ``queued``). Put up (and counted) before either is recorded, and let
#: down only where both are seen empty, with no call between that test and
#: the store (:func:`lower_left_over`): neither an interrupt, a finalizer
#: nor another thread ever sees an entry with the flag down.
left_over = Flag()


_this_thread = local()


def park_escaped(ident: int, exc: BaseException) -> None:
    """Keeps ``exc`` as what escaped on thread ``ident`` (this thread), until
    it is taken or the thread ends; the first counts."""
    left_over.up = True
    escaped.setdefault(ident, exc)
    # After: an interrupt landing in these calls must not lose exc.
    if getattr(_this_thread, "end", None) is None:
        _this_thread.end = _ThreadEnd(ident)


# Both bind what they use as defaults: _ThreadEnd's finalizer calls them,
# and may run as the interpreter shuts down.
def lower_left_over(escaped: dict[int, BaseException] = escaped, left_over: Flag = left_over) -> None:
    """Lets :data:`left_over` down when nothing is left on any thread."""
    if not escaped and not left_over.queued:
        left_over.up = False


def take_escaped(
    ident: int, escaped: dict[int, BaseException] = escaped, lower: Callable[[], None] = lower_left_over
) -> BaseException | None:
    """Takes what escaped on thread ``ident``, if anything."""
    exc = escaped.pop(ident, None)
    lower()
    return exc


class _ThreadEnd:
    """Kept in a thread's own storage once the thread parked something: it
    goes with the thread (at its end; a foreign thread's after each call
    from C), taking what is left of that thread's -- which no call of it can
    raise any more, and a later thread given the same ident (pthread_t
    values are reused) would raise as its own."""

    __slots__ = ("ident",)

    def __init__(self, ident: int) -> None:
        self.ident = ident

    def __del__(self, take: Callable[[int], BaseException | None] = take_escaped) -> None:
        take(self.ident)


#: id(function) -> (the function, what to run when an exception escapes it
#: before its work began), for every function the library hands C as a
#: trampoline.
_trampolines: dict[int, tuple[Callable[..., Any], Callable[..., Any] | None]] = {}
# What a function runs before its body, where an interrupt is checked for.
_PROLOGUE = frozenset({"RESUME", "MAKE_CELL", "COPY_FREE_VARS", "NOP", "EXTENDED_ARG", "CACHE"})
#: code object -> the offset before which an interrupted frame has done
#: nothing that must not be done twice: its body's first instruction, or
#: for a function whose only effect is its last call, that call's first
#: instruction.
_unstarted: dict[Any, int] = {}
#: The code of every trampoline: what marks where libflux called Python.
_trampoline_codes: set[Any] = set()
#: The code of every function C calls that the unraisable hook handles (the
#: trampolines, those in interrupts_parked) -> that function (see _called).
callbacks_by_code: dict[Any, Callable[..., Any]] = {}


def _last_call(code: Any) -> int:
    """The offset of the instruction that begins ``code``'s last call: an
    interrupt is raised only at a call (and at a backward jump, RESUME),
    after the called function returned, and a frame interrupted there
    reports that call's own first instruction (PRECALL on 3.11)."""
    offset = None
    previous = None
    for i in dis.get_instructions(code):
        if i.opname.startswith("CALL") and not i.opname.startswith("CALL_INTRINSIC"):
            offset = previous.offset if previous is not None and previous.opname == "PRECALL" else i.offset
        previous = i
    if offset is None:
        raise TypeError(f"{code.co_name} makes no call")
    return offset


def _interrupted_before_work(fn: Callable[..., Any], tb: Any) -> bool:
    """Whether the traceback entry ``tb`` is ``fn``'s frame, stopped before
    its work began: nothing of ``fn`` that must not be done twice ran."""
    return tb is not None and tb.tb_frame.f_code is fn.__code__ and tb.tb_lasti < _unstarted[fn.__code__]


#: What a function must not begin with, to be interrupted as it is entered
#: before 3.11: a pending signal is not handled before these opcodes, and
#: the first check after one may come after the function's work began (at
#: a jump taken, on 3.10), where an interrupt is not made up for.
_ENTERED_UNCHECKED = (
    frozenset({"SETUP_FINALLY", "SETUP_WITH", "SETUP_ASYNC_WITH", "BEFORE_ASYNC_WITH", "YIELD_FROM"})
    if sys.version_info < (3, 11)
    else frozenset()
)


#: Before 3.11 a pending signal is also handled mid-body (3.10: at a jump
#: taken), not only at calls: there a
#: function's work begins at its first instruction with an effect outside
#: its frame -- a store or delete, or a call.
_EFFECTS = (
    frozenset({"STORE_SUBSCR", "STORE_ATTR", "STORE_GLOBAL", "DELETE_SUBSCR", "DELETE_ATTR", "DELETE_GLOBAL"})
    if sys.version_info < (3, 11)
    else frozenset()
)


def _first_effect(code: Any) -> int:
    """The offset of ``code``'s first instruction with an outside effect
    (see :data:`_EFFECTS`)."""
    return next(i.offset for i in dis.get_instructions(code) if i.opname in _EFFECTS or i.opname.startswith("CALL"))


def trampoline(
    on_escape: Callable[..., Any] | None = None, rerun: bool = False, effect_is_last_call: bool = False
) -> Callable[[Any], Any]:
    """Marks a function handed to C as a callback, for the one rule every
    trampoline follows: an exception that escapes it is not printed but kept
    in :data:`escaped`, and comes out of the outermost call on that thread.

    When the exception escaped before the function's work began (a signal
    that arrived while the thread was in C, or -- for ``effect_is_last_call``,
    a function that only computes until its last call, which is all it does
    -- a signal anywhere before that call), ``on_escape`` is then called with
    the same arguments, still inside the C call -- with ``rerun``, the
    function itself: for bookkeeping that must happen (a destroy, a trace
    event); C got no result from the call. An exception that
    interrupts ``on_escape`` before its work began makes it run again;
    anything else it raises is dropped (the first exception is the one the
    outermost call raises).

    A function whose work is more than its last call does its must-happen
    bookkeeping before its first call: an interrupt cannot land between two
    instructions that make no call."""

    def mark(fn: Any) -> Any:
        recover = fn if rerun else on_escape
        for f in (fn, recover) if recover is not None else (fn,):
            first = next(i for i in dis.get_instructions(f) if i.opname not in _PROLOGUE)
            if first.opname in _ENTERED_UNCHECKED:
                raise TypeError(f"{f.__qualname__} begins with {first.opname}: an interrupt on entry would be missed")
            body = _first_effect(f.__code__) if _EFFECTS else first.offset
            _unstarted[f.__code__] = _last_call(f.__code__) if effect_is_last_call else body
        _trampolines[id(fn)] = (fn, recover)
        _trampoline_codes.add(fn.__code__)
        callbacks_by_code[fn.__code__] = fn
        return fn

    return mark


def raise_escaped() -> None:
    """Raises, once, what escaped a trampoline on this thread, if anything."""
    exc = take_escaped(get_ident())
    if exc is not None:
        try:
            raise exc
        finally:
            exc = None  # no exception -> traceback -> frame -> exception cycle


_RETRIES = 1000  # on_escape interrupted this often in a row: give up


def _recover(fn: Callable[..., Any], on_escape: Callable[..., Any], tb: Any) -> None:
    # The trampoline's own frame is the traceback's first: the exception
    # began in it (ctypes called it from C). Its arguments are its locals.
    if not _interrupted_before_work(fn, tb):
        return  # its body had begun: what it did is not known, do not redo it
    code = fn.__code__
    local = tb.tb_frame.f_locals
    args = [local[name] for name in code.co_varnames[: code.co_argcount]]
    for _ in range(_RETRIES):
        try:
            on_escape(*args)
            return
        except BaseException as exc:  # noqa: BLE001 -- kept or dropped below
            # Interrupted again before its work began: it must still be done.
            # Midway: not redone (what it did is not known).
            inner = exc.__traceback__.tb_next if exc.__traceback__ is not None else None
            if not _interrupted_before_work(on_escape, inner):
                return


@trampoline()
def _on_callback(context: int, payload: object) -> int:
    # The hot path: one list lookup and the call. An exception -- any
    # BaseException, KeyboardInterrupt too -- is parked for the thread that
    # runs the dispatch and turned into a non-zero return, which aborts it.
    if left_over.up and get_ident() in escaped:
        # An earlier callback of this dispatch failed where it could not
        # say so (its C result may have read as success): stop here.
        return 1
    try:
        objects[context](payload)
        return 0  # here, not after the handler: no jump over it
    except BaseException as exc:  # noqa: BLE001 -- every exception aborts the dispatch
        try:
            record = extras[context]
        except (IndexError, TypeError):  # not a context of ours (NULL: None)
            record = None
        if type(record) is not Registration or objects[context] is None:
            stray["callback"] += 1
        else:
            park_exception(record.pending, payload, exc, record.value)
        return 1


#: The payload of an exception parked where the payload is not known (a
#: store's listener or group function): it belongs to the dispatch running.
UNKNOWN_PAYLOAD = object()


#: The caller each generator or coroutine frame had on a stack, when it
#: was seen there (None: it had none). Such a frame loses its f_back when
#: it suspends (and takes its next resumer's), so a walk up f_back from a
#: frame made under it follows these instead (see :func:`ran_under`).
Pins = dict[FrameType, FrameType | None]

#: A pending-exception table: thread ident -> the exceptions parked on that
#: thread, oldest first, each as (payload, exception, the trampoline frame
#: that parked it, whether it began a failed dispatch's entries, the token
#: libflux names for it when it fails the dispatch -- the callback's, or for
#: a reduce or listener its store's; 0 when not known: a group's; and the
#: Pins of that frame's stack as it parked it, None when it had no generator
#: or coroutine frame).
Entry = tuple[object, BaseException, FrameType, bool, int, Pins | None]
Pending = dict[int, list[Entry]]

#: co_flags of the code whose frames suspend: CO_GENERATOR, CO_COROUTINE,
#: CO_ASYNC_GENERATOR (inspect's values; inspect itself is a costly import).
_SUSPENDS = 0x20 | 0x80 | 0x200


def pins_of(frame: FrameType | None) -> Pins | None:
    """The Pins of the stack from ``frame`` to its root, which is running
    (each generator frame on it is executing: its f_back is its caller)."""
    pins: Pins | None = None
    while frame is not None:
        back = frame.f_back
        if frame.f_code.co_flags & _SUSPENDS:
            if pins is None:
                pins = {}
            pins[frame] = back
        frame = back
    return pins


def park_exception(table: Pending, payload: object, exc: BaseException, token: int) -> None:
    """Keeps ``exc`` for the thread running the dispatch, with its payload
    and token, oldest first: a dispatch that failed may drain queued
    dispatches (flux_enqueue) before it returns, and each queued one's done
    takes only its own entries. Called by a trampoline, on failure only.

    A failed dispatch's later entries come from the callbacks that waited
    for the failed one, as its failure unwinds them: each parked by a
    trampoline further up the stack than the one before (libflux starts no
    callback once a dispatch is aborting). An entry parked anywhere else
    begins the entries of another dispatch -- a queued one, whose payload
    and exception may well be the outer dispatch's own."""
    frame = sys._getframe(1)  # the trampoline's
    ident = get_ident()
    entries = table.get(ident)
    if entries is None:
        pins = pins_of(frame)
        table[ident] = [(payload, exc, frame, True, token, pins)]
        return
    # A few frames up from the last entry's when it continues that dispatch
    # (whose pins then hold this stack's); to the stack's root, once per
    # failed dispatch, when it does not.
    last = entries[-1]
    if ran_under(last[2].f_back, frame, last[5]):
        entries.append((payload, exc, frame, False, token, last[5]))
    else:
        pins = pins_of(frame)
        entries.append((payload, exc, frame, True, token, pins))


def ran_under(frame: FrameType | None, ancestor: FrameType | None, pins: Pins | None = None) -> bool:
    """Whether ``ancestor`` is ``frame`` or one of its callers (frames keep
    their callers after they return; a generator's or coroutine's, by
    ``pins``, as it was then: see :data:`Pins`)."""
    while frame is not None and frame is not ancestor:
        frame = pins[frame] if pins is not None and frame in pins else frame.f_back
    return frame is not None


def own_entries(entries: list[Entry]) -> int:
    """Where the entries of the last failed dispatch that parked any begin."""
    start = len(entries) - 1
    while start > 0 and not entries[start][3]:
        start -= 1
    return start


def parked_under_caller(frame: FrameType, pins: Pins | None) -> bool:
    """Whether an entry parked by the trampoline ``frame`` belongs to the
    dispatch the caller runs in: whether ``frame`` ran under the innermost
    trampoline of this thread's stack (the callback, reduce or listener
    whose wait failed). A failure further down, in this dispatch, did; the
    failed dispatch draining the queue had unwound before the queued one
    began, so its entries did not. Called on failure only."""
    here: FrameType | None = sys._getframe(1)
    while here is not None and here.f_code not in _trampoline_codes:
        here = here.f_back
    return here is not None and ran_under(frame, here, pins)


@trampoline(rerun=True)
def _on_destroy(context: int | None) -> None:
    # The one destroy of every context in the registry. libflux runs it
    # exactly once per context: for a registration on unregister (at the end
    # of the running dispatch if there is one) or dispatcher destroy, for a
    # listener on its removal, and so on -- or at once when the call that
    # was handed the context fails. No call until the slot is free (see
    # free_contexts; an interrupt before the body makes this run again).
    obj = extra = None  # not `try` first: see _ENTERED_UNCHECKED
    try:
        obj = objects[context]  # type: ignore[index]
        extra = extras[context]  # type: ignore[index]
    except (IndexError, TypeError):  # not a context of ours (NULL: None)
        pass
    # Every branch comes before the first effect (the stray count's store):
    # 3.10 also handles a pending signal at a conditional jump taken, and
    # one taken between emptying the slot and freeing it lost the slot's
    # number for good (interrupted after its first effect, this is not run
    # again). Before it, an interrupt makes this run again.
    registration = extra.__class__ is Registration
    # Not a registration: a dict of its own, not one shared (another thread's
    # destroy may set and delete the same key between these two of ours).
    names: dict[int, str] = extra.names if registration else {}  # type: ignore[union-attr]
    value: int = extra.value if registration else 0  # type: ignore[union-attr]
    if obj is None:
        stray["destroy"] += 1
        return
    # From here to the freeing call: neither a call nor a jump.
    objects[context] = None  # type: ignore[index]
    extras[context] = None  # type: ignore[index]
    # A registration ends here, not at flux_unregister (during a dispatch,
    # it ends with the dispatch): the name goes with it, after that
    # dispatch's trace events for the callback were named. Set first so the
    # `del` finds it whether the name was ever set (no `if`: see above).
    names[value] = ""
    del names[value]
    free_contexts.append(context)  # type: ignore[arg-type]
    # The last references may go here: their finalizers may call back into flux.
    del obj, extra


_previous_unraisable_hook = sys.unraisablehook


#: id(function) -> the function, for the user-facing callbacks C calls
#: (flux.Trampoline's handler entry): their exceptions are the user's to
#: see as unraisable, but an interrupt (any BaseException that is not an
#: Exception: KeyboardInterrupt, SystemExit) must not be lost, so it is
#: parked like a trampoline's, for the next libflux call of that thread
#: (flux.call itself, when it made the call) to raise.
interrupts_parked: dict[int, Callable[..., Any]] = {}


def _called(unraisable: Any) -> Any:
    """The function an unraisable report is about. ctypes names the callback
    it called as the report's object in CPython 3.11; newer ctypes reports it
    through PyErr_FormatUnraisable, with no object (the callback is named in
    the message only), and the callback's frame is the traceback's first (the
    exception began in it, or as it was entered)."""
    called = unraisable.object
    if called is None and unraisable.exc_traceback is not None:
        called = callbacks_by_code.get(unraisable.exc_traceback.tb_frame.f_code)
    return called


def _unraisable_hook(unraisable: Any) -> None:
    # ctypes reports an exception that escaped a callback through
    # sys.unraisablehook, on the thread that ran it, before returning to C.
    # Ours are the outermost call's to raise, not to print; the first counts.
    called = _called(unraisable)
    entry = _trampolines.get(id(called))
    if entry is None or entry[0] is not called or unraisable.exc_value is None:
        if (
            called is not None
            and interrupts_parked.get(id(called)) is called
            and unraisable.exc_value is not None
            and not isinstance(unraisable.exc_value, Exception)
        ):
            park_escaped(get_ident(), unraisable.exc_value)
            return
        _previous_unraisable_hook(unraisable)
        return
    exc = unraisable.exc_value
    if type(exc) is ArgumentError:  # a libflux call in it failed at the recursion limit
        exc = argument_error(exc)
    park_escaped(get_ident(), exc)
    fn, on_escape = entry
    if on_escape is not None:
        _recover(fn, on_escape, unraisable.exc_traceback)


# Chains to the hook that was installed before. A program that installs its
# own hook later (without calling the previous one) gets the report instead,
# and a dispatch then fails as described only when the C side saw a failure.
sys.unraisablehook = _unraisable_hook

#: The native function pointers every registration uses; module-level, so
#: they outlive every registration. destroy_trampoline is every context's.
callback_trampoline = CALLBACK(_on_callback)
destroy_trampoline = DESTROY(_on_destroy)
#: A NULL flux_destroy, for calls that hand libflux no context.
NO_DESTROY = DESTROY()


# --------------------------------------------------------------------------
# Stores (flux/stores.py builds on these)
# --------------------------------------------------------------------------

#: flux_reduce_fn: int (*)(void *context, void *state, const void *payload,
#: void **next). A Python store's states and payloads are PyObject*s, so the
#: trampoline receives the objects; next stays an address, written only when
#: the state changes.
REDUCE = CFUNCTYPE(c_int, c_void_p, ctypes.py_object, ctypes.py_object, c_void_p)
#: flux_release_fn: void (*)(void *context, void *state)
RELEASE = CFUNCTYPE(None, c_void_p, c_void_p)
#: flux_listener_fn: void (*)(void *context)
LISTENER = CFUNCTYPE(None, c_void_p)

flux_store_create = declare(
    "flux_store_create",
    c_int,
    (c_void_p, c_void_p, REDUCE, c_void_p, RELEASE, c_void_p, DESTROY, POINTER(c_void_p)),
    True,
)
flux_store_state = declare("flux_store_state", c_void_p, (c_void_p,))
flux_store_token = declare("flux_store_token", c_uint64, (c_void_p,))
flux_store_is_emitting = declare("flux_store_is_emitting", c_int, (c_void_p,))
flux_store_has_changed = declare("flux_store_has_changed", c_int, (c_void_p, POINTER(c_int)), True)
flux_store_emit_change = declare("flux_store_emit_change", c_int, (c_void_p,), True)
flux_store_add_listener = declare(
    "flux_store_add_listener", c_int, (c_void_p, LISTENER, c_void_p, DESTROY, POINTER(c_uint64)), True
)
#: The same function with no errcheck, for flux/stores.py: it records the
#: listener before raising anything, and adds a store's own listener inside
#: calls that must not raise what escaped on this thread (an owner's
#: removal, a dispatch).
flux_store_add_listener_raw = declare_raw(
    "flux_store_add_listener", c_int, (c_void_p, LISTENER, c_void_p, DESTROY, POINTER(c_uint64))
)
flux_store_remove_listener = declare("flux_store_remove_listener", c_int, (c_void_p, c_uint64), True)
flux_store_listener_fail = declare("flux_store_listener_fail", c_int, (c_void_p, c_int), True)
#: The same function with no errcheck, for the listener trampoline: it runs
#: inside a dispatch, whose outermost call raises what escaped.
flux_store_listener_fail_raw = declare_raw("flux_store_listener_fail", c_int, (c_void_p, c_int))
#: flux_store_remove_listener with no errcheck, for removals nobody asked
#: for by a call (an owner collected, an emit's error reset): they can run
#: inside a dispatch, or in a weakref callback anywhere, so they must not
#: raise what escaped on this thread, which the outermost call raises.
flux_store_remove_listener_raw = declare_raw("flux_store_remove_listener", c_int, (c_void_p, c_uint64))
flux_store_destroy = declare("flux_store_destroy", c_int, (c_void_p,), True)
#: The same two with no errcheck, for Store.close(), which must know whether
#: libflux destroyed the store whatever exception comes out (the errcheck
#: raises what escaped on this thread before it looks at the status).
flux_store_destroy_raw = declare_raw("flux_store_destroy", c_int, (c_void_p,))
flux_unregister_raw = declare_raw("flux_unregister", c_int, (c_void_p, c_uint64))
flux_store_group_create = declare(
    "flux_store_group_create",
    c_int,
    (POINTER(c_void_p), c_size_t, LISTENER, c_void_p, DESTROY, POINTER(c_void_p)),
    True,
)
flux_store_group_release = declare("flux_store_group_release", c_int, (c_void_p,), True)
#: With no errcheck, for StoreGroup.release(), which must know whether
#: libflux refused (out of memory during a dispatch: the group stays live).
flux_store_group_release_raw = declare_raw("flux_store_group_release", c_int, (c_void_p,))
flux_store_group_token = declare("flux_store_group_token", c_uint64, (c_void_p,))
