"""Errors as data (DESIGN.md 10): every FluxError has ``.token``, a
CircularDependencyError ``.cycle``, read from libflux's values -- never
from its message, which the package does not parse."""

from __future__ import annotations

import ctypes
import gc
import pathlib
import re
import sys
from collections.abc import Iterator
from typing import Any

import pytest

import flux
from flux import _native


def test_a_three_callback_cycle_gives_its_tokens_and_names(d: flux.Dispatcher[Any]) -> None:
    t: dict[str, flux.Token] = {}
    caught: list[flux.CircularDependencyError] = []

    def a(p: Any) -> None:
        d.wait_for([t["b"]])

    def b(p: Any) -> None:
        d.wait_for([t["c"]])

    def c(p: Any) -> None:
        try:
            d.wait_for([t["a"]])
        except flux.CircularDependencyError as exc:
            caught.append(exc)

    t["a"] = d.register(a, name="A")
    t["b"] = d.register(b, name="B")
    t["c"] = d.register(c, name="C")
    d.dispatch(None)
    (error,) = caught
    assert error.token == t["a"]
    assert error.cycle == (t["c"], t["a"], t["b"], t["c"])
    assert str(error) == (
        f"flux_wait_for: circular dependency: token {t['c'].value} (C) waits for {t['a'].value} (A),"
        f" which is waiting for {t['b'].value} (B), which is waiting for {t['c'].value} (C)"
    )


def waiting_for_itself(d: flux.Dispatcher[Any]) -> tuple[flux.Token, flux.CircularDependencyError]:
    """Dispatches to a callback that waits for itself; its token and the
    error its wait raised."""
    me: list[flux.Token] = []
    caught: list[flux.CircularDependencyError] = []

    def selfish(p: Any) -> None:
        try:
            d.wait_for(me)
        except flux.CircularDependencyError as exc:
            caught.append(exc)

    me.append(d.register(selfish, name="selfish"))
    d.dispatch(None)
    (error,) = caught
    return me[0], error


def test_a_callback_waiting_for_itself_is_a_cycle_of_two(d: flux.Dispatcher[Any]) -> None:
    token, error = waiting_for_itself(d)
    assert error.token == token
    assert error.cycle == (token, token)
    assert str(error).endswith(f"token {token.value} (selfish) waits for itself")


def test_an_unknown_token_is_the_token_rejected(d: flux.Dispatcher[Any]) -> None:
    gone = d.register(lambda p: None)
    d.unregister(gone)
    with pytest.raises(flux.UnknownTokenError) as info:
        d.unregister(gone)
    assert info.value.token == gone
    caught: list[flux.UnknownTokenError] = []
    fine = d.register(lambda p: None)

    def waits(p: Any) -> None:
        try:
            d.wait_for([fine, gone])
        except flux.UnknownTokenError as exc:
            caught.append(exc)

    d.register(waits)
    d.dispatch(None)
    assert caught[0].token == gone


def test_a_foreign_token_is_recognised_by_the_binding(d: flux.Dispatcher[Any]) -> None:
    other = flux.Dispatcher[Any]()
    foreign = other.register(lambda p: None)
    foreign_too = other.register(lambda p: None)
    gone = d.register(lambda p: None)
    d.unregister(gone)
    caught: list[flux.UnknownTokenError] = []

    def waits(p: Any) -> None:
        for tokens in ([foreign], [gone, foreign], [foreign, gone], [foreign, foreign_too]):
            try:
                d.wait_for(tokens)
            except flux.UnknownTokenError as exc:
                caught.append(exc)

    d.register(waits)
    d.dispatch(None)
    # The first bad token of each list, foreign or not.
    assert [e.token for e in caught] == [foreign, gone, foreign, foreign]
    assert "issued by dispatcher" in str(caught[0]) and "issued by dispatcher" in str(caught[2])
    other.close()


def test_a_failing_native_callback_names_its_token(d: flux.Dispatcher[Any]) -> None:
    # A native callback returning non-zero: libc's abs(), given context 5.
    libc = ctypes.CDLL(None)
    address = ctypes.cast(libc.abs, ctypes.c_void_p).value
    assert address is not None
    native = _native.CALLBACK(address)
    out = ctypes.c_uint64()
    no_destroy = _native.DESTROY()  # NULL
    _native.flux_register(d._handle, native, 5, no_destroy, ctypes.byref(out))
    with pytest.raises(flux.CallbackFailedError) as info:
        d.dispatch(None)
    assert info.value.token == flux.Token(d._serial, out.value)
    _native.flux_unregister(d._handle, out.value)


