"""Native callbacks minted at run time, and calls by run-time signature.

:class:`Trampoline` turns a Python callable into a real C function pointer of a
signature chosen at run time (libflux's ``flux_closure_create``, built on
libffi); :func:`call` calls any C function pointer through a signature known
only at run time (``flux_call``).

Signatures are ``R(A...)``, one letter a type: ``v`` void (return only), ``i``
int32, ``I`` uint32, ``l`` int64, ``L`` uint64, ``z`` size_t, ``f`` float,
``d`` double, ``p`` pointer. Integers and pointers travel as Python ``int``
(a NULL pointer is 0), floats as ``float``. A malformed signature raises
:class:`~flux.InvalidArgumentError` with libflux's message from the function
the call goes through -- ``flux_closure_create`` for a :class:`Trampoline`,
``flux_call`` for :func:`call` -- which names the 0-based position and the
character found there.

Exceptions cannot cross C. An exception raised by a trampoline's handler (or a
result that does not fit its return type) is reported through
:func:`sys.unraisablehook` -- ctypes does it, as for any callback, with a note
naming the handler -- and the C caller gets 0 (0.0, NULL); the process goes on.
An interrupt is not lost that way: a :class:`BaseException` that is not an
:class:`Exception` (a ``KeyboardInterrupt`` from SIGINT landing in or just
before the handler, a ``SystemExit``) also gives the C caller 0, and is raised
by this thread's next libflux call -- by :func:`call` itself when the
trampoline was called through it (or through C code it called); it is dropped
if the thread ends first (for a thread C made, Python's view of which ends
with each call from C).
"""

from __future__ import annotations

import ctypes
import math
import re
import weakref
from collections.abc import Callable
from ctypes import CFUNCTYPE, POINTER, byref, c_char_p, c_int, c_void_p
from types import TracebackType
from typing import Any, NamedTuple, final

from . import _native
from .errors import InvalidArgumentError, Status

__all__ = ["Trampoline", "call"]

#: letter -> the ctypes type of a value of that type.
_CTYPES: dict[str, Any] = {
    "i": ctypes.c_int32,
    "I": ctypes.c_uint32,
    "l": ctypes.c_int64,
    "L": ctypes.c_uint64,
    "z": ctypes.c_size_t,
    "f": ctypes.c_float,
    "d": ctypes.c_double,
    "p": ctypes.c_void_p,
}
_INTEGER_BITS = {
    "i": (True, 32),
    "I": (False, 32),
    "l": (True, 64),
    "L": (False, 64),
    "z": (False, 8 * ctypes.sizeof(ctypes.c_size_t)),
    "p": (False, 8 * ctypes.sizeof(ctypes.c_void_p)),
}
#: FLUX_SIGNATURE_MAX_ARGS (flux.h): the most arguments a signature may have.
_MAX_ARGS = 16
_WELL_FORMED = re.compile(rf"([vilLIzfdp])\(([ilLIzfdp]{{0,{_MAX_ARGS}}})\)")
#: What can begin a well-formed signature: its first error, if any, is where
#: it ends (DESIGN.md 10: the binding knows this itself, from the signature,
#: never from libflux's message).
_VIABLE = re.compile(rf"(?:[vilLIzfdp](?:\((?:[ilLIzfdp]{{0,{_MAX_ARGS}}}))?)?")


class _Signature(NamedTuple):
    text: bytes
    ret: str  # one letter
    args: str  # letters


# flux_closure_handler: void (*)(void *userdata, void *ret, void **args)
_HANDLER = CFUNCTYPE(None, c_void_p, c_void_p, POINTER(c_void_p))

_closure_create = _native.declare(
    "flux_closure_create",
    c_int,
    (c_char_p, _HANDLER, c_void_p, _native.DESTROY, POINTER(c_void_p)),
    errcheck=True,
)
_closure_code = _native.declare("flux_closure_code", c_void_p, (c_void_p,))
_closure_destroy = _native.declare("flux_closure_destroy", c_int, (c_void_p,), errcheck=True)
#: The same two with no errcheck, for Trampoline: it records the closure
#: made, or forgets the one destroyed, before anything can raise (an
#: interrupt as the errcheck is entered would leave a closure nothing frees).
_closure_create_raw = _native.declare_raw(
    "flux_closure_create", c_int, (c_char_p, _HANDLER, c_void_p, _native.DESTROY, POINTER(c_void_p))
)
_closure_destroy_raw = _native.declare_raw("flux_closure_destroy", c_int, (c_void_p,))
_call = _native.declare("flux_call", c_int, (c_void_p, c_char_p, c_void_p, POINTER(c_void_p)), errcheck=True)


