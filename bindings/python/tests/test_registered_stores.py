"""JBFlux's store model (DESIGN.md section 11): store classes registered with
the dispatcher, listeners bound to their owner's life, changes that carry an
error, and wait_for on stores. The Swift twin is
Tests/FluxCoreTests/RegisteredStoreTests.swift."""

from __future__ import annotations

import gc
import os
import subprocess
import threading
import time
import weakref
from typing import Any

import pytest
from on_threads import all_return, run_python

import flux
from flux import _native
from flux.stores import live_objects


@pytest.fixture(autouse=True)
def no_store_objects_left() -> Any:
    yield
    gc.collect()
    assert live_objects() == 0


class Failure(Exception):
    pass


class CurrentUserStore(flux.ReduceStore[Any]):
    """DESIGN.md 11's example: refreshed by an action that may carry an error."""

    def get_initial_state(self) -> Any:
        return None

    @flux.handles("current-user-refreshed")
    def on_refreshed(self, state: Any, action: flux.Action) -> Any:
        if action.error is not None:
            self.emit_change(error=action.error)
            return None
        return action.payload


class MessagesStore(flux.Store):
    """Registers the store it depends on from its constructor, and waits for it."""

    def __init__(self, dispatcher: flux.Dispatcher[Any]) -> None:
        super().__init__(dispatcher)
        self.users = dispatcher.register_store(CurrentUserStore)
        self.seen: list[Any] = []

    def on_dispatch(self, payload: Any) -> None:
        self.dispatcher.wait_for([self.users])
        self.seen.append(self.users.state)


class Greeter(flux.Store):
    """Takes constructor arguments beyond the dispatcher."""

    def __init__(self, dispatcher: flux.Dispatcher[Any], greeting: str, *, name: str = "you") -> None:
        super().__init__(dispatcher)
        self.text = f"{greeting}, {name}"

    def on_dispatch(self, payload: Any) -> None:
        pass


class View:
    """An object listeners are bound to."""

    def __init__(self, log: list[str], name: str = "view") -> None:
        self.log = log
        self.name = name

    def refresh(self) -> None:
        self.log.append(self.name)

    def __call__(self) -> None:
        self.log.append(f"{self.name} called")


def refreshed(payload: Any = None, error: Any = None) -> flux.Action:
    return flux.Action("current-user-refreshed", payload, error)


# ---------------------------------------------------------------------------
# One store per class, by class
# ---------------------------------------------------------------------------


def test_a_class_is_made_once_and_handed_back_by_class(d: flux.Dispatcher[Any]) -> None:
    with pytest.raises(flux.UnknownStoreError):
        d.store(CurrentUserStore)
    users = d.register_store(CurrentUserStore)
    assert isinstance(users, CurrentUserStore)
    assert users.dispatcher is d
    assert d.register_store(CurrentUserStore) is users
    assert d.store(CurrentUserStore) is users
    messages = d.register_store(MessagesStore)
    assert messages.users is users, "a dependency registered from a constructor is the one instance"
    assert d.stores == (users, messages), "in registration order"


def test_a_dependency_registered_by_a_constructor_comes_first_in_stores(d: flux.Dispatcher[Any]) -> None:
    # The order is the one their making finished in: MessagesStore's
    # constructor registers CurrentUserStore, which is made first.
    messages = d.register_store(MessagesStore)
    assert d.stores == (messages.users, messages)


def test_extra_constructor_arguments_are_used_the_first_time_only(d: flux.Dispatcher[Any]) -> None:
    greeter = d.register_store(Greeter, "hello", name="ada")
    assert greeter.text == "hello, ada"
    assert d.register_store(Greeter, "goodbye", name="bob") is greeter
    assert d.register_store(Greeter) is greeter, "no arguments needed once made"
    assert greeter.text == "hello, ada"


def test_each_dispatcher_has_its_own(d: flux.Dispatcher[Any]) -> None:
    other: flux.Dispatcher[Any]
    with flux.Dispatcher() as other:
        assert other.register_store(CurrentUserStore) is not d.register_store(CurrentUserStore)


def test_a_subclass_is_a_class_of_its_own(d: flux.Dispatcher[Any]) -> None:
    class SpecialUserStore(CurrentUserStore):
        pass

    base = d.register_store(CurrentUserStore)
    with pytest.raises(flux.UnknownStoreError):
        d.store(SpecialUserStore)
    special = d.register_store(SpecialUserStore)
    assert special is not base
    assert d.store(CurrentUserStore) is base


def test_looking_up_an_unregistered_class(d: flux.Dispatcher[Any]) -> None:
    CurrentUserStore(d)  # made by hand: not registered
    with pytest.raises(flux.UnknownStoreError) as caught:
        d.store(CurrentUserStore)
    assert isinstance(caught.value, LookupError)
    assert not isinstance(caught.value, flux.FluxError)
    assert caught.value.store_class is CurrentUserStore
    assert "CurrentUserStore" in str(caught.value)
    assert d.stores == ()


@pytest.mark.parametrize("bad", [int, object, flux.Dispatcher, "CurrentUserStore", None])
def test_a_class_that_is_not_a_store_class_is_a_type_error(d: flux.Dispatcher[Any], bad: Any) -> None:
    with pytest.raises(TypeError, match="subclass of flux.Store"):
        d.register_store(bad)
    with pytest.raises(TypeError, match="subclass of flux.Store"):
        d.store(bad)
    assert d.stores == ()


def test_a_store_instance_is_not_a_class(d: flux.Dispatcher[Any]) -> None:
    users = d.register_store(CurrentUserStore)
    with pytest.raises(TypeError, match="not a CurrentUserStore"):
        d.register_store(users)  # type: ignore[arg-type]


def test_a_constructor_that_raises_registers_nothing(d: flux.Dispatcher[Any]) -> None:
    attempts = []

    class Flaky(flux.Store):
        def __init__(self, dispatcher: flux.Dispatcher[Any]) -> None:
            attempts.append(1)
            if len(attempts) == 1:
                raise Failure("not yet")
            super().__init__(dispatcher)

        def on_dispatch(self, payload: Any) -> None:
            pass

    with pytest.raises(Failure):
        d.register_store(Flaky)
    assert d.stores == ()
    flaky = d.register_store(Flaky)
    assert d.store(Flaky) is flaky
    assert len(attempts) == 2


@pytest.mark.parametrize("during_a_dispatch", [False, True])
def test_a_constructor_that_raises_after_making_its_store_registers_nothing(
    d: flux.Dispatcher[Any], during_a_dispatch: bool
) -> None:
    attempts = []

    class Counter(flux.ReduceStore[int]):
        def __init__(self, dispatcher: flux.Dispatcher[Any]) -> None:
            super().__init__(dispatcher)
            self.helper = dispatcher.register_store(CurrentUserStore)  # a dependency: stays
            attempts.append(self)
            if len(attempts) == 1:
                raise Failure("config not ready")
            self.step = 1

        def get_initial_state(self) -> int:
            return 0

        def reduce(self, state: int, action: Any) -> int:
            return state + self.step  # the half-made one has no step

    def register(payload: Any = None) -> None:
        with pytest.raises(Failure):
            d.register_store(Counter)

    if during_a_dispatch:
        token = d.register(register)
        d.dispatch("x")  # the store cannot be closed now: it is left inert
        d.unregister(token)
    else:
        register()
        assert attempts[0].closed
    assert d.stores == (d.store(CurrentUserStore),)
    counter = d.register_store(Counter)
    assert counter is attempts[1]
    d.dispatch("inc")
    d.dispatch("inc")
    assert counter.state == 2
    d.close()
    assert attempts[0].closed


