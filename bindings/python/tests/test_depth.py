"""Chains of wait_for deeper than the stack or the recursion limit: a
catchable error out of dispatch, never a crash, and the dispatcher goes on."""

from __future__ import annotations

import ctypes
import functools
import subprocess
import sys
import textwrap
from collections.abc import Callable
from typing import Any

import pytest
from on_threads import run_in_own_process

import flux
from flux.dispatcher import live_callbacks


def run_script(body: str) -> subprocess.CompletedProcess[str]:
    """Runs body in a fresh interpreter (a crash must not take pytest down)."""
    return run_in_own_process("import flux, sys, threading\n" + textwrap.dedent(body))


#: The stack a too-deep chain runs on: 512 KiB, the main thread's (its
#: RLIMIT_STACK, which glibc reports as its size) or a thread's. Since 3.12
#: the interpreter also bounds C recursion, by a limit sys.setrecursionlimit
#: does not raise, which stops a chain of Python callbacks before an 8 MiB
#: stack runs out (at about 500 links on 3.12, 3,300 on 3.13): a RecursionError,
#: not libflux's depth check. On this stack the check comes first everywhere.
SMALL_STACK = textwrap.dedent(
    """
    import resource
    STACK = 512 * 1024
    resource.setrlimit(resource.RLIMIT_STACK, (STACK, resource.getrlimit(resource.RLIMIT_STACK)[1]))
    threading.stack_size(STACK)
    """
)


CHAIN_SOURCE = textwrap.dedent(
    """
    def chain(d, links):
        tokens, calls = [], []
        def make(i):
            def callback(payload):
                calls.append(i)
                if i + 1 < links:
                    d.wait_for([tokens[i + 1]])
            return callback
        for i in range(links):
            tokens.append(d.register(make(i)))
        return calls
    """
)


def test_too_deep_error_is_a_flux_error_and_a_recursion_error() -> None:
    assert issubclass(flux.TooDeepError, flux.FluxError)
    assert issubclass(flux.TooDeepError, RecursionError)
    assert int(flux.Status.ERR_TOO_DEEP) == 8
    assert flux.Status.ERR_TOO_DEEP.c_name == "FLUX_ERR_TOO_DEEP"


@pytest.mark.parametrize("where", ["main thread", "thread"])
def test_chain_deeper_than_the_stack_raises_too_deep_error(where: str) -> None:
    # The recursion limit raised far beyond what the C stack holds: without
    # the library's depth check this chain overflows the stack and crashes.
    body = CHAIN_SOURCE + textwrap.dedent(
        """
        sys.setrecursionlimit(1_000_000)
        def run():
            d = flux.Dispatcher()
            calls = chain(d, 20_000)
            try:
                d.dispatch("deep")
            except flux.TooDeepError as exc:
                assert exc.status == 8, exc.status
                assert "too deep" in str(exc), str(exc)
                assert isinstance(exc, RecursionError)
                depth = len(calls)
                assert 100 < depth < 20_000, depth
                assert sorted(calls) == list(range(depth)), "each link once, in order"
            else:
                raise AssertionError("no TooDeepError")
            assert not d.is_dispatching
            # The same dispatcher, a chain that fits: works.
            d2 = flux.Dispatcher()
            calls2 = chain(d2, 50)
            d2.dispatch("shallow")
            assert calls2 == list(range(50))
            d.close()
            print("depth", depth)
        """
    )
    body = SMALL_STACK + body
    if where == "thread":
        body += "t = threading.Thread(target=run); t.start(); t.join()\n"
    else:
        body += "run()\n"
    result = run_script(body)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("depth"), result.stdout + result.stderr
    assert "Traceback" not in result.stderr, result.stderr


def test_chain_reaching_the_recursion_limit_raises_recursion_error(d: flux.Dispatcher[Any]) -> None:
    # Well within the C stack, beyond the interpreter's recursion limit:
    # Python's own RecursionError, from wherever the limit is hit (a ctypes
    # call converting its arguments wraps it in ctypes.ArgumentError, which
    # must not leak out). The dispatcher is idle and usable after.
    limit = sys.getrecursionlimit()
    links = [limit * 2]
    tokens: list[flux.Token] = []
    calls: list[int] = []

    def make(i: int) -> Any:
        def callback(payload: object) -> None:
            calls.append(i)
            if i + 1 < links[0]:
                d.wait_for([tokens[i + 1]])

        return callback

    for i in range(limit * 2):
        tokens.append(d.register(make(i)))
    with pytest.raises(RecursionError) as info:
        d.dispatch(1)
    assert not isinstance(info.value, flux.TooDeepError)
    assert 10 < len(calls) < limit * 2
    assert not d.is_dispatching
    links[0] = 20  # now the chain is 20 deep; every other callback runs alone
    calls.clear()
    d.dispatch(2)
    assert sorted(calls) == list(range(limit * 2))


class Counter(flux.ReduceStore[int]):
    def get_initial_state(self) -> int:
        return 0

    def reduce(self, state: int, action: Any) -> int:
        return state + 1


