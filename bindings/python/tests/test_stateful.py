"""Random register / unregister / dispatch / wait_for graphs against the model.

Hypothesis drives a RuleBasedStateMachine over one real dispatcher and the
reference model in flux_model.py. Callbacks are data (a tuple of Steps):
waits on any tokens (cycles, self-waits, unknown and never-issued tokens
included), unregistering or registering mid-dispatch, nested dispatches, and
raising. After every step the call order, every error seen inside callbacks,
the outcome of the operation, the tokens issued and the number of live
Python callbacks must agree with the model.
"""

from __future__ import annotations

from typing import Any

from flux_model import (
    ALREADY,
    CIRCULAR,
    NOT_DISPATCHING,
    UNKNOWN,
    Model,
    Step,
    boom_tag,
    log_matches,
)
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

import flux
from flux import _native
from flux.dispatcher import live_callbacks

MAX_TARGET = 5  # target indices 0..5; most name issued tokens, some never issued

KINDS: dict[type[BaseException], str] = {
    flux.UnknownTokenError: UNKNOWN,
    flux.CircularDependencyError: CIRCULAR,
    flux.AlreadyDispatchingError: ALREADY,
    flux.NotDispatchingError: NOT_DISPATCHING,
}


class Boom(Exception):
    def __init__(self, tag: str) -> None:
        super().__init__(tag)
        self.tag = tag


def kind(exc: BaseException) -> str:
    if isinstance(exc, Boom):
        return exc.tag
    return KINDS[type(exc)]


# -- strategies ---------------------------------------------------------------

targets = st.integers(0, MAX_TARGET)
# Mostly waits, errors mostly swallowed and raising rare, so that dispatches
# get deep enough to reach the interesting corners before they abort.
LEAF_OPS = ["wait"] * 6 + ["unregister"] * 3 + ["dispatch", "raise"]


@st.composite
def steps(draw: st.DrawFn, nested: bool = False) -> Step:
    op = draw(st.sampled_from(LEAF_OPS if nested else LEAF_OPS + ["register"] * 2))
    swallow = draw(st.integers(0, 3)) > 0
    if op == "wait":
        return Step(op, tuple(draw(st.lists(targets, max_size=3))), swallow)
    if op == "unregister":
        return Step(op, (draw(targets),), swallow)
    if op == "register":
        return Step(op, behaviour=tuple(draw(st.lists(steps(nested=True), max_size=2))))
    if op == "dispatch":
        return Step(op, swallow=swallow)
    return Step(op)


behaviours = st.lists(steps(), max_size=4).map(tuple)


# -- the real side ------------------------------------------------------------


class Harness:
    """Runs Steps against a real dispatcher, logging like the model."""

    def __init__(self) -> None:
        self.d: flux.Dispatcher[Any] = flux.Dispatcher()
        self.tokens: list[flux.Token] = []
        self.log: list[tuple[object, ...]] = []
        self.payload: object = None
        self.last_escaped: BaseException | None = None

    def token(self, index: int) -> flux.Token:
        if index < len(self.tokens):
            return self.tokens[index]
        return flux.Token(self.d._serial, 1000 + index)  # never issued

    def register(self, behaviour: tuple[Step, ...]) -> flux.Token:
        name = f"cb{len(self.tokens)}"
        token = self.d.register(self.callback(name, behaviour))
        self.tokens.append(token)
        return token

    def callback(self, name: str, behaviour: tuple[Step, ...]) -> Any:
        def run(payload: object) -> None:
            assert payload is self.payload, "a callback got another payload"
            assert self.d.is_dispatching
            self.log.append(("enter", name))
            for i, step in enumerate(behaviour):
                try:
                    self.step(name, i, step, payload)
                except (flux.FluxError, Boom) as exc:
                    self.log.append(("error", name, i, kind(exc)))
                    if step.op == "raise" or not step.swallow:
                        self.log.append(("fail", name))
                        self.last_escaped = exc
                        raise
            self.log.append(("exit", name))

        return run

    def step(self, name: str, i: int, step: Step, payload: object) -> None:
        if step.op == "wait":
            self.d.wait_for([self.token(t) for t in step.targets])
        elif step.op == "unregister":
            self.d.unregister(self.token(step.targets[0]))
        elif step.op == "register":
            self.register(step.behaviour)
        elif step.op == "raise":
            raise Boom(boom_tag(name, i))
        elif step.op == "dispatch":
            self.d.dispatch(payload)
        else:  # pragma: no cover
            raise AssertionError(step)


# -- the machine ----------------------------------------------------------------


class DispatcherMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.real = Harness()
        self.model = Model()

    @initialize(initial=st.lists(behaviours, min_size=2, max_size=6))
    def register_some(self, initial: list[tuple[Step, ...]]) -> None:
        for behaviour in initial:
            self.register(behaviour)

    @rule(behaviour=behaviours)
    def register(self, behaviour: tuple[Step, ...]) -> None:
        token = self.real.register(behaviour)
        expected = self.model.register(behaviour)
        assert token.value == expected, "tokens count up from 1 and are never reused"

    @rule(index=targets)
    def unregister(self, index: int) -> None:
        try:
            self.real.d.unregister(self.real.token(index))
            got = None
        except flux.FluxError as exc:
            got = kind(exc)
        assert got == self.model.unregister(index)

    @rule(indices=st.lists(targets, max_size=3))
    def wait_for_outside_a_dispatch(self, indices: list[int]) -> None:
        try:
            self.real.d.wait_for([self.real.token(i) for i in indices])
            got = None
        except flux.FluxError as exc:
            got = kind(exc)
        assert got in self.model.wait_for_outside(tuple(indices))

    @rule()
    def dispatch(self) -> None:
        real = self.real
        real.log = []
        real.payload = object()
        real.last_escaped = None
        try:
            real.d.dispatch(real.payload)
            got = None
        except (flux.FluxError, Boom) as exc:
            assert exc is real.last_escaped, "dispatch must re-raise the very exception"
            got = kind(exc)
        model_log, model_outcome = self.model.dispatch()
        assert log_matches(real.log, model_log), f"call order differs\n  libflux: {real.log}\n  model:   {model_log}"
        if model_outcome is None:
            assert got is None, f"dispatch raised {got}, the model says it succeeds"
        else:
            assert got in model_outcome, f"dispatch raised {got}, model expects {set(model_outcome)}"
        assert [t.value for t in real.tokens] == list(range(1, self.model.issued + 1))
        for entry in real.log:
            if entry[0] == "error":
                event(f"error inside a callback: {str(entry[3]).split(':')[0]}")
        event(
            f"dispatch: {'ok' if got is None else 'raised'}, {len(real.log)} log entries"
            if len(real.log) < 8
            else f"dispatch: {'ok' if got is None else 'raised'}, 8+ log entries"
        )

    @invariant()
    def idle_and_no_leaks(self) -> None:
        assert not self.real.d.is_dispatching
        # Every registration holds exactly one Python callback; those removed
        # (also mid-dispatch) have been released by libflux's destroy.
        assert live_callbacks(self.real.d) == len(self.model.registered)
        assert _native.stray == {"callback": 0, "destroy": 0}

    def teardown(self) -> None:
        self.real.d.close()
        assert live_callbacks(self.real.d) == 0


