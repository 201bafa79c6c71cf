"""Several Python threads on one or several dispatchers."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from on_threads import run_in_own_process

import flux
from flux.dispatcher import live_callbacks

TIMEOUT = 20.0


def run_threads(targets: list[Callable[[], None]]) -> None:
    """Starts every target at once; re-raises the first error of any thread."""
    errors: list[BaseException] = []
    start = threading.Barrier(len(targets))

    def wrap(target: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            try:
                start.wait(TIMEOUT)
                target()
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

        return run

    threads = [threading.Thread(target=wrap(t), daemon=True) for t in targets]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(TIMEOUT)
        assert not thread.is_alive(), "deadlock: a thread did not finish"
    if errors:
        raise errors[0]


def test_concurrent_dispatches_are_serialized_and_nothing_is_lost(
    d: flux.Dispatcher[Any],
) -> None:
    threads, dispatches, width = 6, 150, 4
    log: list[tuple[int, int]] = []
    active = [0]

    def first(p: tuple[int, int]) -> None:
        assert active[0] == 0, "two dispatches overlapped"
        active[0] = 1
        log.append(p)
        time.sleep(0)  # let other threads run if they can

    def middle(p: tuple[int, int]) -> None:
        log.append(p)
        time.sleep(0)

    def last(p: tuple[int, int]) -> None:
        log.append(p)
        active[0] = 0

    d.register(first)
    for _ in range(width - 2):
        d.register(middle)
    d.register(last)

    def dispatcher_thread(n: int) -> Callable[[], None]:
        def run() -> None:
            for i in range(dispatches):
                d.dispatch((n, i))

        return run

    run_threads([dispatcher_thread(n) for n in range(threads)])
    assert len(log) == threads * dispatches * width
    # Each dispatch's callbacks ran back to back, and each thread's dispatches in order.
    for k in range(0, len(log), width):
        assert len(set(log[k : k + width])) == 1
    for n in range(threads):
        assert [i for (m, i) in log[::width] if m == n] == list(range(dispatches))


def test_register_and_unregister_while_other_threads_dispatch(d: flux.Dispatcher[Any]) -> None:
    counts: dict[str, int] = {}
    lock = threading.Lock()

    def counter(name: str) -> Callable[[Any], None]:
        def cb(p: Any) -> None:
            with lock:
                counts[name] = counts.get(name, 0) + 1

        return cb

    d.register(counter("steady"))
    stop = threading.Event()
    total = [0]

    def dispatcher_thread() -> None:
        for _ in range(300):
            d.dispatch(None)
            with lock:
                total[0] += 1
        stop.set()

    def churn(seed: int) -> Callable[[], None]:
        def run() -> None:
            rng = random.Random(seed)
            mine: list[flux.Token] = []
            n = 0
            while not stop.is_set() or n < 50:
                if mine and rng.random() < 0.5:
                    d.unregister(mine.pop(rng.randrange(len(mine))))
                else:
                    mine.append(d.register(counter(f"churn{seed}.{n}")))
                    n += 1
                assert isinstance(d.is_dispatching, bool)
            for token in mine:
                d.unregister(token)

        return run

    run_threads([dispatcher_thread, dispatcher_thread, churn(1), churn(2), churn(3)])
    assert counts["steady"] == total[0] == 600
    assert live_callbacks(d) == 1


def test_register_unregister_and_is_dispatching_never_wait_for_a_dispatch(
    d: flux.Dispatcher[Any],
) -> None:
    entered, release = threading.Event(), threading.Event()

    def blocking(p: Any) -> None:
        entered.set()
        assert release.wait(TIMEOUT)

    d.register(blocking)
    dispatching = threading.Thread(target=lambda: d.dispatch(None), daemon=True)
    dispatching.start()
    try:
        assert entered.wait(TIMEOUT)
        started = time.monotonic()
        assert d.is_dispatching
        token = d.register(lambda p: None)
        d.unregister(token)
        with pytest.raises(flux.NotDispatchingError):  # not on the dispatching thread
            d.wait_for([])
        with pytest.raises(flux.AlreadyDispatchingError):  # in use elsewhere
            d.close()
        assert time.monotonic() - started < 5
        assert dispatching.is_alive()
    finally:
        release.set()
        dispatching.join(TIMEOUT)
    assert not d.is_dispatching


def test_a_second_threads_dispatch_waits_for_the_first(d: flux.Dispatcher[Any]) -> None:
    entered, release = threading.Event(), threading.Event()
    log: list[str] = []

    def cb(p: str) -> None:
        log.append(f"start {p}")
        if p == "first":
            entered.set()
            assert release.wait(TIMEOUT)
        log.append(f"end {p}")

    d.register(cb)
    first = threading.Thread(target=lambda: d.dispatch("first"), daemon=True)
    second = threading.Thread(target=lambda: d.dispatch("second"), daemon=True)
    first.start()
    assert entered.wait(TIMEOUT)
    second.start()
    time.sleep(0.1)  # the second is blocked inside flux_dispatch, without the GIL
    assert log == ["start first"]
    release.set()
    first.join(TIMEOUT)
    second.join(TIMEOUT)
    assert log == ["start first", "end first", "start second", "end second"]


# A dispatch first tries, keeping the GIL (its callbacks then take no GIL
# handoff); only when another thread dispatches does it wait, letting go of
# the GIL, which that thread's Python callbacks need. Each case below
# deadlocks -- the whole process, so each runs in one of its own -- if a call
# that waits kept the GIL.


@pytest.mark.parametrize("begun_by", ["dispatch", "enqueue"])
def test_a_dispatch_waits_without_the_gil_for_one_another_thread_began(begun_by: str) -> None:
    result = run_in_own_process(
        f"""
        import threading
        import flux
        d = flux.Dispatcher()
        entered, release = threading.Event(), threading.Event()
        log = []
        def callback(p):
            log.append(p)
            if p == "first":
                entered.set()
                release.wait()  # lets go of the GIL
        d.register(callback)
        first = threading.Thread(target=d.{begun_by}, args=("first",))
        first.start()
        entered.wait()
        # Runs only if the dispatch below waits without the GIL.
        threading.Timer(0.2, release.set).start()
        d.dispatch("second")
        first.join()
        assert log == ["first", "second"], log
        print("ok")
        """
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == "ok\n"


def test_an_enqueue_from_another_thread_during_a_dispatch_that_keeps_the_gil_is_queued() -> None:
    result = run_in_own_process(
        """
        import threading
        import flux
        d = flux.Dispatcher()
        log = []
        def callback(p):
            log.append(p)
            if p == "first":
                # Another thread enqueues while this dispatch runs: queued,
                # and run by this thread before its dispatch returns.
                t = threading.Thread(target=d.enqueue, args=("queued",))
                t.start()
                t.join()
        d.register(callback)
        d.dispatch("first")
        assert log == ["first", "queued"], log
        print("ok")
        """
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == "ok\n"


def test_an_interrupt_as_the_waiting_dispatch_returns_while_another_thread_dispatches_leaves_nothing() -> None:
    # The dispatch waited for another thread's (its try refused), then ran
    # and failed; an interrupt lands as libflux returns, before the status is
    # read, and by then a third thread dispatches. The failure goes with the
    # interrupt (a note): none is left in _pending for a later call.
    result = run_in_own_process(
        """
        import threading
        import flux
        from flux import dispatcher as module
        d = flux.Dispatcher()
        class Boom(Exception):
            pass
        own = Boom("own")
        held, release_held, third_in, release_third = (threading.Event() for _ in range(4))
        def callback(p):
            if p == "held":
                held.set()
                release_held.wait()
            elif p == "go":
                raise own
            elif p == "third":
                third_in.set()
                release_third.wait()
        d.register(callback)
        first = threading.Thread(target=d.dispatch, args=("held",))
        first.start()
        held.wait()
        real = module._flux_dispatch
        main = threading.get_ident()
        third = threading.Thread(target=d.dispatch, args=("third",))
        def waiting_dispatch(handle, payload):
            if threading.get_ident() != main:
                return real(handle, payload)
            threading.Timer(0.1, release_held.set).start()
            real(handle, payload)  # waits for "held", then runs "go"
            third.start()
            third_in.wait()
            raise KeyboardInterrupt  # as SIGINT landing as libflux returned
        module._flux_dispatch = waiting_dispatch
        try:
            d.dispatch("go")
        except KeyboardInterrupt as exc:
            raised = exc
        module._flux_dispatch = real
        release_third.set()
        first.join()
        third.join()
        assert not d._pending and not d._queued_errors, (d._pending, d._queued_errors)
        assert any("own" in note for note in getattr(raised, "__notes__", [])), raised
        d.dispatch("ok")
        print("ok")
        """
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == "ok\n"


def test_different_dispatchers_dispatch_concurrently() -> None:
    # Each callback waits until the other dispatcher's callback is running too:
    # this only finishes if the two dispatches really overlap.
    barrier = threading.Barrier(2)
    with flux.Dispatcher[Any]() as one, flux.Dispatcher[Any]() as two:
        one.register(lambda p: barrier.wait(TIMEOUT))
        two.register(lambda p: barrier.wait(TIMEOUT))
        run_threads([lambda: one.dispatch(None), lambda: two.dispatch(None)])


def test_each_dispatch_reraises_its_own_exception_across_dispatchers() -> None:
    class Tagged(Exception):
        pass

    rounds = 100
    barrier = threading.Barrier(2)
    with flux.Dispatcher[Any]() as one, flux.Dispatcher[Any]() as two:

        def raiser(p: Tagged) -> None:
            barrier.wait(TIMEOUT)  # both are inside a callback now
            raise p

        one.register(raiser)
        two.register(raiser)

        def worker(d: flux.Dispatcher[Any], name: str) -> Callable[[], None]:
            def run() -> None:
                for i in range(rounds):
                    exc = Tagged(name, i)
                    try:
                        d.dispatch(exc)
                    except Tagged as got:
                        assert got is exc
                    else:  # pragma: no cover
                        raise AssertionError("no exception")

            return run

        run_threads([worker(one, "one"), worker(two, "two")])


def test_each_dispatch_reraises_its_own_exception_on_one_dispatcher(
    d: flux.Dispatcher[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Dispatches of one dispatcher are serialized, but a finished dispatch's
    # thread may pick up its exception only after the next thread's dispatch
    # has started and failed: exceptions are kept per thread. Picking up the
    # exception is slowed down (releasing the GIL) to make that interleaving
    # happen.
    class Tagged(Exception):
        pass

    pick_up = flux.Dispatcher._dispatch_error

    def slow_pick_up(self: flux.Dispatcher[Any], status: int) -> BaseException:
        time.sleep(0.002)
        return pick_up(self, status)

    monkeypatch.setattr(flux.Dispatcher, "_dispatch_error", slow_pick_up)

    def raiser(p: Tagged) -> None:
        raise p

    d.register(lambda p: time.sleep(0))
    d.register(raiser)

    def worker(n: int) -> Callable[[], None]:
        def run() -> None:
            for i in range(40):
                exc = Tagged(n, i)
                try:
                    d.dispatch(exc)
                except Tagged as got:
                    assert got is exc, f"thread {n} got {got.args}, expected {exc.args}"
                else:  # pragma: no cover
                    raise AssertionError("no exception")

        return run

    run_threads([worker(n) for n in range(3)])


def test_wait_for_from_another_thread_is_not_dispatching(d: flux.Dispatcher[Any]) -> None:
    results: list[BaseException | None] = []
    other = d.register(lambda p: None)

    def cb(p: Any) -> None:
        def elsewhere() -> None:
            try:
                d.wait_for([other])
                results.append(None)
            except flux.FluxError as exc:
                results.append(exc)

        thread = threading.Thread(target=elsewhere)
        thread.start()
        thread.join(TIMEOUT)

    d.register(cb)
    d.dispatch(None)
    assert len(results) == 1 and isinstance(results[0], flux.NotDispatchingError)


def test_closing_while_another_thread_dispatches_is_refused(d: flux.Dispatcher[Any]) -> None:
    entered, release = threading.Event(), threading.Event()
    calls: list[int] = []

    def cb(p: int) -> None:
        calls.append(p)
        if p == 1:
            entered.set()
            assert release.wait(TIMEOUT)

    d.register(cb)
    thread = threading.Thread(target=lambda: d.dispatch(1), daemon=True)
    thread.start()
    assert entered.wait(TIMEOUT)
    with pytest.raises(flux.AlreadyDispatchingError):
        d.close()
    release.set()
    thread.join(TIMEOUT)
    d.dispatch(2)
    assert calls == [1, 2]


def test_many_threads_with_their_own_dispatchers() -> None:
    def worker(seed: int) -> Callable[[], None]:
        def run() -> None:
            rng = random.Random(seed)
            for _ in range(20):
                with flux.Dispatcher[Any]() as d:
                    calls: list[int] = []

                    def recorder(i: int, calls: list[int] = calls) -> Callable[[Any], None]:
                        return lambda p: calls.append(i)

                    tokens = [d.register(recorder(i)) for i in range(5)]
                    victim = rng.choice(tokens)
                    d.unregister(victim)
                    d.dispatch(None)
                    assert calls == [i for i, t in enumerate(tokens) if t != victim]

        return run

    run_threads([worker(n) for n in range(6)])


def test_closing_while_other_threads_hammer_the_dispatcher_never_crashes() -> None:
    # close() refuses while a dispatch runs, but a thread may be just about to
    # call in, or blocked inside flux_dispatch waiting for its turn: the native
    # dispatcher is only freed once the Dispatcher object is gone, so those
    # calls either work or see a closed dispatcher.
    for _ in range(5):
        close_while_hammered()


def close_while_hammered() -> None:
    d: flux.Dispatcher[Any] = flux.Dispatcher()
    calls = [0]
    d.register(lambda p: calls.__setitem__(0, calls[0] + 1))
    started = threading.Event()

    def hammer() -> None:
        started.set()
        while True:
            try:
                d.dispatch(None)
                token = d.register(lambda p: None)
                d.unregister(token)
            except flux.InvalidArgumentError:
                return  # closed
            except flux.UnknownTokenError:
                pass  # close() unregistered it first

    def closer() -> None:
        assert started.wait(TIMEOUT)
        time.sleep(0.005)
        while True:
            try:
                d.close()
                return
            except flux.AlreadyDispatchingError:
                time.sleep(0)

    run_threads([hammer, hammer, hammer, closer])
    assert d.closed and live_callbacks(d) == 0 and calls[0] > 0


def test_close_with_no_stores_waits_for_a_dispatch_entering_libflux(monkeypatch: pytest.MonkeyPatch) -> None:
    # "a dispatch whose call was already entering libflux on another thread
    # as this began is waited for": the other thread has read the handle,
    # close() finds the dispatcher idle, then the dispatch starts. With no
    # store to close, close() must still wait for it.
    from flux import dispatcher

    d: flux.Dispatcher[Any] = flux.Dispatcher()
    entering, go, started, release = (threading.Event() for _ in range(4))
    ended: list[Any] = []

    def callback(payload: Any) -> None:
        started.set()
        release.wait(5)
        ended.append(payload)

    d.register(callback)
    # The call a dispatch enters libflux by: its try (which starts it here:
    # nothing else dispatches).
    real_dispatch = vars(dispatcher)["_flux_try_dispatch"]
    real_is_dispatching = vars(dispatcher)["_flux_is_dispatching"]

    def entering_dispatch(handle: Any, payload: Any) -> Any:
        entering.set()  # the handle is read
        go.wait(5)
        return real_dispatch(handle, payload)

    checks: list[bool] = []

    def is_dispatching(handle: Any) -> Any:
        result = real_is_dispatching(handle)
        if not checks:  # close()'s own check: idle, then the dispatch starts
            checks.append(bool(result))
            go.set()
            started.wait(5)
            threading.Timer(0.1, release.set).start()
        return result

    monkeypatch.setattr(dispatcher, "_flux_try_dispatch", entering_dispatch)
    monkeypatch.setattr(dispatcher, "_flux_is_dispatching", is_dispatching)
    thread = threading.Thread(target=d.dispatch, args=("x",))
    thread.start()
    entering.wait(5)
    d.close()
    try:
        assert checks == [False]
        assert ended == ["x"]  # close() returned only once the dispatch was over
    finally:
        release.set()
        thread.join()
    assert live_callbacks(d) == 0


def test_dispatchers_dispatching_each_other_from_two_threads_fail_cleanly() -> None:
    # Each thread, inside a callback of its dispatcher, dispatches the
    # other's: both would wait for each other for good. The dispatch whose
    # wait closes the cycle raises AlreadyDispatchingError; the other runs.
    with flux.Dispatcher[Any]() as d1, flux.Dispatcher[Any]() as d2:
        inside = [threading.Event(), threading.Event()]
        outcomes: list[str] = []

        def crossing(me: int, other: flux.Dispatcher[Any]) -> Callable[[Any], None]:
            def callback(payload: Any) -> None:
                if payload != "outer":
                    return
                inside[me].set()
                assert inside[1 - me].wait(10)
                try:
                    other.dispatch("inner")
                    outcomes.append("ok")
                except flux.AlreadyDispatchingError as exc:
                    outcomes.append("refused: " + str(exc))

            return callback

        d1.register(crossing(0, d2))
        d2.register(crossing(1, d1))
        threads = [threading.Thread(target=d.dispatch, args=("outer",), daemon=True) for d in (d1, d2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        assert not any(thread.is_alive() for thread in threads), "the two threads deadlocked"
        assert sorted(o.split(":")[0] for o in outcomes) == ["ok", "refused"], outcomes
        assert "deadlock" in next(o for o in outcomes if o.startswith("refused"))


def test_an_escape_on_one_thread_stops_its_dispatch_while_other_threads_dispatches_end() -> None:
    # A trampoline's escape is parked per thread, behind one flag for every
    # thread (_native.left_over) that each dispatch's end may lower once it
    # finds nothing left anywhere. Another thread's dispatches, ending all the
    # time, must never lower it under this thread's entry: the next callback
    # of this dispatch would then run instead of failing.
    import sys

    from flux import _native

    class Escaped(Exception):
        pass

    rounds = 2000
    ran_after: list[int] = []
    raised: list[int] = []
    mine, other = flux.Dispatcher[Any](), flux.Dispatcher[Any]()
    n = [0]

    def first(p: int) -> None:
        if p % 2:
            _native.park_escaped(threading.get_ident(), Escaped(p))  # as the unraisable hook does

    def second(p: int) -> None:
        if p % 2:
            ran_after.append(p)

    mine.register(first)
    mine.register(second)
    other.register(lambda p: n.__setitem__(0, n[0] + 1))

    def escaping() -> None:
        for p in range(rounds):
            try:
                mine.dispatch(p)
            except Escaped as exc:
                raised.append(exc.args[0])

    def ending() -> None:
        for p in range(rounds * 5):
            other.dispatch(p)

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as CPython will
    try:
        run_threads([escaping, ending])
    finally:
        sys.setswitchinterval(interval)
    assert ran_after == []
    assert raised == list(range(1, rounds, 2))
    assert n[0] == rounds * 5
    assert not _native.escaped and not _native.left_over.up
    mine.close()
    other.close()
