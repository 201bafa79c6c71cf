"""Bad input gets a clear error and changes nothing."""

from __future__ import annotations

from typing import Any

import pytest

import flux
from flux import _native
from flux.dispatcher import live_callbacks

NOT_CALLABLE = [None, 1, "text", [], object()]
NOT_TOKENS = [None, 1, 1.0, "1", b"1", object(), [1], True]


@pytest.mark.parametrize("callback", NOT_CALLABLE, ids=lambda c: type(c).__name__)
def test_register_rejects_non_callables_before_touching_c(d: flux.Dispatcher[Any], callback: Any) -> None:
    before = list(_native.objects)
    with pytest.raises(TypeError, match="callable"):
        d.register(callback)
    assert _native.objects == before
    # libflux was not called: no token was used up.
    assert d.register(lambda p: None).value == 1


@pytest.mark.parametrize("token", NOT_TOKENS, ids=lambda t: type(t).__name__)
def test_unregister_rejects_non_tokens(d: flux.Dispatcher[Any], token: Any) -> None:
    kept = d.register(lambda p: None)
    with pytest.raises(TypeError, match="flux.Token"):
        d.unregister(token)
    d.unregister(kept)  # still registered


@pytest.mark.parametrize("token", NOT_TOKENS, ids=lambda t: type(t).__name__)
def test_wait_for_rejects_non_tokens_even_outside_a_dispatch(d: flux.Dispatcher[Any], token: Any) -> None:
    with pytest.raises(TypeError, match="flux.Token"):
        d.wait_for([token])


def test_wait_for_rejects_non_iterables(d: flux.Dispatcher[Any]) -> None:
    token = d.register(lambda p: None)
    with pytest.raises(TypeError):
        d.wait_for(token)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        d.wait_for(5)  # type: ignore[arg-type]


def test_wait_for_rejects_non_tokens_inside_a_dispatch_before_running_any(
    d: flux.Dispatcher[Any],
) -> None:
    calls: list[str] = []
    tokens: list[flux.Token] = []

    def waiter(p: Any) -> None:
        with pytest.raises(TypeError):
            d.wait_for([tokens[1], "not a token"])  # type: ignore[list-item]
        calls.append("waiter")

    tokens.append(d.register(waiter))
    tokens.append(d.register(lambda p: calls.append("other")))
    d.dispatch(None)
    assert calls == ["waiter", "other"]


def test_tokens_of_another_dispatcher_are_rejected(d: flux.Dispatcher[Any]) -> None:
    calls: list[str] = []
    with flux.Dispatcher[Any]() as other:
        foreign = other.register(lambda p: calls.append("other's"))
        mine = d.register(lambda p: calls.append("mine"))
        assert foreign.value == mine.value  # the same number, but not the same token

        with pytest.raises(flux.UnknownTokenError, match="another|not by this"):
            d.unregister(foreign)
        errors: list[flux.FluxError] = []

        def waiter(p: Any) -> None:
            try:
                d.wait_for([foreign])
            except flux.UnknownTokenError as exc:
                errors.append(exc)

        d.register(waiter)
        d.dispatch(None)
        assert len(errors) == 1 and errors[0].status == flux.Status.ERR_UNKNOWN_TOKEN
        # Neither dispatcher changed.
        other.dispatch(None)
        assert calls == ["mine", "other's"]
        other.unregister(foreign)
        d.unregister(mine)


@pytest.mark.parametrize("value", [0, 2, 999, 2**64 - 1])
def test_unknown_token_values_are_reported_by_the_library(d: flux.Dispatcher[Any], value: int) -> None:
    d.register(lambda p: None)
    with pytest.raises(flux.UnknownTokenError) as info:
        d.unregister(flux.Token(d._serial, value))
    assert info.value.status == flux.Status.ERR_UNKNOWN_TOKEN
    assert "flux_unregister" in str(info.value)
    assert str(value) in str(info.value)


def test_double_unregister(d: flux.Dispatcher[Any]) -> None:
    token = d.register(lambda p: None)
    d.unregister(token)
    with pytest.raises(flux.UnknownTokenError):
        d.unregister(token)
    assert live_callbacks(d) == 0


def test_use_after_close(d: flux.Dispatcher[Any]) -> None:
    token = d.register(lambda p: None)
    d.close()
    assert d.closed
    for call in (
        lambda: d.register(lambda p: None),
        lambda: d.unregister(token),
        lambda: d.dispatch(None),
        lambda: d.wait_for([token]),
        lambda: d.wait_for([]),
    ):
        with pytest.raises(flux.InvalidArgumentError, match="closed") as info:
            call()
        assert isinstance(info.value, ValueError)
        assert info.value.status == flux.Status.ERR_INVALID_ARGUMENT
    assert d.is_dispatching is False
    d.close()  # idempotent
    assert "closed" in repr(d)


class _Store(flux.ReduceStore[int]):
    def get_initial_state(self) -> int:
        return 0

    def reduce(self, state: int, action: Any) -> int:
        return state


def test_after_close_every_public_member_raises_but_those_close_names() -> None:
    # close()'s docstring names the members that still answer, and what they
    # answer; every other public member raises InvalidArgumentError.
    d: flux.Dispatcher[Any] = flux.Dispatcher()
    token = d.register(lambda p: None, name="cb")
    d.register_store(_Store)
    d.close()
    answers: dict[str, Any] = {
        "closed": lambda: d.closed,
        "is_dispatching": lambda: d.is_dispatching,
        "stores": lambda: d.stores,
        "name_of": lambda: d.name_of(token),
        "close": lambda: d.close(),
    }
    expected = {"closed": True, "is_dispatching": False, "stores": (), "name_of": None, "close": None}
    raises: dict[str, Any] = {
        "register": lambda: d.register(lambda p: None),
        "unregister": lambda: d.unregister(token),
        "dispatch": lambda: d.dispatch(None),
        "enqueue": lambda: d.enqueue(None),
        "wait_for": lambda: d.wait_for([token]),
        "register_store": lambda: d.register_store(_Store),
        "store": lambda: d.store(_Store),
    }
    public = {name for name in vars(flux.Dispatcher) if not name.startswith("_")}
    assert public == set(answers) | set(raises), "a new member: say in close() what it does once closed"
    assert {name: answer() for name, answer in answers.items()} == expected
    for name, call in raises.items():
        with pytest.raises(flux.InvalidArgumentError, match=f"^{name}: the dispatcher is closed$"):
            call()
    doc = " ".join((flux.Dispatcher.close.__doc__ or "").split())
    for said in (
        ":attr:`closed` (True)",
        ":attr:`is_dispatching` (False)",
        ":attr:`stores` (``()``",
        ":meth:`name_of` (None",
    ):
        assert said in doc, said


def test_closing_from_inside_a_callback_is_refused(d: flux.Dispatcher[Any]) -> None:
    errors: list[flux.FluxError] = []
    calls: list[str] = []

    def closer(p: Any) -> None:
        try:
            d.close()
        except flux.AlreadyDispatchingError as exc:
            errors.append(exc)

    d.register(closer)
    d.register(lambda p: calls.append("after"))
    d.dispatch(None)
    assert len(errors) == 1 and not d.closed
    assert calls == ["after"]
    d.dispatch(None)
    assert calls == ["after", "after"]