DispatcherMachine.TestCase.settings = settings(
    max_examples=1000,
    stateful_step_count=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestDispatcherAgainstModel = DispatcherMachine.TestCase


# -- stores -------------------------------------------------------------------

from flux_model import ListenerStep, StoreModel, StoreSpec

from flux.stores import live_objects


class Val:
    """A state with identity: every change is a new object."""

    __slots__ = ("v",)

    def __init__(self, v: int) -> None:
        self.v = v


# Mostly removals (of listeners that mostly exist) and additions; raising
# rare, so that emits get far enough to meet them.
listener_steps = st.lists(
    st.one_of(
        st.builds(ListenerStep, st.just("remove"), st.integers(1, 5)),
        st.builds(ListenerStep, st.just("remove"), st.integers(1, 5)),
        st.just(ListenerStep("add")),
        st.just(ListenerStep("dispatch")),
        st.just(ListenerStep("raise")),
    ),
    max_size=3,
).map(tuple)


class StoreMachine(RuleBasedStateMachine):
    """Reduce stores, listeners that remove and add listeners, dispatch
    (refused) or raise, groups and failing reduces, against StoreModel."""

    def __init__(self) -> None:
        super().__init__()
        self.d: flux.Dispatcher[Any] = flux.Dispatcher()
        self.model = StoreModel()
        self.stores: dict[int, flux.ReduceStore[Val]] = {}
        self.groups: dict[int, flux.StoreGroup] = {}
        self.subs: dict[tuple[int, int], flux.Subscription] = {}
        self.next_lid: dict[int, int] = {}  # store -> the id its next listener gets
        self.log: list[tuple[object, ...]] = []

    def make_store(self, index: int, spec: StoreSpec) -> flux.ReduceStore[Val]:
        class Counter(flux.ReduceStore[Val]):
            def get_initial_state(self) -> Val:
                return Val(0)

            def reduce(self, state: Val, p: int) -> Val:
                if p in spec.fails:
                    self_log.append(("reduce-failed", index))
                    raise Boom(f"reduce:{index}")
                return state if p % spec.keep_mod == 0 else Val(state.v + p)

        self_log = self.log
        return Counter(self.d)

    def listener(self, store: int, lid: int, steps: tuple[ListenerStep, ...]) -> Any:
        def run() -> None:
            self.log.append(("listener", store, lid))
            for step in steps:
                if step.op == "remove":
                    sub = self.subs.pop((store, step.arg), None)
                    if sub is not None:
                        sub.remove()
                elif step.op == "add":
                    self.add_real_listener(store, ())
                elif step.op == "dispatch":
                    try:
                        self.d.dispatch(0)
                    except flux.AlreadyDispatchingError:
                        self.log.append(("refused", store, lid))
                elif step.op == "raise":
                    raise Boom(f"listener:{store}:{lid}")

        return run

    def add_real_listener(self, store: int, steps: tuple[ListenerStep, ...]) -> int:
        lid = self.next_lid.get(store, 1)
        sub = self.stores[store].add_listener(self.listener(store, lid, steps))
        assert sub.id == lid, "listener ids count up from 1, never reused"
        self.next_lid[store] = lid + 1
        self.subs[(store, lid)] = sub
        return lid

    @initialize(listeners=st.lists(listener_steps, min_size=2, max_size=4))
    def a_store_with_listeners(self, listeners: list[tuple[ListenerStep, ...]]) -> None:
        self.add_store(frozenset(), 7)
        for steps in listeners:
            lid = self.add_real_listener(0, steps)
            assert self.model.add_listener(0, steps) == lid

    @rule(fails=st.frozensets(st.integers(1, 6), max_size=2), keep_mod=st.integers(2, 4))
    def add_store(self, fails: frozenset[int], keep_mod: int) -> None:
        spec = StoreSpec(fails, keep_mod)
        index = self.model.add_store(spec)
        store = self.make_store(index, spec)
        self.stores[index] = store
        assert store.dispatch_token.value == self.model.stores[index].token

    @rule(data=st.data(), steps=listener_steps)
    def add_listener(self, data: st.DataObject, steps: tuple[ListenerStep, ...]) -> None:
        if not self.stores:
            return
        store = data.draw(st.sampled_from(sorted(self.stores)))
        lid = self.add_real_listener(store, steps)
        assert self.model.add_listener(store, steps) == lid

    @rule(data=st.data())
    def remove_listener(self, data: st.DataObject) -> None:
        if not self.subs:
            return
        key = data.draw(st.sampled_from(sorted(self.subs)))
        self.subs.pop(key).remove()
        assert self.model.remove_listener(*key)

    @rule(data=st.data(), raises=st.booleans())
    def add_group(self, data: st.DataObject, raises: bool) -> None:
        if not self.stores:
            return
        members = tuple(data.draw(st.lists(st.sampled_from(sorted(self.stores)), min_size=1, max_size=3, unique=True)))
        index = self.model.add_group(members, raises)
        log = self.log

        def fn() -> None:
            log.append(("group", index))
            if raises:
                raise Boom(f"group:{index}")

        self.groups[index] = flux.StoreGroup([self.stores[s] for s in members], fn)

    @rule(data=st.data())
    def release_group(self, data: st.DataObject) -> None:
        if not self.groups:
            return
        index = data.draw(st.sampled_from(sorted(self.groups)))
        self.groups.pop(index).release()
        self.model.release_group(index)

    @rule(data=st.data())
    def close_store(self, data: st.DataObject) -> None:
        if not self.stores:
            return
        index = data.draw(st.sampled_from(sorted(self.stores)))
        allowed = self.model.close_store(index)
        if allowed:
            self.stores.pop(index).close()
            for key in [k for k in self.subs if k[0] == index]:
                del self.subs[key]
        else:
            try:
                self.stores[index].close()
            except flux.InvalidArgumentError:
                pass
            else:  # pragma: no cover
                raise AssertionError("a store in a live group was closed")

    @rule(p=st.integers(1, 6))
    def dispatch(self, p: int) -> None:
        self.log.clear()
        try:
            self.d.dispatch(p)
            got = None
        except Boom as exc:
            got = str(exc)
        # Listeners removed by other listeners left self.subs in step with
        # the model; drop handles of listeners the model no longer has.
        skipped = self.model.skipped
        want_log, want = self.model.dispatch(p)
        if self.model.skipped > skipped:
            event("a listener removed by an earlier one was skipped")
        assert self.log == want_log, f"\n  libflux: {self.log}\n  model:   {want_log}"
        assert got == want
        for key in [k for k in self.subs if k[1] not in self.model.stores[k[0]].listeners]:
            del self.subs[key]
        for index, store in self.stores.items():
            assert store.state.v == self.model.stores[index].value
        event(f"store dispatch: {'ok' if got is None else got.split(':')[0]}")

    @invariant()
    def no_leaks(self) -> None:
        assert not self.d.is_dispatching
        assert live_objects() == self.model.live_objects()

    def teardown(self) -> None:
        self.d.close()
        assert live_objects() == 0


StoreMachine.TestCase.settings = settings(
    max_examples=300,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestStoresAgainstModel = StoreMachine.TestCase
