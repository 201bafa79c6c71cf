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


def test_name_of_a_token_of_another_dispatcher_is_none(d: flux.Dispatcher[Any]) -> None:
    # Token values are per dispatcher: another dispatcher's token 1 names no
    # registration here, whatever this dispatcher's token 1 is called.
    d.register(lambda p: None, name="mine")
    with flux.Dispatcher[Any]() as other:
        theirs = other.register(lambda p: None, name="theirs")
        assert theirs.value == 1 and other.name_of(theirs) == "theirs"
        assert d.name_of(theirs) is None
    assert d.name_of(1) == "mine"
    with pytest.raises(TypeError, match="flux.Token"):
        d.name_of("1")  # type: ignore[arg-type]


@pytest.mark.parametrize("name", [1, b"name", object()], ids=lambda n: type(n).__name__)
def test_register_rejects_a_name_that_is_not_a_str(d: flux.Dispatcher[Any], name: Any) -> None:
    # A name is what traces and cycle messages show: one that is not a str
    # was taken, and broke Trace.render() and write_chrome_trace() later.
    before = list(_native.objects)
    with pytest.raises(TypeError, match="name"):
        d.register(lambda p: None, name=name)
    assert _native.objects == before
    assert live_callbacks(d) == 0
    token = d.register(lambda p: None, name="fine")
    with flux.Trace(d) as trace:
        d.dispatch("x")
    assert "fine" in trace.render()
    d.unregister(token)


@pytest.mark.parametrize("on_error", [1, "text", object()], ids=lambda o: type(o).__name__)
def test_enqueue_rejects_a_non_callable_on_error_before_dispatching(d: flux.Dispatcher[Any], on_error: Any) -> None:
    # Taken, it only failed once a dispatch failed -- maybe on another
    # thread, in place of the failure it was given.
    seen: list[object] = []
    d.register(seen.append)
    with pytest.raises(TypeError, match="on_error"):
        d.enqueue("x", on_error=on_error)
    assert seen == [], "nothing was dispatched"
    assert flux.dispatcher.live_enqueued() == 0
    d.enqueue("y", on_error=None)
    assert seen == ["y"]


class UnrepresentableCallable:
    def __call__(self, payload: object) -> None:
        pass

    def __repr__(self) -> str:
        raise RuntimeError("no repr")


class NumberNamedCallable:
    def __call__(self, payload: object) -> None:
        pass


def test_a_callable_that_names_itself_badly_still_registers_with_a_str_name(d: flux.Dispatcher[Any]) -> None:
    # The default name is cosmetic: a repr that raises made register()
    # fail, and a __qualname__ that is no str broke Trace.render() later.
    numbered = NumberNamedCallable()
    numbered.__qualname__ = 42  # type: ignore[attr-defined]
    first = d.register(UnrepresentableCallable())
    second = d.register(numbered)
    assert d.name_of(first) == "<UnrepresentableCallable object>"
    assert isinstance(d.name_of(second), str)

    def waiter(payload: object) -> None:
        d.wait_for([first, second])

    d.register(waiter)
    with flux.Trace(d) as trace:
        d.dispatch("x")
    assert "<UnrepresentableCallable object>" in trace.render()


def test_initializing_an_open_dispatcher_again_is_refused_and_changes_nothing() -> None:
    # As for a store or a group: a second native dispatcher under the same
    # object left the first one's callbacks and stores out of close()'s reach.
    class Plain(flux.Store):
        def on_dispatch(self, payload: Any) -> None:
            pass

    d: flux.Dispatcher[Any] = flux.Dispatcher()
    store = Plain(d)
    seen: list[object] = []
    token = d.register(seen.append)
    with pytest.raises(RuntimeError, match="already made"):
        d.__init__()  # type: ignore[misc]
    d.dispatch("x")
    assert seen == ["x"]
    d.unregister(token)
    d.close()
    assert store.closed and live_callbacks(d) == 0
    d.__init__()  # type: ignore[misc]  # closed: it may be made anew
    assert not d.closed
    d.close()
