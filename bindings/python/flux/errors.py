"""Exceptions raised by the flux package, one class per ``flux_status`` code.

Every error that comes from libflux is a :class:`FluxError` whose ``status``
is the C status code (a :class:`Status`, an ``int`` enum) and whose message is
the library's ``flux_last_error()`` text for the failing call. The subclasses
also derive from the closest built-in exception, so ``except LookupError``
catches an unknown token and ``except ValueError`` catches a closed
dispatcher.

An exception raised by a *callback* is never wrapped: ``dispatch`` (and a
``wait_for`` still unwinding) re-raises that very exception object.
"""

from __future__ import annotations

import enum

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
    known, else the plain ``int``); ``str(error)`` is the library's message,
    which names the function and the tokens involved. Test the class or the
    status, never the message: its wording is for people.
    """

    #: The status this class stands for; instances carry their own ``status``.
    default_status: int = -1

    def __init__(self, message: str = "", status: int | None = None) -> None:
        super().__init__(message)
        code = self.default_status if status is None else status
        try:
            self.status: int = Status(code)
        except ValueError:
            self.status = code
        self.message: str = message

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

    def __reduce__(self) -> tuple[type[FluxError], tuple[str, int]]:
        return (type(self), (self.message, int(self.status)))


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
    the same dispatcher, or ``close`` while the dispatcher is in use."""

    default_status = Status.ERR_ALREADY_DISPATCHING


class NotDispatchingError(FluxError):
    """``FLUX_ERR_NOT_DISPATCHING``: ``wait_for`` outside a dispatch, or on a
    thread that is not running the dispatch."""

    default_status = Status.ERR_NOT_DISPATCHING


class CircularDependencyError(FluxError):
    """``FLUX_ERR_CIRCULAR``: ``wait_for`` on a callback that has started but
    not finished in this dispatch (a cycle, or a callback waiting on itself)."""

    default_status = Status.ERR_CIRCULAR


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
