"""Who keeps what alive: the dispatcher owns its callbacks, and nothing leaks."""

from __future__ import annotations

import gc
import itertools
import weakref
from collections.abc import Iterator
from typing import Any

import pytest
from on_threads import run_in_own_process

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


def test_a_token_does_not_keep_its_dispatcher_alive() -> None:
    # Token's docstring: a token names its dispatcher by serial number, not
    # by reference. State that keeps tokens (a store's, a view's) must not
    # keep a dispatcher it forgot open.
    d: flux.Dispatcher[Any] = flux.Dispatcher()
    tokens = [d.register(Callback([])), d.register(lambda p: None)]
    d_ref = weakref.ref(d)
    del d
    gc.collect()
    assert d_ref() is None
    assert [token.value for token in tokens] == [1, 2]


def test_a_listener_that_removes_itself_is_released_once_it_returns(d: flux.Dispatcher[Any]) -> None:
    # Subscription.remove: a running listener is released once it returns --
    # not kept until the store closes, and never called again.
    class Counter(flux.ReduceStore[int]):
        def get_initial_state(self) -> int:
            return 0

        def reduce(self, state: int, action: Any) -> int:
            return state + 1

    calls: list[str] = []

    class Once:
        def __init__(self) -> None:
            self.subscription: flux.Subscription | None = None

        def __call__(self) -> None:
            calls.append("once")
            assert self.subscription is not None
            self.subscription.remove()
            calls.append("removed, still running")

    store = Counter(d)
    store.add_listener(lambda: calls.append("other"))
    listener = Once()
    listener.subscription = store.add_listener(listener)
    ref = weakref.ref(listener)
    del listener
    d.dispatch("inc")
    assert calls == ["other", "once", "removed, still running"]
    assert ref() is None, "released with no collection, the store open"
    d.dispatch("inc")
    assert calls[3:] == ["other"]
    store.close()


def test_the_with_statement_closes() -> None:
    with flux.Dispatcher[Any]() as d:
        d.register(Callback([]))
        assert not d.closed
    assert d.closed and live_callbacks(d) == 0


def test_a_with_block_on_a_closed_dispatcher_enters_and_closes_again() -> None:
    # Dispatcher.close() lists it among what still works once closed.
    d: flux.Dispatcher[Any] = flux.Dispatcher()
    d.close()
    with d as entered:
        assert entered is d and d.closed
        with pytest.raises(flux.InvalidArgumentError):
            d.register(Callback([]))
    assert d.closed


def test_a_with_block_on_a_closed_store_enters_and_closes_again() -> None:
    # Store.close() lists it among what still works once closed.
    d: flux.Dispatcher[Any] = flux.Dispatcher()
    store = flux.Store(d)
    store.close()
    with store as entered:
        assert entered is store and store.closed
        with pytest.raises(flux.InvalidArgumentError):
            store.emit_change()
    assert store.closed
    d.close()


def test_a_with_block_on_a_closed_trampoline_enters_and_closes_again() -> None:
    # Trampoline.close() says so.
    t = flux.Trampoline("v()", lambda: None)
    t.close()
    with t as entered:
        assert entered is t and t.closed
    assert t.closed


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
    return {i for i, obj in enumerate(_native.objects) if obj is not None}


def test_contexts_are_recycled(d: flux.Dispatcher[Any]) -> None:
    before = live_contexts()
    used: set[int] = set()
    for _ in range(1000):
        token = d.register(lambda p: None)
        used |= live_contexts() - before
        d.unregister(token)
    assert live_contexts() == before
    assert len(used) == 1  # the same small int every time, not 1000 of them