def test_a_constructor_that_makes_no_store_is_a_type_error(d: flux.Dispatcher[Any]) -> None:
    class Forgetful(flux.Store):
        def __init__(self, dispatcher: flux.Dispatcher[Any]) -> None:
            pass  # never calls super().__init__

    with pytest.raises(TypeError, match="super"):
        d.register_store(Forgetful)
    assert d.stores == ()


@pytest.mark.parametrize("child_first", [True, False])
def test_a_constructor_that_raises_after_making_a_child_of_its_own_class(
    d: flux.Dispatcher[Any], child_first: bool
) -> None:
    # The store the constructor made of itself is closed, not the first
    # store of its class it happened to make: here a child, made directly
    # (not registered). The half-made store used to stay registered and
    # handle payloads when the child was made before super().__init__.
    made: list[Any] = []
    handled: list[Any] = []

    class Tree(flux.Store):
        def __init__(self, dispatcher: flux.Dispatcher[Any], root: bool = True) -> None:
            if root and child_first:
                self.child = Tree(dispatcher, root=False)
            super().__init__(dispatcher)
            made.append(self)
            if root and not child_first:
                self.child = Tree(dispatcher, root=False)
            if root:
                raise Failure("config not ready")

        def on_dispatch(self, payload: Any) -> None:
            handled.append(self)

    with pytest.raises(Failure):
        d.register_store(Tree)
    root = made[1] if child_first else made[0]
    assert root.closed, "nothing half-registered"
    assert d.stores == ()
    d.dispatch("x")
    assert root not in handled
    d.close()


def test_a_constructor_that_makes_a_store_of_another_dispatcher(d: flux.Dispatcher[Any]) -> None:
    other = flux.Dispatcher[Any]()
    made: list[Any] = []

    class Elsewhere(flux.Store):
        def __init__(self, dispatcher: flux.Dispatcher[Any]) -> None:
            super().__init__(other)
            made.append(self)

        def on_dispatch(self, payload: Any) -> None:
            pass

    with pytest.raises(TypeError, match="no store of this dispatcher"):
        d.register_store(Elsewhere)
    assert made[0].closed, "raising, it leaves no store registered with the other dispatcher either"
    other.close()


def test_a_constructor_registering_its_own_class_is_a_cycle(d: flux.Dispatcher[Any]) -> None:
    class Ouroboros(flux.Store):
        def __init__(self, dispatcher: flux.Dispatcher[Any]) -> None:
            dispatcher.register_store(Ouroboros)
            super().__init__(dispatcher)

    with pytest.raises(RuntimeError, match="cycle"):
        d.register_store(Ouroboros)
    assert d.stores == ()
    with pytest.raises(RuntimeError, match="cycle"):
        d.register_store(Ouroboros)  # nothing was left half made: the same answer


def test_a_cycle_of_store_classes_across_two_threads_raises_on_both(d: flux.Dispatcher[Any]) -> None:
    # X.__init__ registers Y and Y.__init__ registers X, started from both
    # ends at once: each thread would wait for the class the other makes.
    both_inside = threading.Barrier(2)

    class X(flux.Store):
        def __init__(self, dispatcher: flux.Dispatcher[Any]) -> None:
            both_inside.wait(timeout=1)
            dispatcher.register_store(Y)
            super().__init__(dispatcher)

    class Y(flux.Store):
        def __init__(self, dispatcher: flux.Dispatcher[Any]) -> None:
            both_inside.wait(timeout=1)
            dispatcher.register_store(X)
            super().__init__(dispatcher)

    out: dict[str, BaseException] = {}

    def register(cls: type[flux.Store]) -> None:
        try:
            d.register_store(cls)
        except BaseException as exc:  # noqa: BLE001 -- checked below
            out[cls.__name__] = exc

    assert all_return(register, (X, Y)), "hang: each thread waits for the other's class"
    assert sorted(out) == ["X", "Y"]
    assert all(type(exc) is RuntimeError and "cycle" in str(exc) for exc in out.values()), out
    assert d.stores == ()


# ---------------------------------------------------------------------------
# Closing
# ---------------------------------------------------------------------------


def test_closing_the_dispatcher_closes_its_registered_stores() -> None:
    d: flux.Dispatcher[Any] = flux.Dispatcher()
    users = d.register_store(CurrentUserStore)
    messages = d.register_store(MessagesStore)
    d.close()
    assert users.closed and messages.closed
    assert d.stores == ()
    with pytest.raises(flux.InvalidArgumentError):
        d.store(CurrentUserStore)
    with pytest.raises(flux.InvalidArgumentError):
        d.register_store(CurrentUserStore)


def test_a_registered_store_closed_by_hand_leaves_the_registry(d: flux.Dispatcher[Any]) -> None:
    users = d.register_store(CurrentUserStore)
    greeter = d.register_store(Greeter, "hi")
    users.close()
    with pytest.raises(flux.UnknownStoreError):
        d.store(CurrentUserStore)
    left = d.stores
    assert left == (greeter,)
    again = d.register_store(CurrentUserStore)
    assert again is not users and not again.closed
    assert d.stores == (greeter, again)


def test_a_listener_let_go_by_close_finds_its_store_out_of_the_registry(d: flux.Dispatcher[Any]) -> None:
    # close() lets the registry know with no store lock held, but still
    # before what it released goes: a listener's finalizer that looks the
    # class up gets no closed store, and makes a new one if it registers it.
    users = d.register_store(CurrentUserStore)
    seen: list[Any] = []

    class Listener:
        def __call__(self) -> None:
            pass

        def __del__(self) -> None:
            try:
                seen.append(d.store(CurrentUserStore))
            except flux.UnknownStoreError:
                seen.append(d.register_store(CurrentUserStore))

    users.add_listener(Listener())
    users.close()
    assert len(seen) == 1 and seen[0] is not users and not seen[0].closed
    assert d.stores == (seen[0],)


class AllEqual(type):
    # A metaclass whose classes are all equal, with one hash.
    def __eq__(cls, other: object) -> bool:
        return isinstance(other, AllEqual)

    def __hash__(cls) -> int:
        return 1


class NoHash(type):
    def __hash__(cls) -> int:
        raise RuntimeError("this class cannot be hashed")

    __eq__ = type.__eq__


