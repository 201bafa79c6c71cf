"""DESIGN.md section 2, rule by rule, through Python."""

from __future__ import annotations

import copy
import ctypes
import pickle
from typing import Any

import pytest

import flux

# -- register / tokens ----------------------------------------------------------


def test_tokens_count_up_from_one_and_are_never_reused(d: flux.Dispatcher[Any]) -> None:
    first = d.register(lambda p: None)
    second = d.register(lambda p: None)
    d.unregister(first)
    d.unregister(second)
    third = d.register(lambda p: None)
    assert [first.value, second.value, third.value] == [1, 2, 3]
    assert int(third) == 3
    assert len({first, second, third}) == 3


def test_tokens_are_hashable_and_equal_only_within_one_dispatcher(d: flux.Dispatcher[Any]) -> None:
    token = d.register(lambda p: None)
    same = flux.Token(d._serial, token.value)
    assert token == same and hash(token) == hash(same)
    assert {token: "x"}[same] == "x"
    with flux.Dispatcher[Any]() as other:
        foreign = other.register(lambda p: None)
        assert foreign.value == token.value
        assert foreign != token
        assert token != token.value  # not an int
    assert "Token 1" in repr(token)


def test_a_token_copies_as_itself_and_is_never_pickled(d: flux.Dispatcher[Any]) -> None:
    # An immutable value: state that holds tokens (a store's, say) can be
    # copied and deep-copied; only another process cannot use one.
    token = d.register(lambda p: None)
    assert copy.copy(token) is token and copy.deepcopy(token) is token
    state = {"waits_for": [token], "name": "x"}
    twin = copy.deepcopy(state)
    assert twin == state and twin["waits_for"][0] is token and twin["waits_for"] is not state["waits_for"]
    with pytest.raises(TypeError, match="process"):
        pickle.dumps(token)


def test_every_payload_goes_to_every_callback_in_registration_order(
    d: flux.Dispatcher[Any],
) -> None:
    calls: list[tuple[int, Any]] = []
    for i in range(10):

        def record(p: Any, i: int = i) -> None:
            calls.append((i, p))

        d.register(record)
    d.dispatch("x")
    d.dispatch("y")
    assert calls == [(i, "x") for i in range(10)] + [(i, "y") for i in range(10)]


@pytest.mark.parametrize(
    "payload",
    [
        None,
        0,
        "text",
        b"bytes",
        [1, 2],
        {"unhashable": []},
        object(),
        ctypes.py_object(5),
        ctypes.c_int(3),
        ctypes.c_void_p(0),
    ],
    ids=lambda p: type(p).__name__,
)
def test_the_payload_is_passed_by_identity(d: flux.Dispatcher[Any], payload: Any) -> None:
    seen: list[Any] = []
    for _ in range(3):
        d.register(seen.append)
    d.dispatch(payload)
    assert len(seen) == 3 and all(p is payload for p in seen)


def test_the_callback_return_value_is_ignored(d: flux.Dispatcher[Any]) -> None:
    calls: list[int] = []
    d.register(lambda p: 1)  # a non-zero int must not abort anything

    def returns_a_string(p: Any) -> str:
        calls.append(1)
        return "whatever"

    d.register(returns_a_string)
    d.register(lambda p: calls.append(2))
    d.dispatch(None)
    assert calls == [1, 2]


# -- dispatch ---------------------------------------------------------------------


def test_dispatch_inside_a_dispatch_fails_and_the_running_one_goes_on(
    d: flux.Dispatcher[Any],
) -> None:
    calls: list[str] = []
    errors: list[flux.FluxError] = []

    def nested(payload: Any) -> None:
        calls.append("nested")
        try:
            d.dispatch("inner")
        except flux.AlreadyDispatchingError as exc:
            errors.append(exc)

    d.register(lambda p: calls.append(f"first {p}"))
    d.register(nested)
    d.register(lambda p: calls.append(f"last {p}"))
    d.dispatch("outer")
    assert calls == ["first outer", "nested", "last outer"]
    assert len(errors) == 1
    assert errors[0].status == flux.Status.ERR_ALREADY_DISPATCHING
    assert "flux_dispatch" in str(errors[0])