def test_every_kind_of_context_lives_in_the_one_registry_and_its_slots_are_reused() -> None:
    # A registration, a store, a listener, a group, a flux.Trampoline, a
    # trace and an enqueued call: each holds a slot while libflux holds its
    # context, and the one destroy (or the call's done) frees it for the next.
    def live_kinds() -> int:
        return sum(obj is not None for obj in _native.objects)

    size = len(_native.objects)
    for _ in range(3):
        before = live_kinds()
        d: flux.Dispatcher[Any] = flux.Dispatcher()
        seen: list[int] = []

        def callback(p: Any, d: flux.Dispatcher[Any] = d, seen: list[int] = seen) -> None:
            if p == "queued":
                seen.append(live_kinds())
            else:
                d.enqueue("queued")

        d.register(callback)
        store = Holder(d)
        store.add_listener(Listener())
        flux.StoreGroup([store], Listener())
        trampoline = flux.Trampoline("i()", lambda: 0)
        trace = flux.Trace(d).start()
        assert live_kinds() == before + 6
        d.dispatch("go")
        assert seen == [before + 7], "the queued call's record lives until its done"
        assert live_kinds() == before + 6, "its done let it go"
        trampoline.close()
        trace.stop()
        d.close()
        assert live_kinds() == before
    assert len(_native.objects) <= size + 7, "the slots are reused"
    assert _native.stray == {"callback": 0, "destroy": 0}