# The function a malformed signature is handed to flux_call with, which
# refuses the signature without calling it: libflux's own flux_version(),
# which takes no arguments.
_NEVER_CALLED: int = ctypes.cast(_native.flux_version, c_void_p).value or 0


def _as_libflux_shows(text: str, quote: str) -> str:
    """``text`` as libflux shows a signature's bytes between two ``quote``
    characters: printable characters as themselves (backslash and the quote
    escaped), any other as a hex escape."""
    out = []
    for char in text:
        code = ord(char)
        if char in ("\\", quote):
            out.append("\\" + char)
        elif char.isprintable():
            out.append(char)
        else:
            out.append(f"\\x{code:02X}" if code < 0x100 else f"\\u{code:04X}" if code < 0x10000 else f"\\U{code:08X}")
    return "".join(out)


def _shown(signature: str) -> str:
    """``signature`` as libflux quotes it in a message: at most 64
    characters of it, shown as libflux shows them."""
    return _as_libflux_shows(signature[:64], '"') + ("..." if len(signature) > 64 else "")


def _refusal(function: str, signature: str, problem: str) -> InvalidArgumentError:
    """A refusal of ``signature`` in libflux's words, for what libflux cannot
    see: ``function: signature "...": problem``, the signature shown as
    libflux shows it (see :func:`_shown`)."""
    return InvalidArgumentError(f'{function}: signature "{_shown(signature)}": {problem}', Status.ERR_INVALID_ARGUMENT)


def _libflux_refuses(text: str, function: str) -> None:
    """Hands the ASCII signature ``text``, which _WELL_FORMED does not match,
    to libflux's ``function``, which raises its InvalidArgumentError naming
    the first error (the tests hold the two parsers to agree)."""
    data = text.encode("ascii")
    if function == "flux_call":
        # flux_call reads the signature before anything else, and with
        # no args it refuses any signature with arguments: the function
        # is never called (and it would be harmless if it were).
        _call(_NEVER_CALLED, data, None, None)
    else:
        # flux_closure_create releases what it was handed.
        out = c_void_p()
        _closure_create(data, _handler_trampoline, None, _native.NO_DESTROY, byref(out))
        # Not reached. If it were, free what libflux made (the caller refuses).
        _closure_destroy(out.value)


def _parse(signature: str, function: str) -> _Signature:
    """Checks a signature for libflux's ``function`` (``flux_closure_create``
    or ``flux_call``), whose parser explains what is wrong with a bad one:
    the first error, its position, the character found there. The argument
    limit (FLUX_SIGNATURE_MAX_ARGS) is part of the shape."""
    if not isinstance(signature, str):
        raise TypeError(f"signature must be a str, not {type(signature).__name__}")
    match = _WELL_FORMED.fullmatch(signature)
    if match is not None:
        return _Signature(signature.encode("ascii"), match.group(1), match.group(2))
    # libflux reads a C string of bytes: it would stop at a NUL and judge
    # only what comes before it, and it would name a non-ASCII character by
    # the first byte of its encoding ('\xC3' for 'e' with an acute accent).
    # It is handed what comes before the first such character, to find any
    # error before it; that character is ours to name only when there is none.
    at = next((i for i, char in enumerate(signature) if char == "\0" or not char.isascii()), len(signature))
    prefix = signature[:at]
    # With the character: when what precedes it could begin a well-formed
    # signature, the first error is the character, ours to name.
    if _WELL_FORMED.fullmatch(prefix) is None and (at == len(signature) or _VIABLE.fullmatch(prefix) is None):
        try:
            _libflux_refuses(prefix, function)
        except InvalidArgumentError as exc:
            if at == len(signature):
                raise  # libflux saw it all: its message as it is
            # An error before the character: libflux's words (after the
            # "function: signature "...": " flux.h gives its messages),
            # quoting the whole signature (libflux saw only the part before it).
            head = f'{function}: signature "{_shown(prefix)}": '
            raise _refusal(function, signature, exc.message[len(head) :]) from None
    if at == len(signature):
        raise _refusal(function, signature, "not well formed")  # not reached: libflux refused it above
    if signature[at] == "\0":
        raise _refusal(function, signature, f"embedded NUL at position {at}")
    # Named as given; its position is its byte offset too, everything
    # before it being ASCII.
    found = _as_libflux_shows(signature[at], "'")
    raise _refusal(
        function,
        signature,
        f"unexpected '{found}' at position {at}"
        " (a signature is ASCII: the type letters v, i, I, l, L, z, f, d, p, '(' and ')')",
    )