def test_is_dispatching_is_true_exactly_while_a_dispatch_runs(d: flux.Dispatcher[Any]) -> None:
    seen: list[bool] = []
    d.register(lambda p: seen.append(d.is_dispatching))
    assert d.is_dispatching is False
    d.dispatch(None)
    assert seen == [True]
    assert d.is_dispatching is False

    def fail(p: Any) -> None:
        seen.append(d.is_dispatching)
        raise ValueError

    d.register(fail)
    with pytest.raises(ValueError):
        d.dispatch(None)
    assert seen == [True, True, True]
    assert d.is_dispatching is False


def test_dispatching_another_dispatcher_from_a_callback_is_fine(d: flux.Dispatcher[Any]) -> None:
    calls: list[str] = []
    with flux.Dispatcher[Any]() as inner:
        inner_token = inner.register(lambda p: calls.append(f"inner {p}"))

        def inner_waiter(p: Any) -> None:
            inner.wait_for([inner_token])
            calls.append(f"inner waiter {p}")

        inner.register(inner_waiter)

        def outer(p: Any) -> None:
            calls.append(f"outer {p}")
            assert not inner.is_dispatching
            inner.dispatch(p + 1)
            # wait_for on d from here is still fine: d's dispatch is running.
            d.wait_for([])

        d.register(outer)
        d.dispatch(1)
    assert calls == ["outer 1", "inner 2", "inner waiter 2"]


def test_wait_for_on_another_dispatcher_from_a_callback_is_not_dispatching(
    d: flux.Dispatcher[Any],
) -> None:
    with flux.Dispatcher[Any]() as other:
        other_token = other.register(lambda p: None)
        errors: list[BaseException] = []

        def cb(p: Any) -> None:
            try:
                other.wait_for([other_token])
            except flux.NotDispatchingError as exc:
                errors.append(exc)

        d.register(cb)
        d.dispatch(None)
        assert len(errors) == 1


# -- wait_for ---------------------------------------------------------------------


def test_wait_for_runs_the_named_callbacks_in_the_order_given(d: flux.Dispatcher[Any]) -> None:
    calls: list[str] = []
    tokens: dict[str, flux.Token] = {}

    def first(p: Any) -> None:
        d.wait_for([tokens["c"], tokens["b"]])
        calls.append("a")

    tokens["a"] = d.register(first)
    tokens["b"] = d.register(lambda p: calls.append("b"))
    tokens["c"] = d.register(lambda p: calls.append("c"))
    d.dispatch(None)
    assert calls == ["c", "b", "a"]


def test_wait_for_skips_callbacks_already_handled(d: flux.Dispatcher[Any]) -> None:
    calls: list[str] = []
    early = d.register(lambda p: calls.append("early"))

    def late(p: Any) -> None:
        d.wait_for([early, early])  # handled already, and named twice
        d.wait_for([early])
        calls.append("late")

    d.register(late)
    d.dispatch(None)
    assert calls == ["early", "late"]


def test_wait_for_accepts_any_iterable(d: flux.Dispatcher[Any]) -> None:
    calls: list[str] = []
    tokens: list[flux.Token] = []

    def waiter(p: Any) -> None:
        d.wait_for(iter(tokens[1:2]))
        d.wait_for(t for t in tokens[2:3])
        d.wait_for({tokens[3]})
        d.wait_for((tokens[4],))
        d.wait_for({tokens[5]: None})
        d.wait_for([])
        d.wait_for(())
        calls.append("waiter")

    tokens.append(d.register(waiter))
    for i in range(1, 6):

        def record(p: Any, i: int = i) -> None:
            calls.append(str(i))

        tokens.append(d.register(record))
    d.dispatch(None)
    assert calls == ["1", "2", "3", "4", "5", "waiter"]


def test_wait_for_chains_of_any_depth(d: flux.Dispatcher[Any]) -> None:
    depth = 200
    calls: list[int] = []
    tokens: list[flux.Token] = []

    def link(i: int) -> Any:
        def cb(p: Any) -> None:
            if i + 1 < depth:
                d.wait_for([tokens[i + 1]])
            calls.append(i)

        return cb

    for i in range(depth):
        tokens.append(d.register(link(i)))
    d.dispatch(None)
    assert calls == list(reversed(range(depth)))


