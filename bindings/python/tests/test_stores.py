"""flux.Store, flux.ReduceStore, flux.StoreGroup, flux.Action and
@flux.handles: Facebook's FluxStore-test.js, FluxReduceStore-test.js and
FluxStoreGroup-test.js case by case, then DESIGN.md section 6's rules."""

from __future__ import annotations

import collections.abc
import copy
import gc
import pickle
import sys
import threading
import time
import types
import weakref
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from on_threads import all_return

import flux
from flux.dispatcher import Token
from flux.stores import live_objects


@pytest.fixture(autouse=True)
def no_store_objects_left() -> Any:
    yield
    gc.collect()
    assert live_objects() == 0


class Spy:
    def __init__(self) -> None:
        self.calls = 0

    def __call__(self) -> None:
        self.calls += 1


# ---------------------------------------------------------------------------
# FluxStore-test.js
# ---------------------------------------------------------------------------


class FluxTestStore(flux.Store):
    def on_dispatch(self, action: Any) -> None:
        if action["type"] == "store-will-change-state":
            self.emit_change()


class IncompleteFluxStore(flux.Store):
    pass


class IllegalFluxStore(flux.Store):
    def on_dispatch(self, action: Any) -> None:
        pass

    def illegal_emit(self) -> None:
        self.emit_change()


def test_registers_a_callback_with_the_dispatcher(d: flux.Dispatcher[Any]) -> None:
    store = FluxTestStore(d)
    token = d.register(lambda payload: None)
    assert token.value == store.dispatch_token.value + 1


def test_requires_that_subclasses_override_the___onDispatch_method(d: flux.Dispatcher[Any]) -> None:
    IncompleteFluxStore(d)
    with pytest.raises(NotImplementedError):
        d.dispatch({"type": "action-type"})
    FluxTestStore(d)
    d.close()
    d2: flux.Dispatcher[Any] = flux.Dispatcher()
    FluxTestStore(d2)
    d2.dispatch({"type": "action-type"})  # does not throw
    d2.close()


def test_throws_when___emitChange_is_invoked_outside_of_a_dispatch(d: flux.Dispatcher[Any]) -> None:
    store = IllegalFluxStore(d)
    with pytest.raises(flux.NotDispatchingError):
        store.illegal_emit()


def test_throws_when_hasChanged_is_invoked_outside_of_a_dispatch(d: flux.Dispatcher[Any]) -> None:
    store = FluxTestStore(d)
    with pytest.raises(flux.NotDispatchingError):
        store.has_changed()


def test_emits_an_event_on_state_change(d: flux.Dispatcher[Any]) -> None:
    store = FluxTestStore(d)
    spy = Spy()
    store.add_listener(spy)
    d.dispatch({"type": "store-will-change-state"})
    assert spy.calls == 1


def test_exposes_whether_the_state_has_changed_during_current_dispatch(d: flux.Dispatcher[Any]) -> None:
    store = FluxTestStore(d)
    seen: list[bool] = []

    def after(payload: Any) -> None:
        d.wait_for([store.dispatch_token])
        seen.append(store.has_changed())

    d.register(after)
    d.dispatch({"type": "store-will-change-state"})
    d.dispatch({"type": "store-will-ignore"})
    assert seen == [True, False]


def test_exposes_the_dispatch_token_in_a_getter(d: flux.Dispatcher[Any]) -> None:
    store = FluxTestStore(d)
    assert store.dispatch_token
    assert isinstance(store.dispatch_token, flux.Token)
    assert store.dispatcher is d


def test_wraps_EventEmitter_addListener_with_an_addListener_method(d: flux.Dispatcher[Any]) -> None:
    store = FluxTestStore(d)
    spy = Spy()
    sub = store.add_listener(spy)
    assert isinstance(sub, flux.Subscription) and sub.id == 1
    d.dispatch({"type": "store-will-change-state"})
    sub.remove()
    d.dispatch({"type": "store-will-change-state"})
    assert spy.calls == 1
    with pytest.raises(TypeError):
        store.add_listener("not callable")  # type: ignore[arg-type]


def test_removing_a_subscription_twice_names_its_own_id(d: flux.Dispatcher[Any]) -> None:
    # A ReduceStore's own listener (see stores._settle) takes libflux ids
    # too, so libflux's id for a listener is not its Subscription.id: the
    # error must name the id the caller knows, never libflux's.
    store = Counter(d)
    store.add_listener(Spy()).remove()
    sub = store.add_listener(Spy())
    assert sub.id == 2
    sub.remove()
    with pytest.raises(flux.UnknownTokenError) as info:
        sub.remove()
    assert "subscription 2 " in str(info.value)
    assert "listener" not in str(info.value).replace("remove_listener", "")


# ---------------------------------------------------------------------------
# FluxReduceStore-test.js
# ---------------------------------------------------------------------------


class Map:
    """Immutable.Map's part: set() returns the same map when nothing changes."""

    def __init__(self, items: dict[str, Any] | None = None) -> None:
        self._items = dict(items or {})

    def get(self, key: str) -> Any:
        return self._items.get(key)

    def has(self, key: str) -> bool:
        return key in self._items

    def set(self, key: str, value: Any) -> Map:
        if key in self._items and self._items[key] == value:
            return self
        return Map({**self._items, key: value})

    def clear(self) -> Map:
        return Map() if self._items else self


class FooStore(flux.ReduceStore[Map]):
    def get_initial_state(self) -> Map:
        return Map()

    def reduce(self, state: Map, action: Any) -> Map:
        t = action["type"]
        if t == "foo":
            return state.set("foo", action["foo"])
        if t == "bar":
            return state.set("bar", action["bar"])
        if t == "foobar":
            return state.set("foo", action["foo"]).set("bar", action["bar"])
        if t == "boom":
            return state.clear()
        return state


@pytest.fixture
def foo(d: flux.Dispatcher[Any]) -> tuple[FooStore, Spy]:
    store = FooStore(d)
    on_change = Spy()
    store.add_listener(on_change)
    return store, on_change


def test_should_respond_to_actions(d: flux.Dispatcher[Any], foo: tuple[FooStore, Spy]) -> None:
    store, _ = foo
    assert store.get_state().get("foo") is None
    assert not store.get_state().has("foo")
    d.dispatch({"type": "foo", "foo": 100})
    assert store.get_state().get("foo") == 100
    assert store.get_state().has("foo")


