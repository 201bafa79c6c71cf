"""Facebook's Dispatcher-test.js, case by case, through the Python binding."""

from __future__ import annotations

from typing import Any

import pytest

import flux


class Spy:
    """jest.fn(): records the payloads it was called with."""

    def __init__(self) -> None:
        self.calls: list[Any] = []

    def __call__(self, payload: Any = None) -> None:
        self.calls.append(payload)


def test_should_execute_all_subscriber_callbacks(d: flux.Dispatcher[Any]) -> None:
    a, b = Spy(), Spy()
    d.register(a)
    d.register(b)

    payload: dict[str, Any] = {}
    d.dispatch(payload)
    assert len(a.calls) == 1 and a.calls[0] is payload
    assert len(b.calls) == 1 and b.calls[0] is payload

    d.dispatch(payload)
    assert len(a.calls) == 2 and a.calls[1] is payload
    assert len(b.calls) == 2 and b.calls[1] is payload


def test_should_wait_for_callbacks_registered_earlier(d: flux.Dispatcher[Any]) -> None:
    a, b = Spy(), Spy()
    token_a = d.register(a)

    def waiter(payload: Any) -> None:
        d.wait_for([token_a])
        assert len(a.calls) == 1 and a.calls[0] is payload
        b(payload)

    d.register(waiter)
    payload: dict[str, Any] = {}
    d.dispatch(payload)
    assert len(a.calls) == 1 and a.calls[0] is payload
    assert len(b.calls) == 1 and b.calls[0] is payload


def test_should_wait_for_callbacks_registered_later(d: flux.Dispatcher[Any]) -> None:
    a, b = Spy(), Spy()
    tokens: dict[str, flux.Token] = {}

    def waiter(payload: Any) -> None:
        d.wait_for([tokens["b"]])
        assert len(b.calls) == 1 and b.calls[0] is payload
        a(payload)

    d.register(waiter)
    tokens["b"] = d.register(b)
    payload: dict[str, Any] = {}
    d.dispatch(payload)
    assert len(a.calls) == 1 and a.calls[0] is payload
    assert len(b.calls) == 1 and b.calls[0] is payload


def test_should_throw_if_dispatch_while_dispatching(d: flux.Dispatcher[Any]) -> None:
    a = Spy()

    def nested(payload: Any) -> None:
        d.dispatch(payload)
        a()

    d.register(nested)
    with pytest.raises(flux.AlreadyDispatchingError):
        d.dispatch({})
    assert a.calls == []


def test_should_throw_if_wait_for_while_not_dispatching(d: flux.Dispatcher[Any]) -> None:
    a = Spy()
    token_a = d.register(a)
    with pytest.raises(flux.NotDispatchingError):
        d.wait_for([token_a])
    assert a.calls == []


def test_should_throw_if_wait_for_with_invalid_token(d: flux.Dispatcher[Any]) -> None:
    invalid = flux.Token(d._serial, 1337)  # this dispatcher's, never issued
    d.register(lambda payload: d.wait_for([invalid]))
    with pytest.raises(flux.UnknownTokenError):
        d.dispatch({})


def test_should_throw_on_self_circular_dependencies(d: flux.Dispatcher[Any]) -> None:
    a = Spy()
    tokens: dict[str, flux.Token] = {}

    def self_waiter(payload: Any) -> None:
        d.wait_for([tokens["a"]])
        a(payload)

    tokens["a"] = d.register(self_waiter)
    with pytest.raises(flux.CircularDependencyError):
        d.dispatch({})
    assert a.calls == []


def test_should_throw_on_multi_circular_dependencies(d: flux.Dispatcher[Any]) -> None:
    a, b = Spy(), Spy()
    tokens: dict[str, flux.Token] = {}

    def wait_b(payload: Any) -> None:
        d.wait_for([tokens["b"]])
        a(payload)

    def wait_a(payload: Any) -> None:
        d.wait_for([tokens["a"]])
        b(payload)

    tokens["a"] = d.register(wait_b)
    tokens["b"] = d.register(wait_a)
    with pytest.raises(flux.CircularDependencyError):
        d.dispatch({})
    assert a.calls == [] and b.calls == []


def test_should_remain_in_a_consistent_state_after_a_failed_dispatch(
    d: flux.Dispatcher[Any],
) -> None:
    a, b = Spy(), Spy()
    d.register(a)

    def maybe_throw(payload: Any) -> None:
        if payload["should_throw"]:
            raise RuntimeError("boom")
        b()

    d.register(maybe_throw)
    with pytest.raises(RuntimeError, match="boom"):
        d.dispatch({"should_throw": True})
    assert not d.is_dispatching

    count_a = len(a.calls)  # "cannot make assumptions about a failed dispatch"
    d.dispatch({"should_throw": False})
    assert len(a.calls) == count_a + 1
    assert len(b.calls) == 1


def test_should_properly_unregister_callbacks(d: flux.Dispatcher[Any]) -> None:
    a, b = Spy(), Spy()
    d.register(a)
    token_b = d.register(b)

    payload: dict[str, Any] = {}
    d.dispatch(payload)
    assert len(a.calls) == 1 and a.calls[0] is payload
    assert len(b.calls) == 1 and b.calls[0] is payload

    d.unregister(token_b)
    d.dispatch(payload)
    assert len(a.calls) == 2 and a.calls[1] is payload
    assert len(b.calls) == 1