def test_the_flight_example_order(d: flux.Dispatcher[Any]) -> None:
    calls: list[str] = []
    tokens: dict[str, flux.Token] = {}

    def price(p: Any) -> None:
        d.wait_for([tokens["city"]])
        calls.append("price")

    def city(p: Any) -> None:
        d.wait_for([tokens["country"]])
        calls.append("city")

    tokens["price"] = d.register(price)
    tokens["city"] = d.register(city)
    tokens["country"] = d.register(lambda p: calls.append("country"))
    d.dispatch("country-update")
    assert calls == ["country", "city", "price"]


def test_wait_for_checks_every_token_before_running_any(d: flux.Dispatcher[Any]) -> None:
    calls: list[str] = []
    tokens: dict[str, flux.Token] = {}
    errors: list[BaseException] = []

    def waiter(p: Any) -> None:
        try:
            d.wait_for([tokens["b"], flux.Token(d._serial, 99)])
        except flux.UnknownTokenError as exc:
            errors.append(exc)
            calls.append("b not run yet" if "b" not in calls else "b ran")

    tokens["a"] = d.register(waiter)
    tokens["b"] = d.register(lambda p: calls.append("b"))
    d.dispatch(None)
    assert calls == ["b not run yet", "b"]
    assert "99" in str(errors[0])


def test_wait_for_skips_a_token_that_a_callback_it_ran_unregistered(d: flux.Dispatcher[Any]) -> None:
    calls: list[str] = []
    tokens: dict[str, flux.Token] = {}

    def waiter(p: Any) -> None:
        d.wait_for([tokens["remover"], tokens["target"]])  # both checked, then run in turn
        calls.append("waiter")

    def remover(p: Any) -> None:
        d.unregister(tokens["target"])
        calls.append("remover")

    d.register(waiter)
    tokens["remover"] = d.register(remover)
    tokens["target"] = d.register(lambda p: calls.append("target"))
    d.dispatch(None)
    assert calls == ["remover", "waiter"]


def test_circular_wait_names_the_token(d: flux.Dispatcher[Any]) -> None:
    tokens: dict[str, flux.Token] = {}
    errors: list[flux.FluxError] = []

    def a(p: Any) -> None:
        d.wait_for([tokens["b"]])

    def b(p: Any) -> None:
        try:
            d.wait_for([tokens["a"]])
        except flux.CircularDependencyError as exc:
            errors.append(exc)

    tokens["a"] = d.register(a)
    tokens["b"] = d.register(b)
    d.dispatch(None)  # b swallowed it: the dispatch succeeds
    assert len(errors) == 1
    assert errors[0].status == flux.Status.ERR_CIRCULAR
    assert str(tokens["a"].value) in str(errors[0])
    assert "flux_wait_for" in str(errors[0])


def test_a_circular_wait_that_is_swallowed_leaves_the_callback_pending(
    d: flux.Dispatcher[Any],
) -> None:
    calls: list[str] = []
    tokens: dict[str, flux.Token] = {}

    def a(p: Any) -> None:
        try:
            d.wait_for([tokens["a"]])
        except flux.CircularDependencyError:
            calls.append("a: circular")
        calls.append("a")

    def b(p: Any) -> None:
        d.wait_for([tokens["a"]])
        calls.append("b")

    tokens["a"] = d.register(a)
    d.register(b)
    d.dispatch(None)
    assert calls == ["a: circular", "a", "b"]


# -- participants are fixed when the dispatch starts ------------------------------------


def test_a_callback_registered_during_a_dispatch_joins_the_next_one(
    d: flux.Dispatcher[Any],
) -> None:
    calls: list[str] = []
    joined: list[flux.Token] = []
    errors: list[flux.FluxError] = []

    def registrar(p: Any) -> None:
        calls.append(f"registrar {p}")
        if not joined:
            joined.append(d.register(lambda q: calls.append(f"joined {q}")))
            try:
                d.wait_for(joined)
            except flux.UnknownTokenError as exc:
                errors.append(exc)

    d.register(registrar)
    d.dispatch(1)
    assert calls == ["registrar 1"]
    assert len(errors) == 1
    message = str(errors[0])
    assert str(joined[0].value) in message and "during" in message, message
    d.dispatch(2)
    assert calls == ["registrar 1", "registrar 2", "joined 2"]