def _check_value(letter: str, value: object, what: str) -> int | float:
    """Value as the Python type of `letter`, refusing what would not fit
    (ctypes would silently truncate)."""
    if letter in "fd":
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise TypeError(f"{what} must be a float, not {type(value).__name__}")
        number = float(value)  # an int too large for a double: OverflowError
        if letter == "f" and math.isinf(ctypes.c_float(number).value) and not math.isinf(number):
            # Rounded as C rounds it, a finite value became an infinity.
            raise OverflowError(f"{what} {value} does not fit in 'f' (a float)")
        return number
    if value is None and letter == "p":
        return 0
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{what} must be an int, not {type(value).__name__}")
    signed, bits = _INTEGER_BITS[letter]
    low, high = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)
    if not low <= value <= high:
        raise OverflowError(f"{what} {value} does not fit in '{letter}' ({low}..{high})")
    return value


# --------------------------------------------------------------------------
# Trampolines
# --------------------------------------------------------------------------


class _Entry(NamedTuple):
    handler: Callable[..., Any]
    signature: _Signature


# A live closure's userdata is its context in the one registry
# (_native.objects), holding its _Entry; the one destroy removes it.


def live_closures() -> int:
    """How many closures libflux still holds a handler for. For tests."""
    return _native.live(lambda obj, extra: type(obj) is _Entry)


def _on_call(userdata: int | None, ret: int | None, args: Any) -> None:
    try:
        entry = _native.objects[userdata]  # type: ignore[index]
    except (IndexError, TypeError):  # not a context of ours (NULL: None)
        entry = None
    if type(entry) is not _Entry:  # only a call racing close() could get here
        return
    sig = entry.signature
    try:
        values = [_CTYPES[letter].from_address(args[k]).value for k, letter in enumerate(sig.args)]
        result = entry.handler(*[0 if v is None else v for v in values])
        if sig.ret != "v" and ret:
            _CTYPES[sig.ret].from_address(ret).value = _check_value(sig.ret, result, "the result")
    except BaseException as exc:
        # Nothing can cross into C: ctypes reports an exception leaving a
        # callback through sys.unraisablehook, and libflux zeroed *ret before
        # the call, so the C caller gets 0.
        handler = _native.described(entry.handler, repr, f"<{type(entry.handler).__qualname__} object>")
        _native.add_note(exc, f"in the handler of a flux.Trampoline: {handler}")
        raise


# An interrupt escaping _on_call (as it is entered, or from the handler) is
# kept for the thread's next libflux call rather than printed and lost.
_native.interrupts_parked[id(_on_call)] = _on_call
_native.callbacks_by_code[_on_call.__code__] = _on_call
_handler_trampoline = _HANDLER(_on_call)


def _destroy(handle: list[int | None], finalizing: bool = False) -> None:
    # Shared by close() and the finalizer; the list cell makes it idempotent.
    # No lock, and no call from taking the closure to libflux destroying it
    # (as for the registry's slots, see _native.free_contexts): neither
    # another thread nor an interrupt can come between, so the closure is
    # destroyed once, or not yet taken and left for a later call.
    closure, handle[0] = handle[0], None
    if closure:
        status = _closure_destroy_raw(closure)
        # The finalizer raises nothing: it runs wherever the last reference
        # goes (a destroy inside a dispatch, say), and what escaped on this
        # thread is the outermost call's to raise, not a finalizer's to lose.
        if not finalizing:
            _native.raise_outcome(_native.status_error(status) if status else None)


