"""The exception classes, their status codes, and the library's messages."""

from __future__ import annotations

import copy
import pickle
from typing import Any

import pytest

import flux
from flux import _native
from flux.errors import error_for_status

CLASSES = {
    flux.Status.ERR_INVALID_ARGUMENT: flux.InvalidArgumentError,
    flux.Status.ERR_UNKNOWN_TOKEN: flux.UnknownTokenError,
    flux.Status.ERR_ALREADY_DISPATCHING: flux.AlreadyDispatchingError,
    flux.Status.ERR_NOT_DISPATCHING: flux.NotDispatchingError,
    flux.Status.ERR_CIRCULAR: flux.CircularDependencyError,
    flux.Status.ERR_CALLBACK_FAILED: flux.CallbackFailedError,
    flux.Status.ERR_NO_MEMORY: flux.NoMemoryError,
    flux.Status.ERR_TOO_DEEP: flux.TooDeepError,
}


@pytest.mark.parametrize("status", list(CLASSES), ids=lambda s: s.name)
def test_one_class_per_status(status: flux.Status) -> None:
    cls = CLASSES[status]
    assert issubclass(cls, flux.FluxError)
    error = error_for_status(int(status), "message")
    assert type(error) is cls
    assert error.status == status and isinstance(error.status, flux.Status)
    assert str(error) == "message"
    # The names agree with the library's flux_status_name().
    assert error.status_name == _native.flux_status_name(int(status)).decode()


def test_statuses_match_the_header() -> None:
    assert [int(s) for s in flux.Status] == list(range(9))
    assert _native.flux_status_name(0) == b"FLUX_OK"
    assert _native.flux_status_name(12345) == b"FLUX_ERR_UNKNOWN"


def test_an_unknown_status_is_a_plain_flux_error() -> None:
    error = error_for_status(99, "from the future")
    assert type(error) is flux.FluxError and error.status == 99
    assert error.status_name == "FLUX_ERR_UNKNOWN"


def test_an_error_with_no_message_reads_as_its_status_name() -> None:
    # str() is never empty, for an error a program raises with no message.
    assert str(flux.TooDeepError()) == "FLUX_ERR_TOO_DEEP"
    assert str(flux.FluxError("", 99)) == "FLUX_ERR_UNKNOWN"


def test_builtin_bases() -> None:
    assert issubclass(flux.InvalidArgumentError, ValueError)
    assert issubclass(flux.UnknownTokenError, LookupError)
    assert issubclass(flux.NoMemoryError, MemoryError)
    assert issubclass(flux.TooDeepError, RecursionError)


def test_errors_pickle() -> None:
    error = flux.CircularDependencyError("flux_wait_for: token 3", 5)
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is flux.CircularDependencyError
    assert copy.status == 5 and str(copy) == str(error)
    assert "FLUX_ERR_CIRCULAR" in repr(copy)


@pytest.mark.parametrize("duplicate", [copy.copy, copy.deepcopy])
def test_copies_of_an_error_keep_its_token_and_cycle(d: flux.Dispatcher[Any], duplicate: Any) -> None:
    errors: list[flux.CircularDependencyError] = []

    def a(payload: object) -> None:
        d.wait_for([tokens[1]])

    def b(payload: object) -> None:
        try:
            d.wait_for([tokens[0]])
        except flux.CircularDependencyError as error:
            errors.append(error)

    tokens = [d.register(a), d.register(b)]
    d.dispatch(None)
    (error,) = errors
    assert error.token == tokens[0] and error.cycle == (tokens[1], tokens[0], tokens[1])
    twin = duplicate(error)
    assert twin is not error and type(twin) is type(error)
    assert (twin.token, twin.cycle, twin.status, str(twin)) == (error.token, error.cycle, error.status, str(error))
    assert twin.args == error.args


@pytest.mark.parametrize("duplicate", [copy.copy, copy.deepcopy, lambda e: pickle.loads(pickle.dumps(e))])
@pytest.mark.parametrize("status", list(CLASSES), ids=lambda s: s.name)
def test_every_error_class_copies_and_pickles(status: flux.Status, duplicate: Any) -> None:
    # NoMemoryError is also a MemoryError, whose __new__ refuses to make a
    # subclass's instance: a copy made through it raised TypeError.
    error = error_for_status(int(status), "message")
    twin = duplicate(error)
    assert twin is not error and type(twin) is type(error)
    assert (twin.status, str(twin), twin.args) == (error.status, str(error), error.args)


def test_a_deep_copy_of_an_error_has_notes_of_its_own() -> None:
    # As for a built-in exception: a note added to a deep copy (or to the
    # original) is not added to the other. They shared one __notes__ list.
    error = flux.UnknownTokenError("message")
    _native.add_note(error, "first")  # add_note itself: 3.11 and later
    twin = copy.deepcopy(error)
    _native.add_note(twin, "the copy's")
    _native.add_note(error, "the original's")
    assert twin.__notes__ == ["first", "the copy's"]
    assert error.__notes__ == ["first", "the original's"]


def test_a_pickled_error_drops_its_token(d: flux.Dispatcher[Any]) -> None:
    token = d.register(lambda p: None)
    d.unregister(token)
    with pytest.raises(flux.UnknownTokenError) as info:
        d.unregister(token)
    assert info.value.token == token
    twin = pickle.loads(pickle.dumps(info.value))
    assert type(twin) is flux.UnknownTokenError and twin.token is None and str(twin) == str(info.value)


def test_a_pickled_error_keeps_its_notes_and_what_the_program_added(d: flux.Dispatcher[Any]) -> None:
    # Only the token and cycle are process-bound. The notes -- where a
    # dispatch puts the later failures of the dispatches it drained -- and
    # any attribute a program set travel with it, as for a built-in
    # exception; they were dropped.
    gone = d.register(lambda p: None)
    d.unregister(gone)

    def callback(payload: object) -> None:
        if payload == "outer":
            d.enqueue("first")
            d.enqueue("second")
        else:
            d.unregister(gone)

    d.register(callback)
    with pytest.raises(flux.UnknownTokenError) as info:
        d.dispatch("outer")
    error = info.value
    assert error.token == gone and error.__notes__  # the second queued failure
    error.request = "checkout"  # type: ignore[attr-defined]
    twin = pickle.loads(pickle.dumps(error))
    assert type(twin) is flux.UnknownTokenError and twin.token is None
    assert (str(twin), twin.status) == (str(error), error.status)
    assert twin.__notes__ == error.__notes__
    assert twin.request == "checkout"  # type: ignore[attr-defined]


def test_errors_carry_the_library_message(d: flux.Dispatcher[Any]) -> None:
    token = d.register(lambda p: None)
    with pytest.raises(flux.NotDispatchingError) as info:
        d.wait_for([token])
    assert info.value.status == flux.Status.ERR_NOT_DISPATCHING
    assert info.value.message.startswith("flux_wait_for")
    # The message is read right after the call: a later successful call does
    # not change it, and the exception keeps its own copy.
    assert _native.last_error() == info.value.message
    d.dispatch(None)
    assert _native.last_error() == info.value.message


def test_each_thread_has_its_own_last_error(d: flux.Dispatcher[Any]) -> None:
    import threading

    token = d.register(lambda p: None)
    with pytest.raises(flux.NotDispatchingError):
        d.wait_for([token])
    mine = _native.last_error()
    seen: list[str] = []
    thread = threading.Thread(target=lambda: seen.append(_native.last_error()))
    thread.start()
    thread.join()
    assert seen == [""]
    assert _native.last_error() == mine