def test_a_callback_unregistered_during_a_dispatch_is_not_called_after_that(
    d: flux.Dispatcher[Any],
) -> None:
    calls: list[str] = []
    tokens: dict[str, flux.Token] = {}
    errors: list[BaseException] = []

    def remover(p: Any) -> None:
        calls.append("remover")
        d.unregister(tokens["victim"])
        try:
            d.wait_for([tokens["victim"]])
        except flux.UnknownTokenError as exc:
            errors.append(exc)

    d.register(remover)
    tokens["victim"] = d.register(lambda p: calls.append("victim"))
    d.register(lambda p: calls.append("after"))
    d.dispatch(None)
    assert calls == ["remover", "after"]
    assert len(errors) == 1
    with pytest.raises(flux.UnknownTokenError):
        d.unregister(tokens["victim"])


def test_a_callback_may_unregister_itself(d: flux.Dispatcher[Any]) -> None:
    calls: list[str] = []
    tokens: dict[str, flux.Token] = {}

    def once(p: Any) -> None:
        calls.append(f"once {p}")
        d.unregister(tokens["once"])

    tokens["once"] = d.register(once)
    d.register(lambda p: calls.append(f"other {p}"))
    d.dispatch(1)
    d.dispatch(2)
    assert calls == ["once 1", "other 1", "other 2"]


# -- failing callbacks -------------------------------------------------------------


class Boom(Exception):
    pass


def test_a_failing_callback_aborts_the_dispatch_and_its_exception_propagates(
    d: flux.Dispatcher[Any],
) -> None:
    calls: list[str] = []
    boom = Boom("the original")

    def fail(p: Any) -> None:
        calls.append("fail")
        if p == "fail":
            raise boom

    d.register(lambda p: calls.append("before"))
    d.register(fail)
    d.register(lambda p: calls.append("after"))
    with pytest.raises(Boom) as info:
        d.dispatch("fail")
    assert info.value is boom
    assert calls == ["before", "fail"]
    # Its traceback still reaches into the callback.
    frames = []
    tb = info.value.__traceback__
    while tb is not None:
        frames.append(tb.tb_frame.f_code.co_name)
        tb = tb.tb_next
    assert frames[-3:] == ["dispatch", "_on_callback", "fail"], frames
    assert info.value.__context__ is None and info.value.__cause__ is None

    d.dispatch("ok")  # ready for the next one
    assert calls == ["before", "fail", "before", "fail", "after"]


def test_keyboard_interrupt_and_system_exit_propagate_too(d: flux.Dispatcher[Any]) -> None:
    for exc in (KeyboardInterrupt(), SystemExit(3), GeneratorExit()):

        def raiser(p: Any, exc: BaseException = exc) -> None:
            raise exc

        token = d.register(raiser)
        with pytest.raises(BaseException) as info:
            d.dispatch(None)
        assert info.value is exc
        d.unregister(token)
    assert not d.is_dispatching


def test_a_failure_reaches_the_waiter_through_wait_for(d: flux.Dispatcher[Any]) -> None:
    boom = Boom()
    calls: list[str] = []
    seen: list[BaseException] = []
    tokens: dict[str, flux.Token] = {}

    def waiter(p: Any) -> None:
        try:
            d.wait_for([tokens["failing"]])
        except Boom as exc:
            seen.append(exc)
            raise
        calls.append("waiter went on")  # pragma: no cover

    def failing(p: Any) -> None:
        raise boom

    d.register(waiter)
    tokens["failing"] = d.register(failing)
    d.register(lambda p: calls.append("later"))
    with pytest.raises(Boom) as info:
        d.dispatch(None)
    assert seen == [boom] and info.value is boom
    assert calls == []


