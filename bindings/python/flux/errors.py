"""Exceptions raised by the flux package, one class per ``flux_status`` code.

Every error that comes from libflux is a :class:`FluxError` whose ``status``
is the C status code (a :class:`Status`, an ``int`` enum), whose ``token``
(and, for a cycle, ``cycle``) are the facts as values, and whose message is
the library's ``flux_last_error()`` text for the failing call (a cycle's
written anew with the registrations' names). The subclasses
also derive from the closest built-in exception, so ``except LookupError``
catches an unknown token and ``except ValueError`` catches a closed
dispatcher.

An exception raised by a *callback* is never wrapped: ``dispatch`` (and a
``wait_for`` still unwinding) re-raises that very exception object.
"""

from __future__ import annotations

import copy
import enum
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .dispatcher import Token

__all__ = [
    "AlreadyDispatchingError",
    "CallbackFailedError",
    "CircularDependencyError",
    "FluxError",
    "InvalidArgumentError",
    "NoMemoryError",
    "NotDispatchingError",
    "Status",
    "TooDeepError",
    "UnknownStoreError",
    "UnknownTokenError",
    "error_for_status",
]


class Status(enum.IntEnum):
    """The C ``flux_status`` codes (``include/flux.h``)."""

    OK = 0
    ERR_INVALID_ARGUMENT = 1
    ERR_UNKNOWN_TOKEN = 2
    ERR_ALREADY_DISPATCHING = 3
    ERR_NOT_DISPATCHING = 4
    ERR_CIRCULAR = 5
    ERR_CALLBACK_FAILED = 6
    ERR_NO_MEMORY = 7
    ERR_TOO_DEEP = 8

    @property
    def c_name(self) -> str:
        """The C enumerator, e.g. ``"FLUX_ERR_CIRCULAR"``."""
        return "FLUX_" + self.name


class FluxError(Exception):
    """Base class of every error reported by libflux.

    ``status`` holds the C status code (a :class:`Status` when the code is
    known, else the plain ``int``); ``token`` the :class:`~flux.Token` the
    error is about, when there is one (see :attr:`token`); ``str(error)`` a
    message for people, which names the function and the tokens involved.
    Test the class, the status and the token, never the message.

    ``copy.copy`` and ``copy.deepcopy`` keep everything; a pickled error
    keeps its class, message, status and, as a built-in exception does, its
    notes and any attribute a program set -- but not ``token`` (nor
    ``cycle``), which mean something only in the process that raised it.
    """

    #: The status this class stands for; instances carry their own ``status``.
    default_status: int = -1
    #: libflux's token and cycle values for this error, until the dispatcher
    #: makes them Tokens (internal).
    _values: tuple[int, tuple[int, ...]] = (0, ())

    def __init__(self, message: str = "", status: int | None = None, token: Token | None = None) -> None:
        super().__init__(message)
        code = self.default_status if status is None else status
        try:
            self.status: int = Status(code)
        except ValueError:
            self.status = code
        self.message: str = message
        #: The token the error is about, or None: the callback that failed
        #: (:class:`CallbackFailedError`; a store's own for its failing native
        #: listener), the token a call rejected (:class:`UnknownTokenError`), the
        #: pending token a wait asked for (:class:`CircularDependencyError`), the
        #: link that would have gone too deep (:class:`TooDeepError`). Read
        #: from ``flux_last_error_token()``, never from the message.
        self.token: Token | None = token

    @property
    def status_name(self) -> str:
        """The C name of the status, e.g. ``"FLUX_ERR_CIRCULAR"``."""
        if isinstance(self.status, Status):
            return self.status.c_name
        return "FLUX_ERR_UNKNOWN"

    def __str__(self) -> str:
        return self.message or self.status_name

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.message!r}, status={self.status_name})"

    def __reduce__(self) -> tuple[type[FluxError], tuple[str, int], dict[str, object]]:
        # Pickling: message and status as arguments, and the rest of the
        # state (__notes__, a program's own attributes) as a built-in
        # exception keeps it -- but not the token and cycle, meaningful only
        # in the process that issued them (a Token refuses to be pickled).
        state = {k: v for k, v in self.__dict__.items() if k not in _NOT_IN_STATE}
        return (type(self), (self.message, int(self.status)), state)

    def __copy__(self) -> FluxError:
        # A copy in this process keeps every fact, token and cycle included
        # (the default would go through __reduce__ and drop them).
        # BaseException's __new__, not the class's: a built-in base may
        # have one of its own that refuses a subclass (MemoryError's, for
        # NoMemoryError), and it sets nothing the copy does not copy.
        duplicate = BaseException.__new__(type(self))
        duplicate.args = self.args
        duplicate.__dict__.update(self.__dict__)
        return duplicate

    def __deepcopy__(self, memo: dict[int, object]) -> FluxError:
        # As __copy__, but what it holds deep-copied, as for a built-in
        # exception: a note added to the copy is not added to the original
        # (they would share one __notes__ list). Tokens are immutable values:
        # their deep copy is the token itself.
        duplicate = BaseException.__new__(type(self))
        memo[id(self)] = duplicate
        duplicate.args = copy.deepcopy(self.args, memo)
        duplicate.__dict__.update(copy.deepcopy(self.__dict__, memo))
        return duplicate