def test_a_queued_native_failure_is_not_matched_by_another_dispatchers_token_value(d: flux.Dispatcher[Any]) -> None:
    # The outer dispatch fails in a Python callback with an error about
    # `other`'s token 2; its queued twin (the same payload) fails in a native
    # callback that is d's token 2. Matched by the bare value, the queued
    # dispatch took the outer's exception as its own failure, and the outer
    # dispatch raised a CallbackFailedError in its place.
    other = flux.Dispatcher[Any]()
    other.register(lambda p: None)
    gone = other.register(lambda p: None)
    other.unregister(gone)
    payload = object()
    queued: list[BaseException] = []
    calls = []

    def first(p: Any) -> None:
        calls.append(p)
        if len(calls) == 1:
            d.enqueue(payload, on_error=queued.append)
            other.unregister(gone)

    d.register(first)
    # A native callback that always fails: libc's abs(), given context 5.
    libc = ctypes.CDLL(None)
    address = ctypes.cast(libc.abs, ctypes.c_void_p).value
    assert address is not None
    native = _native.CALLBACK(address)
    out = ctypes.c_uint64()
    _native.flux_register(d._handle, native, 5, _native.DESTROY(), ctypes.byref(out))
    assert out.value == gone.value  # the same value, of another dispatcher
    with pytest.raises(flux.UnknownTokenError) as info:
        d.dispatch(payload)
    assert info.value.token == gone
    (failure,) = queued
    assert type(failure) is flux.CallbackFailedError
    assert failure.token == flux.Token(d._serial, out.value)
    _native.flux_unregister(d._handle, out.value)
    other.close()


def test_errors_without_a_token_have_none(d: flux.Dispatcher[Any]) -> None:
    token = d.register(lambda p: None)
    with pytest.raises(flux.NotDispatchingError) as info:
        d.wait_for([token])
    assert info.value.token is None


def test_the_package_never_reads_the_message_for_facts() -> None:
    # flux_last_error() is read in one place, to carry the message; nothing
    # searches it (no marker string, no regular expression over it).
    package = pathlib.Path(flux.__file__).parent
    call = re.compile(r"(?<!\w)_?last_error\(\)")
    readers = [p.name for p in package.glob("*.py") if call.search(p.read_text()) and p.name != "_native.py"]
    assert readers == []
    assert "import re\n" not in (package / "dispatcher.py").read_text()
    # Nor does any regular expression look into a FluxError's message (the
    # library's words), anywhere in the package.
    searched = re.compile(r"\.(?:search|match|fullmatch|findall|finditer|split|sub)\([^)]*\.message\b")
    assert [p.name for p in package.glob("*.py") if searched.search(p.read_text())] == []


#: Since 3.12 the cycle collector may run at any call: also as the failed
#: call returns, before the binding reads the error, which a failing call
#: of a finalizer it runs then replaces (README, "Set-up"). Skipped there,
#: not marked to fail: whether a collection lands in that window varies.
COLLECTOR_ANYWHERE = pytest.mark.skipif(
    sys.version_info >= (3, 12), reason="a collection may run between a failed call and its error's read"
)


@pytest.fixture
def failing_collections() -> Iterator[None]:
    """Every collection of the cycle collector starts by failing a libflux
    call (token 777, of another dispatcher): code a collection runs -- a
    finalizer, a weakref callback -- may well do so."""
    other = flux.Dispatcher[Any]()

    def fail_a_call(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            _native.flux_unregister_raw(other._handle, 777)

    threshold = gc.get_threshold()
    gc.callbacks.append(fail_a_call)
    gc.set_threshold(1, 1, 1)  # a collection at almost every allocation
    try:
        yield
    finally:
        gc.set_threshold(*threshold)
        gc.callbacks.remove(fail_a_call)
        other.close()


@COLLECTOR_ANYWHERE
def test_an_errors_values_are_its_own_call_s_whatever_a_collection_runs(
    d: flux.Dispatcher[Any], failing_collections: None
) -> None:
    # Message, token and cycle are read together, before the exception is
    # made: a collection that making it runs cannot swap in another call's.
    gone = d.register(lambda p: None)
    d.unregister(gone)
    for _ in range(20):
        with pytest.raises(flux.UnknownTokenError) as info:
            d.unregister(gone)
        assert info.value.token == gone
        assert f"token {gone.value} " in str(info.value)


@COLLECTOR_ANYWHERE
def test_a_cycle_is_its_own_call_s_whatever_a_collection_runs(
    d: flux.Dispatcher[Any], failing_collections: None
) -> None:
    token, error = waiting_for_itself(d)
    assert error.token == token
    # Its cycle, or none when making room for it ran a failing call: never
    # another call's.
    assert error.cycle in ((token, token), ())