def test_the_dispatch_aborts_even_if_the_waiter_swallows_the_failure(
    d: flux.Dispatcher[Any],
) -> None:
    boom = Boom()
    calls: list[str] = []
    tokens: dict[str, flux.Token] = {}

    def waiter(p: Any) -> None:
        try:
            d.wait_for([tokens["failing"]])
        except Boom:
            calls.append("swallowed")
        # Later wait_for calls in the aborting dispatch report it again.
        with pytest.raises(Boom) as again:
            d.wait_for([])
        assert again.value is boom
        calls.append("waiter returns")

    def failing(p: Any) -> None:
        raise boom

    d.register(waiter)
    tokens["failing"] = d.register(failing)
    d.register(lambda p: calls.append("later"))
    with pytest.raises(Boom) as info:
        d.dispatch(None)
    assert info.value is boom
    assert calls == ["swallowed", "waiter returns"]
    assert not d.is_dispatching


@pytest.mark.parametrize("callback", ["a generator's send", "a function resuming a generator"])
def test_a_failure_swallowed_in_a_generator_that_then_suspends_still_propagates(
    d: flux.Dispatcher[Any], callback: str
) -> None:
    # A suspended generator's frame has no f_back: the failure's entry, made
    # under it, must still be known as this dispatch's once it has yielded.
    boom = Boom()
    tokens: dict[str, flux.Token] = {}

    def machine() -> Any:
        while True:
            yield
            try:
                d.wait_for([tokens["failing"]])
            except Boom:
                pass  # the dispatch is aborted all the same

    gen = machine()
    next(gen)

    def resume(p: Any) -> None:
        next(gen)

    d.register(gen.send if callback == "a generator's send" else resume)

    def failing(p: Any) -> None:
        raise boom

    tokens["failing"] = d.register(failing)
    with pytest.raises(Boom) as info:
        d.dispatch(None)
    assert info.value is boom
    assert not d._pending  # nothing kept for a later call
    gen.close()


def test_a_waiter_may_turn_the_failure_into_another_exception(d: flux.Dispatcher[Any]) -> None:
    tokens: dict[str, flux.Token] = {}

    class Wrapped(Exception):
        pass

    def waiter(p: Any) -> None:
        try:
            d.wait_for([tokens["failing"]])
        except Boom as exc:
            raise Wrapped("in the waiter") from exc

    def failing(p: Any) -> None:
        raise Boom("at the root")

    d.register(waiter)
    tokens["failing"] = d.register(failing)
    with pytest.raises(Wrapped) as info:
        d.dispatch(None)
    assert isinstance(info.value.__cause__, Boom)


def test_a_failure_in_a_nested_dispatcher_propagates_through_the_outer_one(
    d: flux.Dispatcher[Any],
) -> None:
    boom = Boom()
    calls: list[str] = []
    with flux.Dispatcher[Any]() as inner:
        inner.register(lambda p: (_ for _ in ()).throw(boom))
        d.register(lambda p: inner.dispatch(p))
        d.register(lambda p: calls.append("after"))
        with pytest.raises(Boom) as info:
            d.dispatch(None)
        assert info.value is boom
        assert calls == []
        assert not inner.is_dispatching and not d.is_dispatching


def test_a_swallowed_nested_failure_does_not_leak_into_the_outer_dispatch(
    d: flux.Dispatcher[Any],
) -> None:
    calls: list[str] = []
    with flux.Dispatcher[Any]() as inner:
        inner.register(lambda p: (_ for _ in ()).throw(Boom()))

        def outer(p: Any) -> None:
            with pytest.raises(Boom):
                inner.dispatch(p)
            calls.append("outer")

        d.register(outer)
        d.register(lambda p: calls.append("after"))
        d.dispatch(None)
        assert calls == ["outer", "after"]


def test_native_failures_without_a_python_exception_raise_callback_failed(
    d: flux.Dispatcher[Any],
) -> None:
    # A registration made directly through the C ABI whose callback returns 1:
    # no Python exception exists, so dispatch raises CallbackFailedError.
    from ctypes import byref, c_uint64

    from flux import _native

    native = _native.CALLBACK(lambda context, payload: 7)
    token = c_uint64()
    _native.flux_register(d._handle, native, None, _native.DESTROY(), byref(token))
    with pytest.raises(flux.CallbackFailedError) as info:
        d.dispatch(None)
    assert info.value.status == flux.Status.ERR_CALLBACK_FAILED
    assert str(token.value) in str(info.value)
    _native.flux_unregister(d._handle, token.value)