def test_should_only_emit_one_change_for_multiple_cache_changes(
    d: flux.Dispatcher[Any], foo: tuple[FooStore, Spy]
) -> None:
    store, on_change = foo
    d.dispatch({"type": "foo", "foo": 100})
    assert on_change.calls == 1
    assert store.get_state().get("foo") == 100
    d.dispatch({"type": "foobar", "foo": 200, "bar": 400})
    assert on_change.calls == 2
    assert store.get_state().get("foo") == 200
    assert store.get_state().get("bar") == 400


def test_should_not_emit_for_empty_changes(d: flux.Dispatcher[Any], foo: tuple[FooStore, Spy]) -> None:
    store, on_change = foo
    d.dispatch({"type": "foo", "foo": 100})
    assert on_change.calls == 1
    d.dispatch({"type": "foo", "foo": 100})
    assert on_change.calls == 1
    assert store.get_state().get("foo") == 100


def test_should_clear_the_cache(d: flux.Dispatcher[Any], foo: tuple[FooStore, Spy]) -> None:
    store, on_change = foo
    d.dispatch({"type": "foo", "foo": 100})
    assert on_change.calls == 1
    d.dispatch({"type": "boom"})
    assert on_change.calls == 2
    assert store.get_state().get("foo") is None
    assert not store.get_state().has("foo")


# ---------------------------------------------------------------------------
# FluxStoreGroup-test.js
# ---------------------------------------------------------------------------


class SimpleStore(flux.Store):
    def on_dispatch(self, payload: Any) -> None:
        self.emit_change()


def test_should_register_a_callback_with_the_dispatcher(d: flux.Dispatcher[Any]) -> None:
    a, b = SimpleStore(d), SimpleStore(d)
    callback = Spy()
    flux.StoreGroup([a, b], callback)
    d.dispatch({"type": "foo"})
    assert callback.calls == 1


def test_should_wait_for_the_store_dependencies(d: flux.Dispatcher[Any]) -> None:
    a, b = SimpleStore(d), SimpleStore(d)
    seen: list[bool] = []

    def callback() -> None:
        seen.extend([a.has_changed(), b.has_changed()])

    flux.StoreGroup([a, b], callback)
    d.dispatch({"type": "foo"})
    assert seen == [True, True]


def test_should_not_run_the_callback_after_being_released(d: flux.Dispatcher[Any]) -> None:
    a, b = SimpleStore(d), SimpleStore(d)
    callback = Spy()
    group = flux.StoreGroup([a, b], callback)
    group.release()
    d.dispatch({"type": "foo"})
    assert callback.calls == 0


