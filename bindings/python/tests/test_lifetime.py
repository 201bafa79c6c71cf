"""Who keeps what alive: the dispatcher owns its callbacks, and nothing leaks."""

from __future__ import annotations

import gc
import weakref
from typing import Any

import pytest

import flux
from flux import _native
from flux.dispatcher import live_callbacks


class Callback:
    """A callable that can be weakly referenced, to watch its lifetime."""

    def __init__(self, calls: list[Any]) -> None:
        self.calls = calls

    def __call__(self, payload: Any) -> None:
        self.calls.append(payload)


def test_a_lambda_with_no_other_reference_still_runs(d: flux.Dispatcher[Any]) -> None:
    calls: list[Any] = []
    d.register(lambda p: calls.append(p))
    d.register(Callback(calls))
    gc.collect()
    d.dispatch("x")
    assert calls == ["x", "x"]


def test_unregister_releases_the_callback(d: flux.Dispatcher[Any]) -> None:
    callback = Callback([])
    ref = weakref.ref(callback)
    token = d.register(callback)
    del callback
    gc.collect()
    assert ref() is not None
    d.unregister(token)
    assert ref() is None
    assert live_callbacks(d) == 0


def test_a_callback_removed_during_a_dispatch_is_released_when_it_ends(
    d: flux.Dispatcher[Any],
) -> None:
    tokens: dict[str, flux.Token] = {}
    alive_during: list[bool] = []
    victim = Callback([])
    ref = weakref.ref(victim)

    def remover(p: Any) -> None:
        d.unregister(tokens["victim"])
        gc.collect()
        alive_during.append(ref() is not None)

    d.register(remover)
    tokens["victim"] = d.register(victim)
    del victim
    d.register(lambda p: alive_during.append(ref() is not None))
    d.dispatch(None)
    assert alive_during == [True, True]  # libflux runs destroy at the end
    assert ref() is None


def test_a_callback_that_unregisters_itself_lives_until_the_dispatch_ends(
    d: flux.Dispatcher[Any],
) -> None:
    tokens: dict[str, flux.Token] = {}
    seen: list[bool] = []

    class SelfRemover:
        def __call__(self, payload: Any) -> None:
            d.unregister(tokens["me"])
            gc.collect()
            seen.append(ref() is not None)

    me = SelfRemover()
    ref = weakref.ref(me)
    tokens["me"] = d.register(me)
    del me
    d.dispatch(None)
    assert seen == [True]
    assert ref() is None


def test_close_releases_every_callback() -> None:
    refs = []
    d: flux.Dispatcher[Any] = flux.Dispatcher()
    for _ in range(5):
        callback = Callback([])
        refs.append(weakref.ref(callback))
        d.register(callback)
    del callback
    assert live_callbacks(d) == 5
    d.close()
    assert live_callbacks(d) == 0
    assert all(ref() is None for ref in refs)


def test_the_with_statement_closes() -> None:
    with flux.Dispatcher[Any]() as d:
        d.register(Callback([]))
        assert not d.closed
    assert d.closed and live_callbacks(d) == 0


def test_a_forgotten_dispatcher_is_closed_when_collected() -> None:
    callback = Callback([])
    ref = weakref.ref(callback)
    d: flux.Dispatcher[Any] = flux.Dispatcher()
    d.register(callback)
    d_ref = weakref.ref(d)
    del d, callback
    gc.collect()
    assert d_ref() is None
    assert ref() is None


def live_contexts() -> set[int]:
    return {i for i, callback in enumerate(_native.callbacks) if callback is not None}


def test_contexts_are_recycled(d: flux.Dispatcher[Any]) -> None:
    before = live_contexts()
    used: set[int] = set()
    for _ in range(1000):
        token = d.register(lambda p: None)
        used |= live_contexts() - before
        d.unregister(token)
    assert live_contexts() == before
    assert len(used) == 1  # the same small int every time, not 1000 of them


def test_registrations_end_with_the_dispatcher_even_mid_failure(
    d: flux.Dispatcher[Any],
) -> None:
    refs = []
    tokens: list[flux.Token] = []

    def fail_and_remove(p: Any) -> None:
        d.unregister(tokens[1])
        raise RuntimeError

    tokens.append(d.register(fail_and_remove))
    victim = Callback([])
    refs.append(weakref.ref(victim))
    tokens.append(d.register(victim))
    del victim
    with pytest.raises(RuntimeError):
        d.dispatch(None)
    assert refs[0]() is None  # destroyed when the failed dispatch ended
    assert live_callbacks(d) == 1