def test_store_classes_are_told_apart_by_identity_not_by_a_metaclass_eq_and_hash(d: flux.Dispatcher[Any]) -> None:
    # "The store of class cls": a metaclass's __eq__ made register_store(B)
    # return A's store, and a hash that raised made the class unusable.
    class A(flux.Store, metaclass=AllEqual):
        def on_dispatch(self, payload: Any) -> None:
            pass

    class B(flux.Store, metaclass=AllEqual):
        def on_dispatch(self, payload: Any) -> None:
            pass

    class C(flux.Store, metaclass=NoHash):
        def on_dispatch(self, payload: Any) -> None:
            pass

    a = d.register_store(A)
    with pytest.raises(flux.UnknownStoreError):
        d.store(B)
    b = d.register_store(B)
    c = d.register_store(C)
    assert type(a) is A and type(b) is B and type(c) is C
    assert d.store(A) is a and d.store(B) is b and d.store(C) is c
    assert d.register_store(B) is b and d.stores == (a, b, c)
    b.close()
    assert list(d.stores) == [a, c] and d.store(A) is a


def test_a_refused_close_keeps_the_store_registered(d: flux.Dispatcher[Any]) -> None:
    users = d.register_store(CurrentUserStore)
    refused = []

    def close_now(payload: Any) -> None:
        with pytest.raises(flux.AlreadyDispatchingError):
            users.close()
        refused.append(payload)

    d.register(close_now)
    d.dispatch("x")
    assert refused == ["x"]
    assert d.store(CurrentUserStore) is users


# A finalizer the garbage collector runs while this thread updates the
# registry (under its lock) closes another registered store. With a plain
# lock that deadlocked; k walks the collection through the update's steps.
FINALIZER_CLOSES_A_STORE = """
import gc
import flux

def store_class(name):
    return type(name, (flux.Store,), {"on_dispatch": lambda self, payload: None})

inside = 0
for k in range(1, 40):
    d = flux.Dispatcher()
    a, b, c = (d.register_store(store_class(name)) for name in "abc")

    class View:
        def __init__(self):
            self.me = self  # a cycle: only the collector frees it

        def __del__(self):
            global inside
            lock = d._registry_lock
            inside += lock._is_owned() if hasattr(lock, "_is_owned") else lock.locked()  # RLock, or plain
            b.close()

    gc.collect()
    View()
    threshold = gc.get_threshold()
    gc.set_threshold(gc.get_count()[0] + k)
    if k % 2:
        a.close()
    else:
        d.register_store(store_class("new"))
    gc.set_threshold(*threshold)
    gc.collect()
    assert b.closed and b not in d.stores, d.stores
    assert all(not store.closed for store in d.stores), d.stores
    assert (a in d.stores) == (k % 2 == 0)
    d.close()
assert inside, "no finalizer ran under the registry lock: the test tests nothing"
print("ok")
"""


OWNER_COLLECTED_UNDER_ANOTHER_LOCK = """
import gc
import sys
import threading
import time
import flux

def store_class(name):
    return type(name, (flux.Store,), {"on_dispatch": lambda self, payload: None})

class View:
    def refresh(self):
        pass

d = flux.Dispatcher()
s1 = d.register_store(store_class("s1"))
go = threading.Event()
closer = threading.Thread(target=lambda: (go.wait(), s1.close()), daemon=True)
closer.start()
views = []  # not garbage: the view goes by its refcount, in the finalizer
ran = []

class Holder:
    def __init__(self):
        self.me = self  # a cycle: only the collector frees it

    def __del__(self):
        lock = d._registry_lock
        if not (lock._is_owned() if hasattr(lock, "_is_owned") else lock.locked()):
            return
        ran.append(True)
        # This thread holds the registry lock (another store's close() is
        # updating it). The other thread closes s1, and then waits for the
        # registry lock (it did holding s1's lock).
        go.set()
        while not s1.closed:
            time.sleep(0.001)
        if sys.argv[1] == "owner":
            views.clear()  # the owner of s1's listener goes: its weakref callback must not wait for s1
        else:
            s1.close()  # a finalizer closing s1 too

for k in range(1, 400):
    if ran:
        break
    gc.collect()
    view = View()
    s1.add_listener(view.refresh, owner=view)
    views.append(view)
    del view
    Holder()
    other = d.register_store(store_class(f"other{k}"))
    threshold = gc.get_threshold()
    gc.set_threshold(gc.get_count()[0] + k % 40 + 1)
    other.close()
    gc.set_threshold(*threshold)
assert ran, "no finalizer ran under the registry lock: the test tests nothing"
closer.join()
assert s1.closed
d.close()
print("ok")
"""