def test_a_refused_registration_leaves_alone_the_slot_another_took_meanwhile(
    d: flux.Dispatcher[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    # libflux refuses a registration by writing 0 to the token, destroying
    # the context (freeing its slot) and failing. Another thread may take
    # that slot for the same callable before the refused call cleans up;
    # the cleanup must see that libflux ran, and leave that slot alone.
    def callback(payload: Any) -> None:
        calls.append(payload)

    calls: list[Any] = []
    taken: list[int] = []

    def refuse(handle: Any, function: Any, context: int, destroy: Any, out_ref: Any) -> int:
        out_ref._obj.value = 0
        _native._on_destroy(context)
        # Meanwhile, "another thread": the same callable, the freed slot.
        taken.append(_native.add(callback, d._pending))
        return int(flux.Status.ERR_NO_MEMORY)

    monkeypatch.setattr("flux.dispatcher._flux_register_raw", refuse)
    with pytest.raises(flux.NoMemoryError):
        d.register(callback)
    assert _native.objects[taken[0]] is callback, "the other registration's slot is still its own"
    _native._on_destroy(taken[0])
    assert _native.stray == {"callback": 0, "destroy": 0}


def test_an_unregister_refused_for_lack_of_memory_leaves_the_callback_registered(
    d: flux.Dispatcher[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    # unregister's ":raises NoMemoryError: during a dispatch, no memory to
    # note the removal; the callback stays registered" (libflux's refusal
    # faked: it runs out of memory only in the C tests). Kept means called,
    # named, and still ended by a later unregister and by close().
    calls: list[Any] = []
    callback = Callback(calls)
    ref = weakref.ref(callback)
    token = d.register(callback, name="kept")
    del callback
    refused: list[BaseException] = []

    def refuse(handle: Any, value: int) -> int:
        raise flux.NoMemoryError("flux_unregister: out of memory")

    def unregister_during_the_dispatch(payload: Any) -> None:
        if payload == 1:
            with monkeypatch.context() as patched:
                patched.setattr("flux.dispatcher._flux_unregister", refuse)
                try:
                    d.unregister(token)
                except flux.NoMemoryError as exc:
                    refused.append(exc)

    remover = d.register(unregister_during_the_dispatch)
    d.dispatch(1)
    d.dispatch(2)
    assert len(refused) == 1
    assert calls == [1, 2] and d.name_of(token) == "kept"
    d.unregister(remover)
    d.unregister(token)
    assert ref() is None and live_callbacks(d) == 0


def test_two_adds_growing_the_registry_at_once_take_two_slots(monkeypatch: pytest.MonkeyPatch) -> None:
    # Another thread (or a signal handler) may run at any call: here, its add
    # runs right as this one's grows the registry, before this one names the
    # slot it made. Each must still get a slot of its own.
    monkeypatch.setattr(_native, "free_contexts", [])
    # Slots made here exist only in the copy below: numbered apart, so the
    # registry's own numbering does not skip them.
    monkeypatch.setattr(_native, "_next_slot", itertools.count(len(_native.objects)).__next__)
    first, second = object(), object()
    taken: list[int] = []
    ran: list[bool] = []

    class Growing(list):  # type: ignore[type-arg]
        def append(self, item: Any) -> None:
            super().append(item)
            if not ran:
                ran.append(True)
                taken.append(_native.add(second))

    grown = Growing(_native.objects)
    monkeypatch.setattr(_native, "objects", grown)
    context = _native.add(first)
    assert context != taken[0], "both adds were handed the same slot"
    assert grown[context] is first
    assert grown[taken[0]] is second


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


# -- stores, and freeing without the cycle collector --------------------------


class State:
    """A store state that can be weakly referenced."""


class Listener:
    def __call__(self) -> None:
        pass


class Holder(flux.ReduceStore[State]):
    def get_initial_state(self) -> State:
        return State()

    def reduce(self, state: State, action: Any) -> State:
        return State()


class Plain(flux.Store):
    def on_dispatch(self, payload: Any) -> None:
        self.emit_change()


@pytest.fixture
def no_gc() -> Iterator[None]:
    """The cycle collector off: only reference counts free anything."""
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def test_a_dispatcher_with_stores_never_closed_is_collected(native_destroys: list[int]) -> None:
    destroyed = native_destroys
    d: flux.Dispatcher[Any] = flux.Dispatcher()
    handle = d._handle
    holder = Holder(d)
    plain = Plain(d)
    group = flux.StoreGroup([holder, plain], Listener())
    listener = Listener()
    holder.add_listener(listener)
    d.dispatch("x")
    refs = [weakref.ref(x) for x in (d, holder, plain, group, listener, holder.state)]
    del d, holder, plain, group, listener
    gc.collect()
    assert [r() for r in refs] == [None] * len(refs)
    assert handle in destroyed
    assert flux.stores.live_objects() == 0


# A store and a group whose __del__ reads, dispatches, closes and releases,
# as a class that cleans up after itself may: collected with their
# dispatcher, never closed.
FINALIZED_WITH_THEIR_DISPATCHER = """
import gc
import flux

seen = set()

class Counter(flux.ReduceStore):
    def get_initial_state(self):
        return 0

    def reduce(self, state, action):
        return state + 1

class Store(Counter):
    def __del__(self):
        seen.add(f"state {self.state}")
        self.dispatcher.dispatch("x")  # the stores collected handle nothing
        seen.add("dispatched")
        self.close()
        seen.add(f"closed {self.closed}")

class Group(flux.StoreGroup):
    def __del__(self):
        self.release()
        seen.add("released")

gc.disable()  # collected below, all at once
for _ in range(20):
    d = flux.Dispatcher()
    store = Store(d)
    Group([Counter(d)], lambda: None)
    d.dispatch("x")
    del d, store
    gc.collect()
print(sorted(seen), flux.stores.live_objects())
"""


def test_a_store_or_group_finalized_with_its_dispatcher_can_still_be_called() -> None:
    # A dispatcher never closed is collected with its stores and groups (each
    # refers to the other) by the cycle collector, which runs weakref
    # callbacks -- the dispatcher's finalizer -- before any __del__ of the
    # same garbage. The finalizer destroyed their native side there, and a
    # __del__ then reading, dispatching, closing or releasing them called
    # libflux on freed memory (a crash, or a dispatch that never returned).
    result = run_in_own_process(FINALIZED_WITH_THEIR_DISPATCHER, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "['closed True', 'dispatched', 'released', 'state 1'] 0\n"


@pytest.mark.parametrize("store_type", [Holder, Plain])
def test_closing_a_store_frees_it_and_all_it_held_without_the_cycle_collector(
    d: flux.Dispatcher[Any], no_gc: None, store_type: type[flux.Store]
) -> None:
    store = store_type(d)
    listener = Listener()
    store.add_listener(listener)
    d.dispatch("x")
    refs: list[weakref.ref[Any]] = [weakref.ref(store), weakref.ref(listener)]
    if isinstance(store, Holder):
        refs.append(weakref.ref(store.state))
    del listener
    store.close()
    del store
    assert [r() for r in refs] == [None] * len(refs)
    assert flux.stores.live_objects() == 0


def test_closing_a_dispatcher_frees_it_and_its_stores_without_the_cycle_collector(
    native_destroys: list[int], no_gc: None
) -> None:
    destroyed = native_destroys
    d: flux.Dispatcher[Any] = flux.Dispatcher()
    handle = d._handle
    holder = Holder(d)
    group = flux.StoreGroup([holder], Listener())
    holder.add_listener(Listener())
    d.register(Callback([]))
    d.dispatch("x")
    refs = [weakref.ref(x) for x in (d, holder, group, holder.state)]
    d.close()
    del d, holder, group
    assert [r() for r in refs] == [None] * len(refs)
    assert handle in destroyed
    assert flux.stores.live_objects() == 0


class Failing:
    def __call__(self, payload: Any) -> None:
        raise KeyError(payload)


class Waiting:
    def __init__(self, d: flux.Dispatcher[Any], tokens: list[flux.Token]) -> None:
        self.d = d
        self.tokens = tokens

    def __call__(self, payload: Any) -> None:
        self.d.wait_for(self.tokens)


def test_callbacks_of_a_failed_dispatch_are_freed_without_the_cycle_collector(
    d: flux.Dispatcher[Any], no_gc: None
) -> None:
    failing = Failing()
    tokens: list[flux.Token] = []
    waiting = Waiting(d, tokens)
    # Registered first, so it waits: the failure comes out of its wait_for.
    waiter_token = d.register(waiting)
    tokens.append(d.register(failing))
    refs: list[weakref.ref[Any]] = [weakref.ref(failing), weakref.ref(waiting)]
    del failing, waiting
    for _ in range(2):
        with pytest.raises(KeyError):
            d.dispatch("x")
    d.unregister(waiter_token)
    d.unregister(tokens[0])
    del tokens
    assert [r() for r in refs] == [None, None]


class Traced(Exception):
    """An exception that can be weakly referenced (a KeyError cannot)."""


@pytest.mark.parametrize("how", ["on_error", "raised", "queued_on_error", "queued_raised"])
def test_an_enqueued_failure_and_its_dispatcher_are_freed_without_the_cycle_collector(no_gc: None, how: str) -> None:
    # "Closing frees at once, by reference counting alone": the enqueue
    # frame kept the call's record, whose failure's traceback reaches that
    # frame -- a cycle holding the dispatcher, its stores and the failure.
    seen: list[weakref.ref[BaseException]] = []
    d: flux.Dispatcher[Any] = flux.Dispatcher()
    holder = Holder(d)

    def failing(payload: Any) -> None:
        if payload == "fail":
            raise Traced(payload)

    def on_error(exc: BaseException) -> None:
        seen.append(weakref.ref(exc))

    dispatcher = [d]  # let go below, as d is

    def cascade(payload: Any) -> None:
        if payload == "go":
            dispatcher[0].enqueue("fail", on_error if how == "queued_on_error" else None)

    d.register(failing)
    d.register(cascade)
    if how == "on_error":
        d.enqueue("fail", on_error)
    elif how == "raised":
        with pytest.raises(Traced) as info:
            d.enqueue("fail")
        seen.append(weakref.ref(info.value))
        del info
    elif how == "queued_on_error":
        d.dispatch("go")
    else:
        with pytest.raises(Traced) as info:
            d.dispatch("go")
        seen.append(weakref.ref(info.value))
        del info
    refs: list[weakref.ref[Any]] = [weakref.ref(d), weakref.ref(holder), *seen]
    assert len(refs) == 3
    d.close()
    del d, holder
    dispatcher.clear()
    assert [r() for r in refs] == [None] * len(refs)
    assert flux.dispatcher.live_enqueued() == 0


@pytest.mark.parametrize("how", ["copy", "deepcopy", "dumps"])
@pytest.mark.parametrize("what", ["Dispatcher", "ReduceStore", "StoreGroup", "Trace"])
def test_what_owns_native_state_cannot_be_copied_or_pickled(how: str, what: str) -> None:
    # A copy shared the native handle: the original's finalizer or close()
    # freed it under the copy, and closing both freed it twice.
    import copy
    import pickle

    class Counter(flux.ReduceStore[int]):
        def get_initial_state(self) -> int:
            return 0

        def reduce(self, state: int, action: Any) -> int:
            return state

    with flux.Dispatcher[Any]() as d:
        store = Counter(d)
        group = flux.StoreGroup([store], lambda: None)
        trace = flux.Trace(d).start()
        target = {"Dispatcher": d, "ReduceStore": store, "StoreGroup": group, "Trace": trace}[what]
        action: Any = {"copy": copy.copy, "deepcopy": copy.deepcopy, "dumps": pickle.dumps}[how]
        with pytest.raises(TypeError, match="cannot be copied or pickled"):
            action(target)
        trace.stop()
        group.release()
        store.close()