#: What a pickled FluxError's state leaves out: the token and cycle (and
#: their raw values), and what its constructor sets anew from its arguments.
_NOT_IN_STATE = frozenset({"token", "cycle", "_values", "message", "status"})


class InvalidArgumentError(FluxError, ValueError):
    """``FLUX_ERR_INVALID_ARGUMENT``: a NULL handle or callback -- in Python,
    a dispatcher used after :meth:`~flux.Dispatcher.close`."""

    default_status = Status.ERR_INVALID_ARGUMENT


class UnknownTokenError(FluxError, LookupError):
    """``FLUX_ERR_UNKNOWN_TOKEN``: a token never issued by this dispatcher
    (for example one of another dispatcher), already unregistered, or -- for
    ``wait_for`` -- registered during the running dispatch."""

    default_status = Status.ERR_UNKNOWN_TOKEN


class AlreadyDispatchingError(FluxError):
    """``FLUX_ERR_ALREADY_DISPATCHING``: ``dispatch`` from inside a callback of
    the same dispatcher, or one whose wait for another thread's dispatch
    would deadlock, or ``close`` while the dispatcher is in use."""

    default_status = Status.ERR_ALREADY_DISPATCHING


class NotDispatchingError(FluxError):
    """``FLUX_ERR_NOT_DISPATCHING``: ``wait_for`` outside a dispatch, or on a
    thread that is not running the dispatch."""

    default_status = Status.ERR_NOT_DISPATCHING


class CircularDependencyError(FluxError):
    """``FLUX_ERR_CIRCULAR``: ``wait_for`` on a callback that has started but
    not finished in this dispatch (a cycle, or a callback waiting on itself).

    ``cycle`` is the cycle as tokens: the waiter that called ``wait_for``
    first, then the token it asked for (``token``), then the one that is
    waiting for, and so on back to the waiter -- ``(c, a, b, c)`` for "c
    waits for a, which is waiting for b, which is waiting for c"; ``(a, a)``
    for a callback waiting for itself."""

    default_status = Status.ERR_CIRCULAR

    def __init__(
        self, message: str = "", status: int | None = None, token: Token | None = None, cycle: tuple[Token, ...] = ()
    ) -> None:
        super().__init__(message, status, token)
        #: The tokens of the cycle, waiter first and last (see the class).
        self.cycle: tuple[Token, ...] = cycle


class CallbackFailedError(FluxError):
    """``FLUX_ERR_CALLBACK_FAILED``: a callback that is not a Python callable
    of this package (a native callback) failed and aborted the dispatch.

    A Python callback's own exception is re-raised instead of this one, so
    Python code normally never sees it.
    """

    default_status = Status.ERR_CALLBACK_FAILED


class NoMemoryError(FluxError, MemoryError):
    """``FLUX_ERR_NO_MEMORY``: the library ran out of memory; nothing changed."""

    default_status = Status.ERR_NO_MEMORY


class TooDeepError(FluxError, RecursionError):
    """``FLUX_ERR_TOO_DEEP``: a chain of ``wait_for`` calls reached the
    thread's stack limit; the dispatch was aborted, as if a callback had
    raised. A :class:`RecursionError` too, like Python's own depth limit."""

    default_status = Status.ERR_TOO_DEEP


class UnknownStoreError(LookupError):
    """:meth:`Dispatcher.store <flux.Dispatcher.store>` for a store class
    that is not registered with that dispatcher (never, or its store was
    closed). Not a :class:`FluxError`: libflux has no registry, so there is
    no status. ``store_class`` is the class asked for."""

    def __init__(self, message: str = "", store_class: type | None = None) -> None:
        super().__init__(message)
        #: The class that was looked up.
        self.store_class: type | None = store_class


_BY_STATUS: dict[int, type[FluxError]] = {
    cls.default_status: cls
    for cls in (
        InvalidArgumentError,
        UnknownTokenError,
        AlreadyDispatchingError,
        NotDispatchingError,
        CircularDependencyError,
        CallbackFailedError,
        NoMemoryError,
        TooDeepError,
    )
}


def error_for_status(status: int, message: str) -> FluxError:
    """The exception for a non-zero C status: the matching subclass, or a
    plain :class:`FluxError` for a code this binding does not know."""
    return _BY_STATUS.get(status, FluxError)(message, status)