@final
class Trampoline(_native.Unshareable):
    """A C function pointer of a run-time signature whose calls run ``handler``.

    ``handler`` receives the arguments as Python values and returns the result
    (ignored for a ``v`` return). ``address`` is the function pointer, as an
    ``int``: hand it to C code (for ``"i(pp)"``, as a ``flux_callback``).

    Keep the trampoline open for as long as C code may call it: ``close()``
    (or leaving a ``with`` block, or garbage collection of an unclosed
    trampoline) frees the native code, and a later call would crash.
    Closing it while a call through it runs -- from its own handler (or
    dropping the last reference to it there) or from another thread -- is
    undefined behaviour too, as for ``flux_closure_destroy``. But
    libflux holds the handler until then, so a handler that refers to its
    trampoline (a bound method of the object that holds it, say) keeps it
    alive for good: close trampolines you are done with. The handler may be
    called from any thread. Initializing an open trampoline again raises
    :class:`RuntimeError`; a closed one may be.
    """

    def __init__(self, signature: str, handler: Callable[..., Any]) -> None:
        handle_before: list[int | None] | None = getattr(self, "_handle", None)
        if handle_before is not None and handle_before[0] is not None:
            # As for a dispatcher: the first closure would stay until this
            # object is collected, out of close()'s reach.
            raise RuntimeError(f"{self!r} is already made: close() it before initializing it again")
        if not callable(handler):
            raise TypeError(f"handler must be callable, not {type(handler).__name__}")
        sig = _parse(signature, "flux_closure_create")
        self.signature: str = signature
        self._address: int = 0
        handle: list[int | None] = [None]
        self._handle = handle
        # Attached before the closure exists: whatever cuts this constructor
        # short once libflux made it, the closure goes with this object.
        self._finalizer = weakref.finalize(self, _destroy, handle, True)
        out = c_void_p(_native.UNTOUCHED)
        out_ref = byref(out)
        entry = _Entry(handler, sig)
        added = [0]  # the context, also when an interrupt is raised as add() returns
        # On failure libflux runs the destroy callback, which drops the entry.
        try:
            key = _native.add(entry, None, added)
            status = _closure_create_raw(sig.text, _handler_trampoline, key, _native.destroy_trampoline, out_ref)
        finally:
            # No call from libflux's return to here: the closure it made is
            # recorded whatever interrupts this.
            made = out.value
            if made == _native.UNTOUCHED:
                if added[0]:
                    _native.drop(added[0], entry, made)  # an interrupt before libflux ran
            else:
                handle[0] = made  # None when it failed (and dropped the entry)
        _native.raise_outcome(_native.status_error(status) if status else None)
        self._address = _closure_code(made) or 0

    @property
    def address(self) -> int:
        """The native function pointer. :raises ValueError: once closed."""
        if self._handle[0] is None:
            raise ValueError("the trampoline is closed")
        return self._address

    @property
    def closed(self) -> bool:
        """True once :meth:`close` ran: the native code is freed, ``address``
        is no longer a function C may call."""
        return self._handle[0] is None

    def close(self) -> None:
        """Frees the native code; idempotent: on a closed trampoline
        ``close()`` does nothing, and a ``with`` block enters and closes
        again."""
        # Taken first: the handler's release may make the trampoline again,
        # with a finalizer of its own, which must stay attached.
        finalizer = self._finalizer
        _destroy(self._handle)
        finalizer.detach()  # only once the closure is gone (an interrupt)

    def __enter__(self) -> Trampoline:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __call__(self, *args: Any) -> Any:
        """Calls the trampoline through C, as C code would (see :func:`call`)."""
        return call(self.address, self.signature, *args)

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"at {self._address:#x}"
        return f"<flux.Trampoline {self.signature!r} {state}>"


# --------------------------------------------------------------------------
# Calls by run-time signature
# --------------------------------------------------------------------------


def call(address: int, signature: str, *args: Any) -> Any:
    """Calls the C function at ``address`` as ``signature`` says.

    :returns: the result as a Python value (``None`` for ``v``; pointers as
        ``int``, NULL as 0).
    :raises TypeError: wrong number or types of arguments.
    :raises OverflowError: a number that does not fit its C type (a
        finite float too large for ``f`` included), or an
        ``address`` that is not one (negative, or too large for a pointer).
    :raises InvalidArgumentError: a malformed signature (the message is
        ``flux_call``'s), or ``address`` 0.

    The call releases the GIL; the function runs on this thread. Calling a
    bad address crashes the process, exactly as it would from C.
    """
    sig = _parse(signature, "flux_call")
    if address is None:
        raise TypeError("address must be an int, not NoneType")
    # As a pointer argument: ctypes would take 2**64 + a for a, and -1 for
    # the top of the address space.
    address = int(_check_value("p", address, "address"))
    if len(args) != len(sig.args):
        raise TypeError(f'signature "{_shown(signature)}" takes {len(sig.args)} arguments, got {len(args)}')
    values = [
        _CTYPES[letter](_check_value(letter, value, f"argument {k + 1}"))
        for k, (letter, value) in enumerate(zip(sig.args, args))
    ]
    argv = (c_void_p * max(len(values), 1))(*[ctypes.addressof(v) for v in values])
    result = None if sig.ret == "v" else _CTYPES[sig.ret]()
    _call(address or None, sig.text, None if result is None else byref(result), argv)
    if result is None:
        return None
    value = result.value
    return 0 if value is None else value