def test_a_refused_group_release_leaves_the_group_live(
    d: flux.Dispatcher[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    # flux.h: flux_store_group_release() may refuse (out of memory during a
    # dispatch), and then nothing changed: the group stays registered, keeps
    # its stores, and must still be released. (libflux's refusal is faked:
    # it runs out of memory only in the C tests.)
    store = SimpleStore(d)
    callback = Spy()
    group = flux.StoreGroup([store], callback)

    refused: list[BaseException] = []

    def refuse(handle: Any) -> int:
        return int(flux.Status.ERR_NO_MEMORY)

    def release_during_the_dispatch(payload: Any) -> None:
        try:
            group.release()
        except flux.NoMemoryError as exc:
            refused.append(exc)

    token = d.register(release_during_the_dispatch)
    with monkeypatch.context() as patched:
        patched.setattr("flux.stores._flux_store_group_release_raw", refuse)
        d.dispatch({"type": "foo"})
    d.unregister(token)
    assert len(refused) == 1
    d.dispatch({"type": "foo"})
    assert callback.calls == 2, "the group is still registered"
    group.release()  # and can still be released
    d.dispatch({"type": "foo"})
    assert callback.calls == 2
    store.close()  # which lets its store go


def test_a_group_function_that_is_not_callable_is_refused_and_nothing_registered(d: flux.Dispatcher[Any]) -> None:
    # Refused at once, not by every later dispatch failing.
    store = SimpleStore(d)
    before = live_objects()
    with pytest.raises(TypeError, match="fn must be callable"):
        flux.StoreGroup([store], 42)  # type: ignore[arg-type]
    assert live_objects() == before
    d.dispatch("x")
    store.close()  # in no group


def test_should_have_at_least_one_store() -> None:
    with pytest.raises(flux.InvalidArgumentError):
        flux.StoreGroup([], Spy())


def test_should_make_sure_dispatchers_are_uniform_in_DEV(d: flux.Dispatcher[Any]) -> None:
    other: flux.Dispatcher[Any] = flux.Dispatcher()
    a, c = SimpleStore(d), SimpleStore(other)
    with pytest.raises(flux.InvalidArgumentError):
        flux.StoreGroup([a, c], Spy())
    other.close()


# ---------------------------------------------------------------------------
# DESIGN.md section 6
# ---------------------------------------------------------------------------


class Counter(flux.ReduceStore[int]):
    def get_initial_state(self) -> int:
        return 0

    def reduce(self, state: int, action: Any) -> int:
        if action == "fail":
            raise Boom("reduce")
        return state + 1 if action == "inc" else state


class Boom(Exception):
    pass


def test_a_reduce_exception_comes_out_of_dispatch_unchanged(d: flux.Dispatcher[Any]) -> None:
    store = Counter(d)
    spy = Spy()
    store.add_listener(spy)
    d.dispatch("inc")
    with pytest.raises(Boom) as info:
        d.dispatch("fail")
    assert str(info.value) == "reduce"
    assert info.value.__traceback__ is not None
    assert store.state == 1 and spy.calls == 1
    d.dispatch("inc")
    assert store.state == 2


def test_a_listener_exception_stops_the_emit_and_comes_out_of_dispatch(d: flux.Dispatcher[Any]) -> None:
    store = Counter(d)
    error = Boom("listener")

    def bad() -> None:
        raise error

    after = Spy()
    store.add_listener(bad)
    store.add_listener(after)
    later = Spy()
    d.register(lambda payload: later())
    with pytest.raises(Boom) as info:
        d.dispatch("inc")
    assert info.value is error
    assert after.calls == 0 and later.calls == 0
    assert store.state == 1  # the state had changed before the listeners ran


def test_a_group_exception_comes_out_of_dispatch(d: flux.Dispatcher[Any]) -> None:
    store = Counter(d)
    error = Boom("group")

    def bad() -> None:
        raise error

    flux.StoreGroup([store], bad)
    with pytest.raises(Boom) as info:
        d.dispatch("inc")
    assert info.value is error


def test_reduce_failing_mid_chain(d: flux.Dispatcher[Any]) -> None:
    seen: list[str] = []
    low_box: list[Counter] = []

    class Top(flux.ReduceStore[int]):
        def get_initial_state(self) -> int:
            return 100

        def reduce(self, state: int, action: Any) -> int:
            try:
                d.wait_for([low_box[0].dispatch_token])
            except Boom as exc:
                seen.append(f"top saw {exc}")
            return state + 1

    top = Top(d)
    low = Counter(d)
    low_box.append(low)
    spy = Spy()
    top.add_listener(spy)
    low.add_listener(spy)
    with pytest.raises(Boom):
        d.dispatch("fail")
    assert seen == ["top saw reduce"]
    assert top.state == 100 and low.state == 0 and spy.calls == 0
    d.dispatch("inc")
    assert top.state == 101 and low.state == 1 and spy.calls == 2


def test_states_are_held_exactly_as_long_as_the_store_holds_them(d: flux.Dispatcher[Any]) -> None:
    class Box:
        pass

    initial = [Box()]
    first_ref = weakref.ref(initial[0])
    made: list[weakref.ref[Box]] = []

    class Boxes(flux.ReduceStore[Box]):
        def get_initial_state(self) -> Box:
            return initial.pop()  # the store's reference is then the only one

        def reduce(self, state: Box, action: Any) -> Box:
            if action == "new":
                box = Box()
                made.append(weakref.ref(box))
                return box
            return state

    store = Boxes(d)
    gc.collect()
    assert first_ref() is not None, "the store holds its initial state"
    d.dispatch("same")
    assert first_ref() is not None
    d.dispatch("new")
    gc.collect()
    assert first_ref() is None, "a replaced state is released"
    current = made[0]
    assert current() is store.state
    store.close()
    gc.collect()
    assert current() is None, "the last state is released on close"


class Box:
    """A state that can be weakly referenced."""


class Boxes(flux.ReduceStore[Box]):
    """A new Box for "new"; for "swallow", a new Box after a wait for
    ``failing``, which fails (so the dispatch fails, and the store keeps its
    state). ``made`` watches every new Box."""

    def get_initial_state(self) -> Box:
        self.failing: flux.Token | None = None
        self.made: list[weakref.ref[Box]] = []
        return Box()

    def reduce(self, state: Box, action: Any) -> Box:
        if action == "swallow":
            assert self.failing is not None
            try:
                self.dispatcher.wait_for([self.failing])
            except Boom:
                pass
        elif action != "new":
            return state
        box = Box()
        self.made.append(weakref.ref(box))
        return box


def test_a_replaced_state_is_let_go_before_the_listeners_run(d: flux.Dispatcher[Any]) -> None:
    store = Boxes(d)
    old = weakref.ref(store.state)
    seen: list[bool] = []
    store.add_listener(lambda: seen.append(gc.collect() >= 0 and old() is None))
    store.add_listener(lambda: seen.append(old() is None))
    d.dispatch("new")
    assert seen == [True, True]
    store.close()


@pytest.mark.parametrize("with_listener", [False, True])
def test_a_state_replaced_by_none_is_let_go_in_its_dispatch(d: flux.Dispatcher[Any], with_listener: bool) -> None:
    # None is a state like any other: a change to it is settled as any is.
    class User:
        pass

    class CurrentUser(flux.ReduceStore[Any]):
        def get_initial_state(self) -> Any:
            return None

        def reduce(self, state: Any, action: Any) -> Any:
            return User() if action == "login" else None if action == "logout" else state

    store = CurrentUser(d)
    d.dispatch("login")
    old = weakref.ref(store.state)
    seen: list[bool] = []
    if with_listener:
        store.add_listener(lambda: seen.append(old() is None))
    d.dispatch("logout")
    assert store.state is None
    assert old() is None, "the replaced state is let go in the dispatch that replaced it"
    assert seen == ([True] if with_listener else [])
    d.dispatch("login")
    assert isinstance(store.state, User)
    store.close()


@pytest.mark.parametrize("listeners", ["never", "removed", "owner collected"])
def test_a_store_with_no_listener_lets_a_replaced_state_go_in_its_dispatch(
    d: flux.Dispatcher[Any], listeners: str
) -> None:
    class Owner:
        def changed(self) -> None:
            pass

    store = Boxes(d)
    if listeners == "removed":
        store.add_listener(Spy()).remove()
    elif listeners == "owner collected":
        owner = Owner()
        store.add_listener(owner.changed, owner=owner)
        del owner
        gc.collect()
    for _ in range(3):
        old = weakref.ref(store.state)
        d.dispatch("new")
        assert old() is None, "the replaced state is let go"
    assert [s.id for s in (store.add_listener(Spy()), store.add_listener(Spy()))] == (
        [1, 2] if listeners == "never" else [2, 3]
    ), "Subscription ids count up from 1"
    store.close()


def test_a_new_state_of_a_failed_dispatch_is_let_go_at_the_next_handling(d: flux.Dispatcher[Any]) -> None:
    store = Boxes(d)

    def fail(p: Any) -> None:
        if p == "swallow":
            raise Boom("fail")

    store.failing = d.register(fail)  # after the store: its reduce waits for it
    spy = Spy()
    store.add_listener(spy)
    kept = store.state
    with pytest.raises(Boom):
        d.dispatch("swallow")
    assert store.state is kept and spy.calls == 0, "the store kept its state"
    d.dispatch("same")
    gc.collect()
    assert store.made[0]() is None, "and goes then"
    assert store.state is kept
    d.dispatch("new")
    assert store.state is not kept and spy.calls == 1
    store.close()


def test_refcounts_balance_over_many_dispatches(d: flux.Dispatcher[Any]) -> None:
    token = object()

    class Same(flux.ReduceStore[object]):
        def get_initial_state(self) -> object:
            return token

        def reduce(self, state: object, action: Any) -> object:
            return token if action == "same" else object()

    store = Same(d)
    before = sys.getrefcount(token)
    for _ in range(100):
        d.dispatch("same")
    assert sys.getrefcount(token) == before
    d.dispatch("new")
    assert sys.getrefcount(token) == before - 1
    store.close()


def test_are_equal_overridden_decides_and_an_equal_new_state_is_dropped(d: flux.Dispatcher[Any]) -> None:
    calls: list[tuple[Any, Any]] = []

    class Tens(flux.ReduceStore[int]):
        def get_initial_state(self) -> int:
            return 0

        def reduce(self, state: int, action: Any) -> int:
            return int(action)

        def are_equal(self, one: int, two: int) -> bool:
            calls.append((one, two))
            return one // 10 == two // 10

    store = Tens(d)
    spy = Spy()
    store.add_listener(spy)
    d.dispatch(5)
    assert store.state == 0 and spy.calls == 0
    d.dispatch(15)
    assert store.state == 15 and spy.calls == 1
    assert calls == [(0, 5), (0, 15)], "current first, then next"


def test_are_equal_raising_fails_the_dispatch(d: flux.Dispatcher[Any]) -> None:
    class Picky(Counter):
        def are_equal(self, one: int, two: int) -> bool:
            raise Boom("equal")

    store = Picky(d)
    with pytest.raises(Boom):
        d.dispatch("inc")
    assert store.state == 0


def test_default_equality_is_identity(d: flux.Dispatcher[Any]) -> None:
    class Lists(flux.ReduceStore[list[int]]):
        def get_initial_state(self) -> list[int]:
            return []

        def reduce(self, state: list[int], action: Any) -> list[int]:
            return list(state)  # equal, but not the same object

    store = Lists(d)
    spy = Spy()
    store.add_listener(spy)
    d.dispatch("x")
    assert spy.calls == 1


def test_are_equal_left_undefined_is_never_called(d: flux.Dispatcher[Any]) -> None:
    # DESIGN.md 6: "are_equal left undefined costs no crossing into Python":
    # libflux compares the identities itself, so not even a replacement
    # found on the instance is asked.
    class Lists(flux.ReduceStore[list[int]]):
        def get_initial_state(self) -> list[int]:
            return []

        def reduce(self, state: list[int], action: Any) -> list[int]:
            return state if action == "same" else list(state)

    asked: list[tuple[Any, Any]] = []

    def are_equal(one: list[int], two: list[int]) -> bool:
        asked.append((one, two))
        return True

    store = Lists(d)
    store.are_equal = are_equal  # type: ignore[method-assign]
    spy = Spy()
    store.add_listener(spy)
    d.dispatch("same")
    d.dispatch("new")
    assert asked == []
    assert spy.calls == 1, "identity decided: only the new list was a change"
    store.close()


def test_handles_routes_by_action_type_and_falls_back(d: flux.Dispatcher[Any]) -> None:
    class User(flux.ReduceStore[Any]):
        def get_initial_state(self) -> Any:
            return None

        @flux.handles("user-refreshed")
        def on_refreshed(self, state: Any, action: flux.Action) -> Any:
            return action.payload

        @flux.handles("user-cleared")
        @flux.handles("user-logged-out")
        def on_cleared(self, state: Any, action: Any) -> Any:
            return None

    class UserWithFallback(User):
        def reduce(self, state: Any, action: Any) -> Any:
            return ("fallback", _type(action))

    def _type(action: Any) -> Any:
        return action.type if isinstance(action, flux.Action) else action["type"]

    user = User(d)
    fallback = UserWithFallback(d)
    d.dispatch(flux.Action("user-refreshed", {"name": "ada"}))
    assert user.state == {"name": "ada"} and fallback.state == {"name": "ada"}
    d.dispatch(flux.Action("unrelated"))
    assert user.state == {"name": "ada"}, "unrouted, no reduce: the state stays"
    assert fallback.state == ("fallback", "unrelated"), "unrouted: reduce"
    d.dispatch({"type": "user-logged-out"})
    assert user.state is None, "a mapping with a 'type' routes too; one method may handle several types"


def test_a_subclass_overriding_a_routed_method_is_routed_to_its_override(d: flux.Dispatcher[Any]) -> None:
    # As a method call would: the route names the method, and the class's
    # own (most derived) definition of it handles the action.
    class User(flux.ReduceStore[Any]):
        def get_initial_state(self) -> Any:
            return None

        @flux.handles("user-refreshed")
        def on_refreshed(self, state: Any, action: flux.Action) -> Any:
            return ("base", action.payload)

    class Admin(User):
        def on_refreshed(self, state: Any, action: flux.Action) -> Any:
            return ("admin", action.payload)

    class Guest(Admin):
        pass

    user, admin, guest = User(d), Admin(d), Guest(d)
    d.dispatch(flux.Action("user-refreshed", "ada"))
    assert user.state == ("base", "ada")
    assert admin.state == ("admin", "ada"), "the override, not the method it overrides"
    assert guest.state == ("admin", "ada"), "inherited from the override"


def test_an_unhashable_action_type_is_unhandled(d: flux.Dispatcher[Any]) -> None:
    class Todos(flux.ReduceStore[Any]):
        def get_initial_state(self) -> Any:
            return ()

        @flux.handles("add")
        def add(self, state: Any, action: Any) -> Any:
            return (*state, action["text"])

    class TodosWithFallback(Todos):
        def reduce(self, state: Any, action: Any) -> Any:
            return ("fallback", action["type"])

    todos, fallback = Todos(d), TodosWithFallback(d)
    d.dispatch({"type": "add", "text": "milk"})
    for unhashable in (["batch", "of", "types"], {"kind": "x"}):
        d.dispatch({"type": unhashable})
        assert todos.state == ("milk",), "unrouted, no reduce: the state stays"
        assert fallback.state == ("fallback", unhashable), "unrouted: reduce"


def test_an_action_with_no_type_is_not_routed_to_handles_none(d: flux.Dispatcher[Any]) -> None:
    # Only an Action, an object with a type attribute or a mapping with a
    # "type" key is routed: a payload with no type at all is unhandled,
    # not an action of type None.
    class Log(flux.ReduceStore[Any]):
        def get_initial_state(self) -> Any:
            return ()

        @flux.handles(None)
        def untyped(self, state: Any, action: Any) -> Any:
            return (*state, ("routed", action))

    class LogWithFallback(Log):
        def reduce(self, state: Any, action: Any) -> Any:
            return (*state, ("fallback", action))

    log, fallback = Log(d), LogWithFallback(d)
    d.dispatch(flux.Action(None))
    d.dispatch({"type": None})
    assert log.state == (("routed", flux.Action(None)), ("routed", {"type": None})), "type None is a type"
    d.dispatch("plain")
    d.dispatch({"kind": "x"})
    assert len(log.state) == 2, "unrouted, no reduce: the state stays"
    assert fallback.state[2:] == (("fallback", "plain"), ("fallback", {"kind": "x"})), "unrouted: reduce"


class RoutedCount(flux.ReduceStore[int]):
    """Counts the "inc" actions it routes with @handles."""

    def get_initial_state(self) -> int:
        return 0

    @flux.handles("inc")
    def inc(self, state: int, action: Any) -> int:
        return state + 1


def test_a_routed_stores_reduce_routes_too(d: flux.Dispatcher[Any]) -> None:
    # reduce is "the state after action" for a store that routes with
    # @handles, too: called directly, or by a subclass's override through
    # super() for the actions it does not handle itself. It raised
    # NotImplementedError ("must override reduce() or route with @handles").
    class CountWithReset(RoutedCount):
        def reduce(self, state: int, action: Any) -> int:
            if action == "reset":
                return 0
            return super().reduce(state, action)

    count, resettable = RoutedCount(d), CountWithReset(d)
    assert count.reduce(5, flux.Action("inc")) == 6
    assert count.reduce(5, flux.Action("other")) == 5
    d.dispatch(flux.Action("inc"))
    d.dispatch(flux.Action("other"))  # unrouted: the override, then super()
    assert resettable.state == 1 and count.state == 1
    assert resettable.reduce(1, flux.Action("inc")) == 2, "super() routes"
    d.dispatch("reset")
    assert resettable.state == 0


def test_any_mapping_with_a_type_key_routes(d: flux.Dispatcher[Any]) -> None:
    # "a mapping with a 'type' key", not only a dict.
    class Items(collections.abc.Mapping[str, Any]):
        def __init__(self, **items: Any) -> None:
            self.items_ = items

        def __getitem__(self, key: str) -> Any:
            return self.items_[key]

        def __iter__(self) -> Iterator[str]:
            return iter(self.items_)

        def __len__(self) -> int:
            return len(self.items_)

    count = RoutedCount(d)
    d.dispatch({"type": "inc"})
    d.dispatch(types.MappingProxyType({"type": "inc"}))
    d.dispatch(Items(type="inc"))
    d.dispatch(Items(kind="inc"))
    assert count.state == 3

    class Typed(Items):
        type = "inc"  # an attribute comes first, as it did

    d.dispatch(Typed(type="other"))
    assert count.state == 4


def test_a_routed_staticmethod_or_classmethod_is_called_as_a_method_call_would(d: flux.Dispatcher[Any]) -> None:
    # reduce may be a staticmethod; a routed one was called with the store
    # as an extra first argument, and a classmethod not at all.
    class Static(flux.ReduceStore[int]):
        def get_initial_state(self) -> int:
            return 0

        @flux.handles("inc")
        @staticmethod
        def inc(state: int, action: Any) -> int:
            return state + 1

    class Class(flux.ReduceStore[Any]):
        def get_initial_state(self) -> Any:
            return None

        @flux.handles("inc")
        @classmethod
        def inc(cls, state: Any, action: Any) -> Any:
            return (cls.__name__, action.type)

    static, klass = Static(d), Class(d)
    d.dispatch(flux.Action("inc"))
    assert static.state == 1 and klass.state == ("Class", "inc")


@pytest.mark.parametrize(
    "duplicate", [copy.copy, copy.deepcopy, lambda a: pickle.loads(pickle.dumps(a))], ids=["copy", "deepcopy", "pickle"]
)
def test_an_action_is_a_value_that_copies_and_pickles(duplicate: Callable[[Any], Any]) -> None:
    action = flux.Action("failed", ("id", 1), "timeout")
    twin = duplicate(action)
    assert type(twin) is flux.Action and twin == action and hash(twin) == hash(action)
    with pytest.raises(AttributeError):
        twin.type = "other"


def test_action_is_a_name_a_payload_and_an_error() -> None:
    a = flux.Action("failed", error=ValueError("x"))
    assert a.type == "failed" and a.payload is None and isinstance(a.error, ValueError)
    assert flux.Action("t", 1) == flux.Action("t", 1) != flux.Action("t", 2)
    # The error is part of the value: a failed action is not the action.
    assert flux.Action("t", 1, "e") == flux.Action("t", 1, "e") != flux.Action("t", 1)
    with pytest.raises(AttributeError):
        a.type = "other"
    assert "failed" in repr(a)


@pytest.mark.parametrize("field", ["type", "payload", "error"])
def test_an_actions_fields_cannot_be_deleted(field: str) -> None:
    # Immutable means no del either: a deleted field left an action that
    # could no longer be hashed, compared, shown or routed.
    action = flux.Action("failed", ("id", 1), "timeout")
    key = hash(action)
    with pytest.raises(AttributeError, match="immutable"):
        delattr(action, field)
    assert hash(action) == key and action == flux.Action("failed", ("id", 1), "timeout")
    assert repr(action) == "flux.Action('failed', payload=('id', 1), error='timeout')"


def test_listeners_added_or_removed_during_an_emit(d: flux.Dispatcher[Any]) -> None:
    store = Counter(d)
    log: list[str] = []
    subs: dict[str, flux.Subscription] = {}

    def first() -> None:
        log.append("first")
        if "second" in subs:
            subs.pop("second").remove()
        if "added" not in subs:
            subs["added"] = store.add_listener(lambda: log.append("added"))

    store.add_listener(first)
    subs["second"] = store.add_listener(lambda: log.append("second"))
    d.dispatch("inc")
    assert log == ["first"]
    d.dispatch("inc")
    assert log == ["first", "first", "added"]


def test_a_listener_dispatching_is_refused(d: flux.Dispatcher[Any]) -> None:
    store = Counter(d)
    errors: list[type] = []

    def nested() -> None:
        try:
            d.dispatch("inc")
        except flux.FluxError as exc:
            errors.append(type(exc))

    store.add_listener(nested)
    d.dispatch("inc")
    assert errors == [flux.AlreadyDispatchingError] and store.state == 1


def test_closing_a_store_during_a_dispatch_is_refused(d: flux.Dispatcher[Any]) -> None:
    store = Counter(d)
    errors: list[type] = []

    def close() -> None:
        try:
            store.close()
        except flux.FluxError as exc:
            errors.append(type(exc))

    store.add_listener(close)
    d.dispatch("inc")
    assert errors == [flux.AlreadyDispatchingError] and not store.closed


def test_close_keeps_the_states_until_libflux_releases_the_store(
    d: flux.Dispatcher[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    # flux.h: should a dispatch start on another thread during
    # flux_store_destroy(), it returns FLUX_OK and the store's releases run
    # when that dispatch ends -- which may still hand the reduce the C
    # store's state. That window is a few instructions wide in libflux, so
    # it is faked: the destroy "returns" FLUX_OK, and runs for real later.
    from flux import _native
    from flux import stores as stores_module

    store = Boxes(d)
    d.dispatch("new")
    state = weakref.ref(store.state)
    deferred: list[int] = []

    def deferring(handle: int) -> int:
        deferred.append(handle)
        return 0

    monkeypatch.setattr(stores_module, "_flux_store_destroy_raw", deferring)
    store.close()
    monkeypatch.undo()
    assert store.closed and len(deferred) == 1
    try:
        gc.collect()
        assert state() is not None, "let go of while the C store still holds it"
        d.dispatch("new")  # the dispatch that began in the window: its reduce gets that state
        assert len(store.made) == 2 and store.made[-1]() is not None
    finally:
        assert _native.flux_store_destroy_raw(deferred[0]) == 0  # that dispatch ends
    gc.collect()
    assert state() is None and store.made[-1]() is None, "released with the C store"


def test_a_store_in_a_group_cannot_be_closed(d: flux.Dispatcher[Any]) -> None:
    store = Counter(d)
    group = flux.StoreGroup([store], Spy())
    with pytest.raises(flux.InvalidArgumentError):
        store.close()
    group.release()
    store.close()
    assert store.closed
    with pytest.raises(flux.InvalidArgumentError):
        _ = store.state


class Alarm(BaseException):
    """What a signal handler raised where a trampoline could not catch it."""


def test_a_refused_close_leaves_the_store_open_whatever_exception_comes_out(d: flux.Dispatcher[Any]) -> None:
    # An exception left in _native.escaped (an interrupt that escaped an
    # earlier trampoline of this thread) is raised by the next call through
    # the errcheck before it looks at the status: close() must go by what
    # libflux did, not by which exception comes out.
    from flux import _native

    grouped, free = Boxes(d), Boxes(d)
    group = flux.StoreGroup([grouped], Spy())
    d.dispatch("new")
    state = weakref.ref(grouped.state)
    _native.park_escaped(threading.get_ident(), Alarm())
    with pytest.raises(Alarm):
        grouped.close()  # refused by libflux: in a live group
    assert not grouped.closed
    assert id(grouped) in d._children
    assert state() is grouped.state  # still held for the C store
    d.dispatch("new")
    assert grouped.made[-1]() is grouped.state
    # And one libflux did close is closed, with the same exception pending.
    _native.park_escaped(threading.get_ident(), Alarm())
    with pytest.raises(Alarm):
        free.close()
    assert free.closed and id(free) not in d._children
    group.release()
    grouped.close()
    assert grouped.closed


def test_an_interrupt_escaping_the_settlers_removal_comes_out_of_add_listener(
    d: flux.Dispatcher[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A ReduceStore's first listener removes the store's own one, whose
    # destroy a signal can interrupt; that exception used to stay pending
    # and come out of the next dispatch, which then ran nothing.
    from flux import _native
    from flux import stores as stores_module

    remove = _native.flux_store_remove_listener_raw

    def interrupted_removal(handle: int, listener: int) -> int:
        status = remove(handle, listener)
        _native.park_escaped(threading.get_ident(), Alarm())  # as if its destroy was interrupted
        return int(status)

    counter = Counter(d)
    monkeypatch.setattr(stores_module, "_flux_store_remove_listener_raw", interrupted_removal)
    spy = Spy()
    with pytest.raises(Alarm):
        counter.add_listener(spy)
    monkeypatch.undo()
    d.dispatch("inc")
    assert counter.state == 1 and spy.calls == 1, "the next dispatch ran, and the listener was added"


def test_closing_the_dispatcher_closes_its_stores_and_groups() -> None:
    d: flux.Dispatcher[Any] = flux.Dispatcher()
    a, b = Counter(d), Counter(d)
    a.add_listener(Spy())
    flux.StoreGroup([a, b], Spy())
    d.close()
    assert a.closed and b.closed
    assert live_objects() == 0


def test_a_group_dropped_unreleased_goes_on_running_until_the_dispatcher_closes() -> None:
    d: flux.Dispatcher[Any] = flux.Dispatcher()
    a = Counter(d)
    spy = Spy()
    group = weakref.ref(flux.StoreGroup([a], spy))
    gc.collect()
    assert group() is not None, "the dispatcher keeps it alive"
    d.dispatch("inc")
    assert spy.calls == 1
    d.close()
    gc.collect()
    assert group() is None and live_objects() == 0


def test_initializing_a_live_store_or_group_again_is_refused_and_changes_nothing() -> None:
    # A second __init__ would register a second native store or group under
    # the same object: the first left running, out of reach of close(),
    # release() and the dispatcher's close() (which a live group then
    # refuses for good).
    d: flux.Dispatcher[Any] = flux.Dispatcher()
    other: flux.Dispatcher[Any] = flux.Dispatcher()
    store = Counter(d)
    spy = Spy()
    group = flux.StoreGroup([store], spy)
    for dispatcher in (d, other):
        with pytest.raises(RuntimeError, match="already"):
            Counter.__init__(store, dispatcher)
    with pytest.raises(RuntimeError, match="already"):
        flux.StoreGroup.__init__(group, [store], Spy())
    assert store.dispatcher is d
    d.dispatch("inc")
    assert store.state == 1 and spy.calls == 1, "one store, one group"
    other.dispatch("inc")
    assert store.state == 1
    group.release()
    d.close()
    other.close()
    assert store.closed
    assert live_objects() == 0
    # Closed, a store or group may be made anew.
    d2: flux.Dispatcher[Any] = flux.Dispatcher()
    Counter.__init__(store, d2)
    flux.StoreGroup.__init__(group, [store], spy)
    d2.dispatch("inc")
    assert store.state == 1 and spy.calls == 2
    d2.close()


def test_initializing_a_live_reduce_store_again_calls_no_get_initial_state(d: flux.Dispatcher[Any]) -> None:
    # get_initial_state is "called once, by the constructor", and a refused
    # __init__ changes nothing: it ran the override (user code, which may
    # load or count something) before the refusal, and threw the state away.
    made: list[int] = []

    class Loaded(flux.ReduceStore[int]):
        def get_initial_state(self) -> int:
            made.append(len(made))
            return len(made)

        def reduce(self, state: int, action: Any) -> int:
            return state

    store = Loaded(d)
    with pytest.raises(RuntimeError, match="already made"):
        Loaded.__init__(store, d)
    assert made == [0] and store.state == 1
    store.close()
    Loaded.__init__(store, d)  # closed: made anew, with a state of its own
    assert made == [0, 1] and store.state == 2
    store.close()


def test_a_subscription_of_a_store_closed_and_made_again_removes_nothing_new(d: flux.Dispatcher[Any]) -> None:
    # The new native store issues listener ids from 1 again: a Subscription
    # of the old one must not remove the new listener holding its id.
    store = Counter(d)
    old = store.add_listener(Spy())
    store.close()
    Counter.__init__(store, d)
    spy = Spy()
    store.add_listener(spy)
    with pytest.raises(flux.UnknownTokenError, match="subscription 1 was already removed"):
        old.remove()
    d.dispatch("inc")
    assert spy.calls == 1
    store.close()


class Valued(flux.Store):
    """Equal when their names are: value semantics of the subclass's own."""

    def __init__(self, d: flux.Dispatcher[Any], name: str) -> None:
        self.name = name
        super().__init__(d)

    def on_dispatch(self, payload: Any) -> None:
        pass

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Valued) and other.name == self.name

    def __hash__(self) -> int:
        return hash(self.name)


class Unhashable(flux.Store):
    def on_dispatch(self, payload: Any) -> None:
        self.emit_change(error="failed")

    def __eq__(self, other: object) -> bool:
        return self is other

    __hash__ = None  # type: ignore[assignment]


def test_stores_are_tracked_by_identity_not_by_their_own_eq_and_hash() -> None:
    d: flux.Dispatcher[Any] = flux.Dispatcher()
    a, b = Valued(d, "x"), Valued(d, "x")
    unhashable = Unhashable(d)  # made: its __hash__ is not asked
    group = flux.StoreGroup([a, b, unhashable, unhashable], Spy())
    d.dispatch("x")
    group.release()
    unhashable.close()
    assert unhashable.closed and not a.closed
    d.close()
    assert a.closed and b.closed, "two equal stores are two stores"
    assert live_objects() == 0


class ClosingHook(Counter):
    """Runs ``hook`` when the dispatcher's close() comes to close it."""

    hook: Any = None

    def close(self) -> None:
        hook, self.hook = self.hook, None
        if hook is not None:
            hook()
        super().close()


def on_another_thread(fn: Any) -> None:
    assert all_return(lambda _: fn(), [None], timeout=1)


def test_a_store_or_group_made_while_the_dispatcher_closes_is_refused() -> None:
    # Made on another thread while close() is closing the stores it has:
    # each is refused (or else it would be closed with the dispatcher);
    # never left open on a closed dispatcher, nor blocking close().
    d: flux.Dispatcher[Any] = flux.Dispatcher()
    grouped = Counter(d)
    hooked = ClosingHook(d)  # the newest: closed first
    outcomes: list[Any] = []

    def make(what: Any) -> None:
        try:
            outcomes.append(what())
        except flux.InvalidArgumentError as exc:
            outcomes.append(exc)

    def during_close() -> None:
        on_another_thread(lambda: make(lambda: Counter(d)))
        on_another_thread(lambda: make(lambda: flux.StoreGroup([grouped], Spy())))

    hooked.hook = during_close
    d.close()
    assert d.closed and grouped.closed and hooked.closed
    assert len(outcomes) == 2
    for made in outcomes:
        assert isinstance(made, flux.InvalidArgumentError) and "closed" in str(made), made
    assert live_objects() == 0


def test_a_dispatch_started_while_the_dispatcher_closes_leaves_no_half_closed_dispatcher() -> None:
    # close() is all or nothing: a dispatch called on another thread once it
    # has begun is refused (the dispatcher is closed), rather than running
    # while close() is half way and making it fail there.
    d: flux.Dispatcher[Any] = flux.Dispatcher()
    first = Counter(d)
    hooked = ClosingHook(d)
    running_or_refused, release = threading.Event(), threading.Event()

    def callback(payload: Any) -> None:
        running_or_refused.set()
        release.wait(timeout=1)

    d.register(callback)
    outcome: list[Any] = []

    def dispatch() -> None:
        try:
            d.dispatch("inc")
            outcome.append("dispatched")
        except flux.InvalidArgumentError as exc:
            outcome.append(exc)
        finally:
            running_or_refused.set()

    dispatcher_thread = threading.Thread(target=dispatch, daemon=True)

    def start_a_dispatch() -> None:
        dispatcher_thread.start()
        assert running_or_refused.wait(timeout=1)

    hooked.hook = start_a_dispatch
    try:
        d.close()
    finally:
        release.set()
        dispatcher_thread.join(timeout=1)
    assert not dispatcher_thread.is_alive()
    assert d.closed and first.closed and hooked.closed
    assert len(outcome) == 1 and isinstance(outcome[0], flux.InvalidArgumentError), outcome


def test_close_waits_for_a_dispatch_that_read_the_handle_before_it_closed() -> None:
    # One whose call was already on its way into libflux when close()
    # cleared the handle (simulated: libflux called with the native handle)
    # starts while close() runs: close() waits for it, and closes all.
    from flux import _native

    d: flux.Dispatcher[Any] = flux.Dispatcher()
    first = Counter(d)
    hooked = ClosingHook(d)
    native = d._handle
    started = threading.Event()
    ran: list[Any] = []

    def callback(payload: Any) -> None:
        started.set()
        ran.append(payload)
        time.sleep(0.1)  # a dispatch that lasts: close() comes to it while it runs

    d.register(callback)
    payload = "inc"
    statuses: list[int] = []
    dispatcher_thread = threading.Thread(target=lambda: statuses.append(_native.flux_dispatch(native, id(payload))))

    def start_a_dispatch() -> None:
        dispatcher_thread.start()
        assert started.wait(timeout=1)

    hooked.hook = start_a_dispatch
    d.close()  # no AlreadyDispatchingError half way
    dispatcher_thread.join(timeout=1)
    assert not dispatcher_thread.is_alive()
    assert d.closed and first.closed and hooked.closed
    assert ran == ["inc"] and statuses == [0]
    assert live_objects() == 0


def test_a_dispatch_starting_between_two_store_closes_runs_without_the_closed_ones() -> None:
    # libflux closes a dispatcher only once its stores are destroyed, so
    # close() destroys them one by one first: a dispatch already on its way
    # (simulated, as above) that starts between two of them runs whole as to
    # the callbacks, but without the stores closed before it -- as the
    # docstring says, rather than "never with part of them".
    from flux import _native

    d: flux.Dispatcher[Any] = flux.Dispatcher()
    handled: list[str] = []

    class Logged(ClosingHook):
        name = ""

        def reduce(self, state: int, action: Any) -> int:
            handled.append(self.name)
            return state

    older, newer = Logged(d), Logged(d)  # newer is closed first
    older.name, newer.name = "older", "newer"
    ran: list[Any] = []
    d.register(ran.append)
    native = d._handle
    payload = "inc"
    statuses: list[int] = []

    def dispatch_between_the_closes() -> None:
        assert newer.closed and not older.closed
        thread = threading.Thread(target=lambda: statuses.append(_native.flux_dispatch(native, id(payload))))
        thread.start()
        thread.join()

    older.hook = dispatch_between_the_closes
    d.close()
    assert statuses == [0] and ran == ["inc"]
    assert handled == ["older"]
    assert d.closed and older.closed and newer.closed
    assert live_objects() == 0
    assert "without the stores closed before it" in " ".join((flux.Dispatcher.close.__doc__ or "").split())


def test_has_changed_from_another_thread_is_refused(d: flux.Dispatcher[Any]) -> None:
    results: list[Any] = []

    class Slow(Counter):
        def reduce(self, state: int, action: Any) -> int:
            t = threading.Thread(target=check)
            t.start()
            t.join()
            return state + 1

    def check() -> None:
        try:
            store.has_changed()
        except flux.NotDispatchingError as exc:
            results.append(type(exc))
        try:
            store.emit_change()
        except flux.NotDispatchingError as exc:
            results.append(type(exc))

    store = Slow(d)
    d.dispatch("inc")
    assert results == [flux.NotDispatchingError, flux.NotDispatchingError]


def test_unregister_of_a_store_or_group_token_is_refused(d: flux.Dispatcher[Any]) -> None:
    # Facebook's usual way to detach a store; here the store owns its
    # registration, so it must be closed instead (issue 15).
    store = Counter(d)
    listener = Spy()
    store.add_listener(listener)
    group_fn = Spy()
    group = flux.StoreGroup([store], group_fn)
    after = d.register(lambda payload: None)
    # Nothing registered in between: the group's token precedes `after`.
    group_token = Token(after._dispatcher, after.value - 1)
    with pytest.raises(flux.InvalidArgumentError, match=r"store's close\(\)"):
        d.unregister(store.dispatch_token)
    with pytest.raises(flux.InvalidArgumentError, match=r"group's release\(\)"):
        d.unregister(group_token)
    # Nothing changed: the store, its listener and the group still work.
    d.dispatch("inc")
    d.dispatch("inc")
    assert store.state == 2
    assert listener.calls == 2
    assert group_fn.calls == 2
    group.release()
    store.close()
    d.dispatch("inc")
    assert group_fn.calls == 2


def test_a_closed_store_refuses_every_call_but_what_its_close_docstring_lists(d: flux.Dispatcher[Any]) -> None:
    # Store.close: every later call raises InvalidArgumentError, reading
    # state too -- but close() itself and four properties, which answer.
    store = Counter(d)
    token = store.dispatch_token
    store.close()
    store.close()  # does nothing
    assert store.closed and store.dispatch_token == token and store.dispatcher is d and store.error is None
    calls: list[Callable[[], object]] = [
        lambda: store.state,
        store.has_changed,
        lambda: store.add_listener(lambda: None),
        store.emit_change,
    ]
    for call in calls:
        with pytest.raises(flux.InvalidArgumentError):
            call()


README = Path(__file__).resolve().parents[3] / "README.md"


@pytest.mark.skipif(not README.exists(), reason="not run from a libflux checkout")
def test_the_readme_stores_python_example_does_what_it_shows(capsys: pytest.CaptureFixture[str]) -> None:
    # The top-level README's "Stores" section shows this block with no output
    # of its own; check-readme runs the section's C block, this runs its
    # Python one as it stands: the counter's listener prints the new state
    # (a change: 1), the group runs once per dispatch after both stores, and
    # User routes "user-refreshed" by name (an Action is not "inc": no change
    # for the counter, no second print of its state).
    text = README.read_text(encoding="utf-8")
    section = text[text.index("\n## Stores\n") :]
    start = section.index("```python\n") + len("```python\n")
    block = section[start : section.index("```\n", start)]
    namespace: dict[str, Any] = {"flux": flux, "d": flux.Dispatcher()}
    try:
        exec(compile(block, f"{README}: Stores", "exec"), namespace)  # noqa: S102 -- the README's own code
        assert capsys.readouterr().out.splitlines() == ["1", "both ran", "both ran"]
        users = [o for o in gc.get_objects() if type(o) is namespace["User"]]
        assert [user.state for user in users] == [{"name": "ada"}], "routed by the action's name"
        assert namespace["counter"].state == 1
    finally:
        namespace["d"].close()  # with the stores and the group the example leaves open