@pytest.mark.parametrize("finalizer", ["owner", "close"])
def test_a_finalizer_under_the_registry_lock_and_a_close_on_another_thread_do_not_deadlock(finalizer: str) -> None:
    # A finalizer -- or an owner's weakref callback -- runs wherever the
    # collector does: here on a thread updating the registry, under its lock,
    # while another thread closes s1. Each deadlocked: close() waited for the
    # registry lock holding s1's lock, which the finalizer then waited for --
    # to remove the collected owner's listener from s1, or to close s1 too.
    try:
        result = run_python(["-c", OWNER_COLLECTED_UNDER_ANOTHER_LOCK, finalizer], timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail("deadlock: a finalizer waits for s1's lock, whose holder waits for the registry lock it holds")
    assert result.returncode == 0, result.stderr
    assert result.stdout == "ok\n"
    assert "Exception ignored" not in result.stderr, result.stderr


OWNER_COLLECTED_UNDER_A_STORE_LOCK = """
import gc
import threading
import time
import flux

class Plain(flux.Store):
    def on_dispatch(self, payload):
        pass

class View:
    def refresh(self):
        pass

d = flux.Dispatcher()
views = []  # not garbage: the view goes by its refcount, in the finalizer
ran = []
grouping = []

def make_a_group(stores):
    flux.StoreGroup(stores, lambda: None).release()

class Holder:
    def __init__(self, low, high):
        self.me = self  # a cycle: only the collector frees it
        self.low, self.high = low, high

    def __del__(self):
        if not self.high._lock._is_owned():
            return
        ran.append(True)
        # This thread adds a listener to `high`, holding its lock. Another
        # makes a group of both stores: it takes their locks in one order,
        # `low` first, and then waits for `high`'s.
        thread = threading.Thread(target=make_a_group, args=([self.low, self.high],), daemon=True)
        grouping.append(thread)
        thread.start()
        while self.low._lock.acquire(blocking=False):
            self.low._lock.release()
            time.sleep(0.001)
        views.clear()  # the owner of low's listener goes: its weakref callback must not wait for low

for k in range(1, 400):
    if ran:
        break
    low, high = sorted((Plain(d), Plain(d)), key=id)
    gc.collect()
    view = View()
    low.add_listener(view.refresh, owner=view)
    views.append(view)
    del view
    Holder(low, high)
    threshold = gc.get_threshold()
    gc.set_threshold(gc.get_count()[0] + k % 40 + 1)
    high.add_listener(lambda: None)
    gc.set_threshold(*threshold)
assert ran, "no finalizer ran under the store's lock: the test tests nothing"
grouping[0].join()
d.close()
print("ok")
"""


def test_an_owner_collected_under_a_store_lock_and_a_group_made_on_another_thread_do_not_deadlock() -> None:
    # The owner's weakref callback, run by the collector on a thread holding
    # one store's lock, waited for the lock of the store its listener is on,
    # which a StoreGroup of both, made on another thread, held -- waiting for
    # the first store's lock in turn.
    try:
        result = run_python(["-c", OWNER_COLLECTED_UNDER_A_STORE_LOCK], timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail("deadlock: the owner's weakref callback waits for a store lock whose holder waits for it")
    assert result.returncode == 0, result.stderr
    assert result.stdout == "ok\n"
    assert "Exception ignored" not in result.stderr, result.stderr


def test_a_finalizer_closing_a_registered_store_while_the_registry_is_updated() -> None:
    try:
        result = run_python(["-c", FINALIZER_CLOSES_A_STORE], timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail("deadlock: the finalizer waits for the registry lock its own thread holds")
    assert result.returncode == 0, result.stderr
    assert result.stdout == "ok\n"
    assert "Exception ignored" not in result.stderr, result.stderr


# ---------------------------------------------------------------------------
# Registering during a dispatch, and from several threads
# ---------------------------------------------------------------------------


def test_registered_during_a_dispatch_it_takes_part_from_the_next(d: flux.Dispatcher[Any]) -> None:
    registered: list[CurrentUserStore] = []

    def register_once(payload: Any) -> None:
        if not registered:
            registered.append(d.register_store(CurrentUserStore))

    d.register(register_once)
    d.dispatch(refreshed("first"))
    assert registered[0].state is None
    d.dispatch(refreshed("second"))
    assert registered[0].state == "second"


def test_threads_registering_one_class_at_once_get_one_instance(d: flux.Dispatcher[Any]) -> None:
    made = []
    inside = threading.Event()
    finish = threading.Event()

    class Slow(flux.Store):
        def __init__(self, dispatcher: flux.Dispatcher[Any]) -> None:
            made.append(threading.get_ident())
            inside.set()
            finish.wait()
            super().__init__(dispatcher)

        def on_dispatch(self, payload: Any) -> None:
            pass

    got: list[Slow] = []

    def register() -> None:
        got.append(d.register_store(Slow))

    first = threading.Thread(target=register)
    first.start()
    inside.wait()
    # Being made: a look-up does not wait, and finds nothing yet.
    with pytest.raises(flux.UnknownStoreError):
        d.store(Slow)
    others = [threading.Thread(target=register) for _ in range(4)]
    for thread in others:
        thread.start()
    # Until all four wait for the first thread's instance: the condition's
    # own count of its waiters (CPython's), so no sleep decides the order.
    while len(d._wait_registry._waiters) < len(others):  # type: ignore[attr-defined]
        time.sleep(0.001)
    finish.set()
    for thread in [first, *others]:
        thread.join()
    assert len(made) == 1
    assert len(got) == 5 and all(store is got[0] for store in got)
    assert d.stores == (got[0],)


def test_threads_registering_and_looking_up_many_classes(d: flux.Dispatcher[Any]) -> None:
    classes = [type(f"Store{i}", (Greeter,), {}) for i in range(20)]
    start = threading.Barrier(4)
    results: list[dict[type, flux.Store]] = []

    def work() -> None:
        start.wait()
        mine: dict[type, flux.Store] = {cls: d.register_store(cls, "hi") for cls in classes}
        assert all(d.store(cls) is mine[cls] for cls in classes)
        results.append(mine)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(results) == 4
    assert all(result == results[0] for result in results), "one instance per class for every thread"
    assert len(d.stores) == len(classes)


# ---------------------------------------------------------------------------
# Listeners bound to an owner's life
# ---------------------------------------------------------------------------


def test_a_bound_method_listener_does_not_keep_its_owner(d: flux.Dispatcher[Any]) -> None:
    users = d.register_store(CurrentUserStore)
    log: list[str] = []
    view = View(log)
    subscription = users.add_listener(view.refresh, owner=view)
    d.dispatch(refreshed("ada"))
    assert log == ["view"]
    gone = weakref.ref(view)
    del view
    assert gone() is None, "the store held the owner weakly"
    d.dispatch(refreshed("bob"))
    assert log == ["view"], "gone: the listener never runs again"
    with pytest.raises(flux.UnknownTokenError):
        subscription.remove()  # removed when the owner went, as if remove() ran


def test_a_function_listener_with_an_owner_is_removed_when_the_owner_goes(d: flux.Dispatcher[Any]) -> None:
    users = d.register_store(CurrentUserStore)
    log: list[str] = []
    owner = View(log)
    before = live_objects()
    subscription = users.add_listener(lambda: log.append("heard"), owner=owner)
    assert live_objects() == before + 1
    d.dispatch(refreshed("ada"))
    del owner
    # Removed at once, with no dispatch: its entry is released.
    assert live_objects() == before
    with pytest.raises(flux.UnknownTokenError):
        subscription.remove()
    d.dispatch(refreshed("bob"))
    assert log == ["heard"]


def test_an_owner_bound_listener_whose_owner_went_unnoticed_is_removed_when_next_called(
    d: flux.Dispatcher[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The owner's weakref callback not run yet (as in a collection still
    # calling the callbacks): the listener's next call finds the owner gone
    # and removes it.
    monkeypatch.setattr("flux.stores._owner_collected", lambda watch: None)
    users = d.register_store(CurrentUserStore)
    log: list[str] = []
    owner = View(log)
    before = live_objects()
    subscription = users.add_listener(lambda: log.append("heard"), owner=owner)
    del owner
    assert live_objects() == before + 1  # unnoticed
    d.dispatch(refreshed("ada"))
    assert log == []
    assert live_objects() == before
    with pytest.raises(flux.UnknownTokenError):
        subscription.remove()


def test_a_removal_cut_short_when_the_owner_went_is_finished_by_the_next_add_listener(
    d: flux.Dispatcher[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The weakref callback noted the listener gone, then was cut short (an
    # interrupt) before removing it: the store's next add_listener sweeps it.
    monkeypatch.setattr("flux.stores._owner_collected", lambda watch: watch.gone.__setitem__(watch.cell.value, None))
    users = d.register_store(CurrentUserStore)
    log: list[str] = []
    owner = View(log)
    before = live_objects()
    subscription = users.add_listener(lambda: log.append("heard"), owner=owner)
    del owner
    assert live_objects() == before + 1
    users.add_listener(lambda: log.append("other"))
    assert live_objects() == before + 1  # the other one only
    with pytest.raises(flux.UnknownTokenError):
        subscription.remove()
    d.dispatch(refreshed("ada"))
    assert log == ["other"]


def test_the_owner_itself_as_the_listener(d: flux.Dispatcher[Any]) -> None:
    users = d.register_store(CurrentUserStore)
    log: list[str] = []
    view = View(log)
    users.add_listener(view, owner=view)
    d.dispatch(refreshed("ada"))
    gone = weakref.ref(view)
    del view
    assert gone() is None
    d.dispatch(refreshed("bob"))
    assert log == ["view called"]


def test_an_owner_bound_listener_removed_by_hand(d: flux.Dispatcher[Any]) -> None:
    users = d.register_store(CurrentUserStore)
    log: list[str] = []
    view = View(log)
    subscription = users.add_listener(view.refresh, owner=view)
    subscription.remove()
    d.dispatch(refreshed("ada"))
    del view  # nothing left to remove: quiet
    assert log == []


def test_an_owner_collected_during_an_emit_is_skipped_from_then_on(d: flux.Dispatcher[Any]) -> None:
    users = d.register_store(CurrentUserStore)
    log: list[str] = []
    holder: list[View] = [View(log, "doomed")]
    # The first listener lets go of the owner the second is bound to.
    users.add_listener(holder.clear)
    bound = users.add_listener(holder[0].refresh, owner=holder[0])
    users.add_listener(lambda: log.append("after"))
    d.dispatch(refreshed("ada"))
    d.dispatch(refreshed("bob"))
    assert log == ["after", "after"]
    with pytest.raises(flux.UnknownTokenError):
        bound.remove()


def test_an_owner_collected_by_the_cycle_collector(d: flux.Dispatcher[Any]) -> None:
    users = d.register_store(CurrentUserStore)
    log: list[str] = []
    view = View(log)
    view.me = view  # type: ignore[attr-defined]  # a cycle: only gc.collect frees it
    users.add_listener(view.refresh, owner=view)
    gone = weakref.ref(view)
    del view
    gc.collect()
    assert gone() is None
    d.dispatch(refreshed("ada"))
    assert log == []


def test_owners_bound_to_several_stores(d: flux.Dispatcher[Any]) -> None:
    messages = d.register_store(MessagesStore)
    log: list[str] = []
    view = View(log)
    messages.users.add_listener(view.refresh, owner=view)
    messages.add_listener(view.refresh, owner=view)
    before = live_objects()
    del view
    assert live_objects() == before - 2


def test_owner_bad_input(d: flux.Dispatcher[Any]) -> None:
    users = d.register_store(CurrentUserStore)

    class Slotted:
        __slots__ = ("x",)

        def refresh(self) -> None:
            pass

    class Bag(set[int]):
        pass

    slotted = Slotted()
    with pytest.raises(TypeError, match="weak references"):
        users.add_listener(slotted.refresh, owner=slotted)
    with pytest.raises(TypeError, match="weak references"):
        users.add_listener(lambda: None, owner=42)
    bag = Bag()
    with pytest.raises(TypeError, match="built-in method"):
        users.add_listener(bag.clear, owner=bag)
    with pytest.raises(TypeError, match="callable"):
        users.add_listener(None, owner=bag)  # type: ignore[arg-type]
    d.dispatch(refreshed("ada"))  # nothing half added


def test_add_listener_with_an_owner_on_a_closed_store(d: flux.Dispatcher[Any]) -> None:
    users = d.register_store(CurrentUserStore)
    users.close()
    view = View([])
    with pytest.raises(flux.InvalidArgumentError):
        users.add_listener(view.refresh, owner=view)
    gone = weakref.ref(view)
    del view
    assert gone() is None


def test_an_owner_outliving_its_store(d: flux.Dispatcher[Any]) -> None:
    users = d.register_store(CurrentUserStore)
    view = View([])
    users.add_listener(view.refresh, owner=view)
    d.close()
    del view  # the listener went with the store: nothing to remove, quietly


def test_an_owner_collected_on_another_thread_while_the_store_emits(d: flux.Dispatcher[Any]) -> None:
    users = d.register_store(CurrentUserStore)
    log: list[str] = []
    views = [View(log, str(i)) for i in range(200)]
    for view in views:
        users.add_listener(view.refresh, owner=view)
    del view  # the list holds the only references
    dropped = threading.Event()

    def drop() -> None:
        views.clear()
        dropped.set()

    dropper = threading.Thread(target=drop)
    dropper.start()
    while not dropped.is_set():
        d.dispatch(refreshed(len(log)))
    dropper.join()
    log.clear()
    d.dispatch(refreshed("last"))
    assert log == []
    assert live_objects() == 1  # the store itself


def test_two_threads_closing_stores_that_hold_each_others_owners_do_not_deadlock() -> None:
    # Each store holds, in a plain listener, the only reference to a view
    # bound to the OTHER store. Closing a store frees its listeners, so the
    # view goes and its weakref callback removes its binding from the other
    # store -- taking that store's lock. The holders meet at a barrier as
    # they are freed: were either close() still holding its own store's lock
    # then, each would wait for the other's lock for ever.
    both_freeing = threading.Barrier(2)

    class Holder:
        def __init__(self, view: View) -> None:
            self.view = view

        def __call__(self) -> None:
            pass

        def __del__(self) -> None:
            try:
                both_freeing.wait(timeout=1)
            except threading.BrokenBarrierError:
                pass

    # Not the fixture's: closing it would wait for the deadlocked threads.
    d: flux.Dispatcher[Any] = flux.Dispatcher()
    s, t = CurrentUserStore(d), CurrentUserStore(d)
    view_a, view_b = View([], "a"), View([], "b")
    s.add_listener(Holder(view_a))
    t.add_listener(Holder(view_b))
    t.add_listener(view_a.refresh, owner=view_a)
    s.add_listener(view_b.refresh, owner=view_b)
    del view_a, view_b
    start = threading.Barrier(2)

    def close(store: flux.Store) -> None:
        start.wait(timeout=1)
        store.close()

    assert all_return(close, (s, t)), "deadlock: each close() waits for the other store's lock"
    assert s.closed and t.closed
    d.close()


# ---------------------------------------------------------------------------
# Changes that carry an error
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("refused_in", ["reduce", "listener"])
def test_a_refused_dispatch_leaves_the_running_emits_error_alone(d: flux.Dispatcher[Any], refused_in: str) -> None:
    # dispatch() from inside the running dispatch is refused and "the running
    # dispatch goes on unharmed": its emit's error too.
    class Users(flux.ReduceStore[Any]):
        def get_initial_state(self) -> Any:
            return None

        def reduce(self, state: Any, action: Any) -> Any:
            if action == "refresh-failed":
                self.emit_change(error="offline")
                if refused_in == "reduce":
                    with pytest.raises(flux.AlreadyDispatchingError):
                        d.dispatch("retry")
            return state

    users = Users(d)
    seen: list[Any] = []

    def first() -> None:
        seen.append(users.error)
        if refused_in == "listener":
            with pytest.raises(flux.AlreadyDispatchingError):
                d.dispatch("retry")

    users.add_listener(first)
    users.add_listener(lambda: seen.append(users.error))
    d.dispatch("refresh-failed")
    assert seen == ["offline", "offline"]
    assert users.error is None, "over with its emit"


def test_an_error_emit_runs_the_listeners_on_an_unchanged_state(d: flux.Dispatcher[Any]) -> None:
    users = d.register_store(CurrentUserStore)
    seen: list[Any] = []
    users.add_listener(lambda: seen.append((users.state, users.error)))
    assert users.error is None, "outside an emit: None"
    failure = Failure("offline")
    d.dispatch(refreshed(error=failure))  # the state stays None
    assert seen == [(None, failure)], "listeners ran though nothing changed, and saw the error"
    assert users.error is None, "after the emit: None again"
    d.dispatch(refreshed("ada"))
    assert seen[-1] == ("ada", None)
    d.dispatch(flux.Action("something-else"))
    assert len(seen) == 2


def test_the_error_is_any_object_and_every_listener_sees_it(d: flux.Dispatcher[Any]) -> None:
    users = d.register_store(CurrentUserStore)
    seen: list[Any] = []
    for _ in range(3):
        users.add_listener(lambda: seen.append(users.error))
    d.dispatch(refreshed(error="timed out"))
    assert seen == ["timed out"] * 3


def test_a_listener_added_after_an_error_emit_in_the_same_handling_sees_the_error(
    d: flux.Dispatcher[Any],
) -> None:
    # Added while the store handles the payload, after emit_change(error=...):
    # it is a listener of this emit (the emit has not begun), so it runs in
    # it, and sees the error as every listener of the emit does.
    seen: list[Any] = []
    view = View([])

    class Log(flux.Store):
        def on_dispatch(self, payload: Any) -> None:
            self.emit_change(error=payload)
            if payload == "first":
                self.add_listener(lambda: seen.append(("added", self.error)))
                self.add_listener(lambda: seen.append(("owned", self.error)), owner=view)

    log = Log(d)
    log.add_listener(lambda: seen.append(("before", log.error)))
    d.dispatch("first")
    assert seen == [("before", "first"), ("added", "first"), ("owned", "first")]
    assert log.error is None, "the emit is over"
    seen.clear()
    d.dispatch("second")
    assert seen == [("before", "second"), ("added", "second"), ("owned", "second")]
    assert log.error is None


def test_a_listener_another_thread_adds_while_the_store_handles_an_error_sees_it(
    d: flux.Dispatcher[Any],
) -> None:
    # Added by another thread after emit_change(error=...), before the
    # handling is over: a listener of that emit too, which ran it after the
    # end of the error (the end runs after the listeners present when it was
    # added), so it read None while the emit ran.
    seen: list[Any] = []
    emitted, added = threading.Event(), threading.Event()

    class Log(flux.Store):
        def on_dispatch(self, payload: Any) -> None:
            self.emit_change(error=payload)
            emitted.set()
            added.wait()

    log = Log(d)
    log.add_listener(lambda: seen.append(("before", log.error)))
    dispatching = threading.Thread(target=d.dispatch, args=("first",))
    dispatching.start()
    emitted.wait()
    log.add_listener(lambda: seen.append(("added", log.error)))
    added.set()
    dispatching.join()
    assert seen == [("before", "first"), ("added", "first")]
    assert log.error is None, "the emit is over"
    seen.clear()
    d.dispatch("second")
    assert seen == [("before", "second"), ("added", "second")]
    assert log.error is None


def refused_add(handle: Any, fn: Any, key: Any, destroy: Any, out: Any) -> int:
    """flux_store_add_listener refusing for lack of memory, as libflux does:
    *out cleared, the context destroyed at once."""
    out._obj.value = 0
    destroy(key)
    return int(flux.Status.ERR_NO_MEMORY)


def test_a_listener_whose_error_emit_runs_out_of_memory_is_not_added(
    d: flux.Dispatcher[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    # add_listener during a handling that emitted an error emits it again,
    # which adds a listener of its own. Should libflux refuse that one (out
    # of memory: faked here, as libflux would, destroying the context), the
    # add fails whole: the caller's listener is not left behind (it had no
    # Subscription to remove it by), and the error still ends with its emit.
    real = _native.flux_store_add_listener_raw
    adds = [0]

    def refusing_the_third(handle: Any, fn: Any, key: Any, destroy: Any, out: Any) -> int:
        adds[0] += 1
        if adds[0] != 3:
            return int(real(handle, fn, key, destroy, out))
        return refused_add(handle, fn, key, destroy, out)

    seen: list[Any] = []
    refused: list[BaseException] = []

    class Log(flux.Store):
        def on_dispatch(self, payload: Any) -> None:
            self.emit_change(error=payload)  # add 1: the error's end
            if payload == "first":
                try:
                    self.add_listener(lambda: seen.append(("added", self.error)))  # add 2, then 3
                except flux.NoMemoryError as exc:
                    refused.append(exc)

    log = Log(d)
    log.add_listener(lambda: seen.append(("before", log.error)))
    monkeypatch.setattr("flux.stores._flux_store_add_listener_raw", refusing_the_third)
    d.dispatch("first")
    monkeypatch.undo()
    assert len(refused) == 1
    assert seen == [("before", "first")], "the refused listener did not run"
    assert log.error is None, "the emit is over"
    seen.clear()
    d.dispatch("second")
    assert seen == [("before", "second")], "nor does it later"
    assert log.error is None


def test_an_error_emit_out_of_memory_marks_the_change_and_keeps_no_error(
    d: flux.Dispatcher[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    # emit_change's ":raises NoMemoryError: with an error, out of memory to
    # note when its emit ends: the change is marked, the error not kept".
    # libflux's refusal of that note (a listener of the store's own) is
    # faked, as libflux would, destroying the context.
    seen: list[Any] = []
    refused: list[BaseException] = []

    class Log(flux.Store):
        def on_dispatch(self, payload: Any) -> None:
            if payload == "fails":
                with monkeypatch.context() as patched:
                    patched.setattr("flux.stores._flux_store_add_listener_raw", refused_add)
                    try:
                        self.emit_change(error="lost")
                    except flux.NoMemoryError as exc:
                        refused.append(exc)

    log = Log(d)
    log.add_listener(lambda: seen.append(log.error))
    d.dispatch("fails")
    assert len(refused) == 1
    assert seen == [None], "the change is marked: the listeners ran, with no error"
    assert log.error is None
    d.dispatch("unchanged")
    assert seen == [None], "nothing was left marked"


def test_an_interrupt_out_of_an_error_emit_leaves_no_end_behind(
    d: flux.Dispatcher[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    # emit_change(error=...) adds the error's end listener; adding it lets a
    # ReduceStore's own listener go, whose destroy a signal can interrupt,
    # and that comes out of emit_change after libflux took the end. That end
    # must still be the error's: left unrecorded, it stayed for good and
    # ended every later error before the listeners added after it ran.
    class Interrupt(BaseException):
        pass

    class Errors(flux.ReduceStore[int]):
        def get_initial_state(self) -> int:
            return 0

        def reduce(self, state: int, action: Any) -> int:
            self.emit_change(error=action)
            return state + 1

    store = Errors(d)
    remove = _native.flux_store_remove_listener_raw

    def interrupted_removal(handle: int, listener: int) -> int:
        status = remove(handle, listener)
        _native.park_escaped(threading.get_ident(), Interrupt())  # as if its destroy was interrupted
        return int(status)

    monkeypatch.setattr("flux.stores._flux_store_remove_listener_raw", interrupted_removal)
    with pytest.raises(Interrupt):
        d.dispatch("first")
    monkeypatch.undo()
    assert store.error is None
    seen: list[Any] = []
    store.add_listener(lambda: seen.append(store.error))
    d.dispatch("second")
    d.dispatch("third")
    assert seen == ["second", "third"], "each emit's listener sees its error"
    assert store.error is None


def test_a_refused_error_emit_keeps_no_error(d: flux.Dispatcher[Any]) -> None:
    users = d.register_store(CurrentUserStore)
    with pytest.raises(flux.NotDispatchingError):
        users.emit_change(error=Failure("x"))
    assert users.error is None
    seen: list[Any] = []
    users.add_listener(lambda: seen.append(users.error))
    d.dispatch(refreshed("ada"))
    assert seen == [None]


def test_the_error_ends_with_its_emit_not_with_the_dispatch(d: flux.Dispatcher[Any]) -> None:
    messages = d.register_store(MessagesStore)
    users = messages.users
    read_after_wait: list[Any] = []

    class Reader(flux.Store):
        def on_dispatch(self, payload: Any) -> None:
            self.dispatcher.wait_for([users])
            read_after_wait.append(users.error)

    Reader(d)
    d.dispatch(refreshed(error="offline"))
    assert read_after_wait == [None], "the store's listeners have run: its emit is over"


def test_the_error_read_from_the_store_while_it_handles_the_payload(d: flux.Dispatcher[Any]) -> None:
    # "store.error is that error while they [the listeners] run (None
    # otherwise)": the emit has not begun yet (as Swift's StoreBase.error).
    read: list[Any] = []

    class Log(flux.Store):
        def on_dispatch(self, payload: Any) -> None:
            read.append(self.error)
            self.emit_change(error=payload)
            read.append(self.error)

    log = Log(d)
    log.add_listener(lambda: read.append(log.error))
    d.dispatch("first")
    d.dispatch("second")
    assert read == [None, None, "first", None, None, "second"]


def test_a_store_waited_for_after_an_error_emit_does_not_see_that_error(d: flux.Dispatcher[Any]) -> None:
    # The error used to be set from emit_change(error=...) on, so a store
    # that ran meanwhile (here through wait_for, before the emit) saw it.
    # Swift's twin: anErrorIsSeenOnlyDuringItsEmit.
    class Own(flux.Store):
        def on_dispatch(self, payload: Any) -> None:
            self.emit_change(error=payload)
            self.dispatcher.wait_for([other])  # the other store handles the payload, and emits, now

    class Other(flux.Store):
        def on_dispatch(self, payload: Any) -> None:
            self.emit_change()

    own = Own(d)
    other = Other(d)  # registered after: it runs only through the wait
    seen: list[Any] = []
    other.add_listener(lambda: seen.append(("other", own.error)))
    own.add_listener(lambda: seen.append(("own", own.error)))
    d.dispatch("offline")
    assert seen == [("other", None), ("own", "offline")]
    assert own.error is None


def test_a_reduce_failing_after_an_error_emit_leaves_no_error(d: flux.Dispatcher[Any]) -> None:
    class Failing(flux.Store):
        def on_dispatch(self, payload: Any) -> None:
            self.emit_change(error=payload)
            if payload == "fail":
                raise Failure(payload)

    store = Failing(d)
    seen: list[Any] = []
    store.add_listener(lambda: seen.append(("first", store.error)))
    with pytest.raises(Failure):
        d.dispatch("fail")
    assert seen == [], "no listener ran"
    assert store.error is None, "the failed dispatch is over"
    # A listener added since runs after the others, and sees the next error.
    store.add_listener(lambda: seen.append(("second", store.error)))
    d.dispatch("late")
    assert seen == [("first", "late"), ("second", "late")]
    assert store.error is None


def test_a_failed_dispatch_ends_only_its_own_threads_error(
    d: flux.Dispatcher[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Thread x's dispatch failed after an error emit; before x ends that
    # error, the main thread's dispatch emits one of its own, which x must
    # leave alone: the main thread's listeners still see it.
    x_failed, main_emitted, x_ended = threading.Event(), threading.Event(), threading.Event()
    real_end_errors = flux.dispatcher._end_errors

    def end_errors_later(erring: Any) -> None:
        if threading.current_thread() is not threading.main_thread():
            x_failed.set()
            main_emitted.wait(5)
            real_end_errors(erring)
            x_ended.set()
        else:
            real_end_errors(erring)

    monkeypatch.setattr("flux.dispatcher._end_errors", end_errors_later)

    class Failing(flux.Store):
        def on_dispatch(self, payload: Any) -> None:
            self.emit_change(error=payload)
            if payload == "x":
                raise Failure(payload)
            main_emitted.set()
            x_ended.wait(5)

    store = Failing(d)
    seen: list[Any] = []
    store.add_listener(lambda: seen.append(store.error))
    raised: list[BaseException] = []

    def x() -> None:
        try:
            d.dispatch("x")
        except Failure as exc:
            raised.append(exc)

    thread = threading.Thread(target=x)
    thread.start()
    assert x_failed.wait(5)
    d.dispatch("main")
    thread.join(5)
    assert x_ended.is_set() and len(raised) == 1
    assert seen == ["main"]
    assert store.error is None


def test_a_failed_dispatch_lets_its_emitted_error_go(d: flux.Dispatcher[Any]) -> None:
    # Over with the dispatch, not kept until the store's next handling.
    class Error:
        pass

    errors: list[weakref.ref[Error]] = []

    class Failing(flux.Store):
        def on_dispatch(self, payload: Any) -> None:
            error = Error()
            errors.append(weakref.ref(error))
            self.emit_change(error=error)
            del error
            raise Failure(payload)

    Failing(d)
    with pytest.raises(Failure):
        d.dispatch("fail")
    assert errors[0]() is None


def test_a_listener_failing_in_an_error_emit_leaves_no_error(d: flux.Dispatcher[Any]) -> None:
    users = d.register_store(CurrentUserStore)

    def fail() -> None:
        raise Failure("listener")

    subscription = users.add_listener(fail)
    with pytest.raises(Failure):
        d.dispatch(refreshed(error="offline"))
    assert users.error is None
    subscription.remove()
    seen: list[Any] = []
    users.add_listener(lambda: seen.append(users.error))
    d.dispatch(refreshed("ada"))
    assert seen == [None]


def test_a_queued_dispatch_failing_after_an_error_emit_leaves_no_error(d: flux.Dispatcher[Any]) -> None:
    class Failing(flux.Store):
        def on_dispatch(self, payload: Any) -> None:
            if payload == "fail":
                self.emit_change(error="failed")
                raise Failure(payload)
            self.emit_change()

    store = Failing(d)
    seen: list[Any] = []
    store.add_listener(lambda: seen.append(store.error))
    errors: list[BaseException] = []

    def enqueue_both(payload: Any) -> None:
        if payload == "start":
            d.enqueue("fail", on_error=errors.append)
            d.enqueue("next")

    d.register(enqueue_both)
    d.dispatch("start")
    assert [type(e) for e in errors] == [Failure]
    assert seen == [None, None], "the queued dispatch after the failed one saw no error"


@pytest.mark.parametrize("failing", ["the store", "a store it waits for"])
def test_a_dispatch_queued_behind_a_failed_one_does_not_see_its_error(d: flux.Dispatcher[Any], failing: str) -> None:
    # The failed outer dispatch's error outlived it while the queue drained
    # (until dispatch() returned): the queued dispatch's listeners saw it.
    class Other(flux.Store):
        def on_dispatch(self, payload: Any) -> None:
            if payload == "fail":
                raise Failure(payload)

    class Users(flux.Store):
        def on_dispatch(self, payload: Any) -> None:
            if payload == "fail":
                self.emit_change(error="failed")
                d.enqueue("next")
                if failing == "the store":
                    raise Failure(payload)
                d.wait_for([other])
            self.emit_change()

    users = Users(d)
    other = Other(d)
    seen: list[Any] = []
    users.add_listener(lambda: seen.append(users.error))
    with pytest.raises(Failure):
        d.dispatch("fail")
    assert seen == [None], "the queued dispatch's emit carries no error"
    assert users.error is None


def test_callbacks_before_the_store_in_a_queued_dispatch_do_not_see_a_failed_emits_error(
    d: flux.Dispatcher[Any],
) -> None:
    # A listener failed in the emit, which stopped: its error was still
    # shown to what ran before the store in the dispatch queued behind it
    # (the store ended it only as it handled that payload).
    read: list[Any] = []
    d.register(lambda payload: read.append((payload, users.error)))

    class Users(flux.Store):
        def on_dispatch(self, payload: Any) -> None:
            if payload == "fail":
                self.emit_change(error="offline")

    users = Users(d)

    def fail() -> None:
        if users.error is not None:
            read.append(("listener", users.error))
            d.enqueue("next")
            raise Failure("listener")

    users.add_listener(fail)
    with pytest.raises(Failure):
        d.dispatch("fail")
    assert read == [("fail", None), ("listener", "offline"), ("next", None)]
    assert users.error is None


def test_closing_a_store_ends_its_error(d: flux.Dispatcher[Any]) -> None:
    class Failing(flux.Store):
        def on_dispatch(self, payload: Any) -> None:
            self.emit_change(error=payload)
            raise Failure(payload)

    store = Failing(d)
    with pytest.raises(Failure):
        d.dispatch("x")
    store.close()
    assert store.error is None


# ---------------------------------------------------------------------------
# wait_for with stores
# ---------------------------------------------------------------------------


def test_wait_for_takes_stores_and_tokens_mixed(d: flux.Dispatcher[Any]) -> None:
    order: list[str] = []

    def first(payload: Any) -> None:
        # Registered before the store and the token: the wait runs them, in
        # the order given.
        d.wait_for([late, users])
        d.wait_for((users,))  # already handled: skipped
        order.append(f"first read {users.state}")

    d.register(first)
    users = d.register_store(CurrentUserStore)
    users.add_listener(lambda: order.append("users"))
    late = d.register(lambda payload: order.append("token"))
    d.dispatch(refreshed("ada"))
    assert order == ["token", "users", "first read ada"]


def test_wait_for_a_store_from_a_store(d: flux.Dispatcher[Any]) -> None:
    messages = d.register_store(MessagesStore)
    d.dispatch(refreshed("ada"))
    d.dispatch(refreshed("bob"))
    assert messages.seen == ["ada", "bob"]


def test_wait_for_a_store_of_another_dispatcher_is_a_foreign_token(d: flux.Dispatcher[Any]) -> None:
    other: flux.Dispatcher[Any]
    with flux.Dispatcher() as other:
        foreign = other.register_store(CurrentUserStore)
        raised: list[BaseException] = []

        def wait(payload: Any) -> None:
            try:
                d.wait_for([foreign])
            except flux.UnknownTokenError as exc:
                raised.append(exc)

        d.register(wait)
        d.dispatch("x")
        assert len(raised) == 1
        assert raised[0].token == foreign.dispatch_token  # type: ignore[attr-defined]
        assert "not by this one" in str(raised[0])


def test_wait_for_a_closed_store_is_an_unknown_token(d: flux.Dispatcher[Any]) -> None:
    users = d.register_store(CurrentUserStore)
    users.close()
    raised: list[BaseException] = []

    def wait(payload: Any) -> None:
        try:
            d.wait_for([users])
        except flux.UnknownTokenError as exc:
            raised.append(exc)

    d.register(wait)
    d.dispatch("x")
    assert len(raised) == 1


def test_wait_for_something_neither_token_nor_store(d: flux.Dispatcher[Any]) -> None:
    users = d.register_store(CurrentUserStore)
    raised: list[BaseException] = []

    def wait(payload: Any) -> None:
        try:
            d.wait_for([users, "users"])  # type: ignore[list-item]
        except TypeError as exc:
            raised.append(exc)

    d.register(wait)
    d.dispatch("x")
    assert len(raised) == 1
    assert "flux.Token or a flux.Store" in str(raised[0])


def test_a_cycle_through_stores_names_the_store_classes(d: flux.Dispatcher[Any]) -> None:
    class A(flux.Store):
        def on_dispatch(self, payload: Any) -> None:
            self.dispatcher.wait_for([self.dispatcher.store(B)])

    class B(flux.Store):
        def on_dispatch(self, payload: Any) -> None:
            self.dispatcher.wait_for([self.dispatcher.store(A)])

    a = d.register_store(A)
    b = d.register_store(B)
    with pytest.raises(flux.CircularDependencyError) as caught:
        d.dispatch("x")
    # B waits for A, which is waiting for B.
    assert caught.value.cycle == (b.dispatch_token, a.dispatch_token, b.dispatch_token)
    assert "(A)" in str(caught.value) and "(B)" in str(caught.value)


# ---------------------------------------------------------------------------
# The example (make demo): the same story as the Swift one
# ---------------------------------------------------------------------------

EXAMPLE = os.path.join(os.path.dirname(__file__), os.pardir, os.pardir, os.pardir, "examples", "current_user.py")


@pytest.mark.skipif(not os.path.exists(EXAMPLE), reason="not in a libflux checkout")
def test_the_current_user_example_prints_what_the_swift_one_does() -> None:
    result = run_python([EXAMPLE])
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    assert result.stdout == (
        "current user refreshed:\n"
        "  profile view: signed in as ada\n"
        "  profile view: 3 unread\n"
        "a message read:\n"
        "  profile view: 2 unread\n"
        "refresh failed:\n"
        "  profile view: could not refresh: the server did not answer\n"
        "  profile view: 0 unread\n"
        "  profile view closed\n"
        "after the view closed, refreshed again (no view prints):\n"
        "messages: 1 unread\n"
    )