class Plain(flux.Store):
    def on_dispatch(self, payload: Any) -> None:
        pass


def _at_depth(frames: int, call: Callable[[], object]) -> object:
    return _at_depth(frames - 1, call) if frames > 0 else call()


def _frames_below() -> int:
    """How many frames the caller's is, counting from the first."""
    frame, frames = sys._getframe(1), 1
    while frame.f_back is not None:
        frame, frames = frame.f_back, frames + 1
    return frames


#: Store calls into libflux, each made from d and one store that exist.
STORE_CALLS: dict[str, Callable[[flux.Dispatcher[Any], Counter, list[Any]], object]] = {
    "ReduceStore()": lambda d, store, made: made.append(Counter(d)),
    "Store()": lambda d, store, made: made.append(Plain(d)),
    "state": lambda d, store, made: store.state,
    "get_state": lambda d, store, made: store.get_state(),
    "add_listener": lambda d, store, made: made.append(store.add_listener(lambda: None)),
    "add_listener(owner=)": lambda d, store, made: made.append(store.add_listener(lambda: None, owner=made)),
    "Subscription.remove": lambda d, store, made: store.add_listener(lambda: None).remove(),
    "has_changed": lambda d, store, made: store.has_changed(),
    "emit_change": lambda d, store, made: store.emit_change(),
    "close": lambda d, store, made: Counter(d).close(),
    "StoreGroup": lambda d, store, made: made.append(flux.StoreGroup([store], lambda: None)),
    "StoreGroup.release": lambda d, store, made: flux.StoreGroup([store], lambda: None).release(),
    "wait_for(store)": lambda d, store, made: d.wait_for([store]),
}


class Recorded(list):  # type: ignore[type-arg]
    """A list an owner-bound listener can be bound to (a list cannot)."""


@pytest.mark.parametrize("call", list(STORE_CALLS))
def test_store_calls_at_the_recursion_limit_raise_recursion_error(d: flux.Dispatcher[Any], call: str) -> None:
    # ctypes converts a call's arguments in Python code, and at the
    # recursion limit wraps the RecursionError that raises in
    # ctypes.ArgumentError: a store call must raise RecursionError, as
    # dispatch does, wherever between its first call and libflux the
    # limit is hit.
    store = Counter(d)
    made: list[Any] = Recorded()
    outcomes: set[str] = set()
    limit, below = sys.getrecursionlimit(), _frames_below()
    for spare in range(60):  # from over the limit to well within it
        try:
            _at_depth(limit - below - spare, lambda: STORE_CALLS[call](d, store, made))
        except ctypes.ArgumentError as exc:
            outcomes.add(f"ArgumentError: {exc}")
        except RecursionError:
            outcomes.add("RecursionError")
        except flux.FluxError:
            outcomes.add("returned")  # refused by libflux (not dispatching): it ran
        else:
            outcomes.add("returned")
    assert outcomes == {"RecursionError", "returned"}, outcomes
    for thing in made:  # a store, a group or a subscription
        if isinstance(thing, flux.Subscription):
            thing.remove()
        else:
            thing.close()
    d.dispatch("inc")  # and the store goes on
    assert store.state == 1


def test_a_too_deep_enqueue_is_reported_exactly_once() -> None:
    # Issue 15 item 9: an enqueue whose own dispatch goes too deep was
    # reported twice (on_error ran and enqueue raised too), or, with no
    # on_error, raised once more by the next successful enqueue. On a small
    # stack, so that the chain ends too deep on every version (see SMALL_STACK).
    body = SMALL_STACK + textwrap.dedent(
        """
        sys.setrecursionlimit(1_000_000)
        d = flux.Dispatcher()
        links = [20_000]  # how deep the chain goes; 1: every callback alone
        queue_bad = [False]  # the first callback queues a payload that fails
        class Boom(Exception):
            pass
        def first(payload):
            if payload == "bad":
                raise Boom("queued")
            if queue_bad[0]:
                queue_bad[0] = False
                d.enqueue("bad")
        d.register(first)
        tokens = []
        def make(i):
            def callback(payload):
                if i + 1 < links[0]:
                    d.wait_for([tokens[i + 1]])
            return callback
        for i in range(20_000):
            tokens.append(d.register(make(i)))

        # With on_error: given to it, once, and enqueue raises nothing.
        errors = []
        d.enqueue("deep", on_error=errors.append)
        assert len(errors) == 1 and isinstance(errors[0], flux.TooDeepError), errors
        # Without: raised by enqueue itself.
        try:
            d.enqueue("deep")
        except flux.TooDeepError:
            pass
        else:
            raise AssertionError("the too-deep enqueue raised nothing")
        # Later successful calls on this thread raise nothing.
        links[0] = 1
        d.enqueue("shallow")
        d.dispatch("shallow")
        assert len(errors) == 1, errors

        # A dispatch that ends too deep after queueing a payload that fails:
        # the queued failure comes out of that very call, never a later one.
        queue_bad[0] = True
        links[0] = 20_000
        try:
            d.dispatch("deep")
        except flux.TooDeepError as exc:
            notes = getattr(exc, "__notes__", [])
            assert any("Boom: queued" in note for note in notes), notes
        else:
            raise AssertionError("the too-deep dispatch raised nothing")
        links[0] = 1
        d.dispatch("shallow")  # nothing left over
        d.enqueue("shallow")
        assert not d.is_dispatching
        print("ok")
        """
    )
    result = run_script(body)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("ok"), result.stdout + result.stderr
    assert "Traceback" not in result.stderr, result.stderr


def _closed_dispatcher() -> None:
    other: flux.Dispatcher[Any] = flux.Dispatcher()
    try:
        other.close()
    finally:
        try:
            other.close()  # finishes a close the limit cut short
        except RecursionError:
            pass


#: Dispatcher calls into libflux, each made from an open dispatcher.
DISPATCHER_CALLS: dict[str, Callable[[flux.Dispatcher[Any]], object]] = {
    "register": lambda d: d.unregister(d.register(print)),
    "is_dispatching": lambda d: d.is_dispatching,
    "close": lambda d: _closed_dispatcher(),
    "dispatch": lambda d: d.dispatch(1),
    "enqueue": lambda d: d.enqueue(1),
}


@pytest.mark.parametrize("call", list(DISPATCHER_CALLS))
def test_dispatcher_calls_at_the_recursion_limit_raise_recursion_error(d: flux.Dispatcher[Any], call: str) -> None:
    # As for store calls: ctypes.ArgumentError never leaks out of a
    # Dispatcher method (see _native.argument_error).
    outcomes: set[str] = set()
    limit, below = sys.getrecursionlimit(), _frames_below()
    for spare in range(80):
        try:
            _at_depth(limit - below - spare, lambda: DISPATCHER_CALLS[call](d))
        except ctypes.ArgumentError as exc:
            outcomes.add(f"ArgumentError: {exc}")
        except RecursionError:
            outcomes.add("RecursionError")
        else:
            outcomes.add("returned")
    assert outcomes == {"RecursionError", "returned"}, outcomes
    assert live_callbacks(d) == 0


class Failure(Exception):
    pass


@pytest.mark.parametrize("fails", [False, True], ids=["returns", "raises"])
@pytest.mark.parametrize("how", ["dispatch", "enqueue"])
@pytest.mark.parametrize("kind", ["callback", "store", "listener", "group", "traced"])
def test_what_runs_at_the_recursion_limit_runs_or_the_call_raises_recursion_error(
    d: flux.Dispatcher[Any], capfd: pytest.CaptureFixture[str], kind: str, how: str, fails: bool
) -> None:
    # A trampoline entered at the limit failed before its try, and so did
    # what it runs on failure (park_exception, the unraisable hook): C read
    # garbage as the result, so the callback was skipped or its exception
    # lost, and "Exception ignored" was printed -- on 3.12, and on 3.10 and
    # 3.11 nearer the limit. A call into libflux first checks there is room.
    ran: list[Any] = []
    failure = Failure("the callback's")

    def handle(payload: int) -> None:
        ran.append(payload)
        if fails:
            raise failure

    if kind in ("callback", "traced"):
        d.register(handle)
        if kind == "traced":  # every observer hook a trampoline too
            flux.Trace(d).start()
    elif kind == "listener":

        class Changing(flux.Store):
            def on_dispatch(self, payload: Any) -> None:
                self.payload = payload
                self.emit_change()

        changing = Changing(d)
        changing.add_listener(lambda: handle(changing.payload))
    elif kind == "group":

        class Quiet(flux.Store):
            def on_dispatch(self, payload: Any) -> None:
                self.payload = payload

        quiet = Quiet(d)
        flux.StoreGroup([quiet], lambda: handle(quiet.payload))
    else:

        class Handled(flux.ReduceStore[int]):
            def get_initial_state(self) -> int:
                return 0

            def reduce(self, state: int, action: Any) -> int:
                handle(action)
                return state + 1

        Handled(d).add_listener(lambda: ran.append("listener"))
    done = [] if fails else ["listener"] if kind == "store" else []
    outcomes: set[str] = set()
    limit, below = sys.getrecursionlimit(), _frames_below()
    for spare in range(80):
        ran.clear()
        try:
            _at_depth(limit - below - spare, functools.partial(getattr(d, how), spare))
        except RecursionError:
            outcomes.add("RecursionError")
            assert ran in ([], [spare], [spare, *done]), spare
        except Failure as exc:
            assert fails and exc is failure and ran == [spare], spare
            outcomes.add("raised")
        else:
            assert not fails and ran == [spare, *done], (spare, ran)
            outcomes.add("ran")
    assert outcomes == {"RecursionError", "raised" if fails else "ran"}, outcomes
    assert "Exception ignored" not in capfd.readouterr().err
    assert not d.is_dispatching
