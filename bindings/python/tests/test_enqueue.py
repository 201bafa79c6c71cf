"""Dispatcher.enqueue: queued dispatch for actions that cause actions."""

from __future__ import annotations

import threading
from collections.abc import Callable
from ctypes import ArgumentError
from typing import Any

import pytest
from on_threads import fork_during_a_dispatch, run_in_own_process

import flux


class Boom(Exception):
    pass


def test_idle_enqueue_dispatches_at_once(d: flux.Dispatcher[Any]) -> None:
    seen: list[object] = []
    d.register(seen.append)
    payload = object()
    d.enqueue(payload)
    assert seen == [payload]
    assert not d.is_dispatching


def test_cascading_enqueue_is_fifo_each_a_full_dispatch(d: flux.Dispatcher[Any]) -> None:
    log: list[str] = []

    def a(p: int) -> None:
        log.append(f"a{p}")
        if p < 3:
            d.enqueue(p + 1)
            log.append(f"a{p} queued {p + 1}")
        if p == 1:
            d.enqueue(10)

    d.register(a)
    d.register(lambda p: log.append(f"b{p}"))
    d.dispatch(1)
    assert log == ["a1", "a1 queued 2", "b1", "a2", "a2 queued 3", "b2", "a10", "b10", "a3", "b3"]


def test_wait_for_works_in_each_queued_dispatch(d: flux.Dispatcher[Any]) -> None:
    log: list[str] = []
    tokens: dict[str, flux.Token] = {}

    def a(p: int) -> None:
        d.wait_for([tokens["b"]])
        log.append(f"a{p}")

    def b(p: int) -> None:
        log.append(f"b{p}")
        if p < 3:
            d.enqueue(p + 1)

    d.register(a)
    tokens["b"] = d.register(b)
    d.dispatch(1)
    assert log == ["b1", "a1", "b2", "a2", "b3", "a3"]


def test_dispatch_from_a_queued_dispatch_is_still_refused(d: flux.Dispatcher[Any]) -> None:
    errors: list[BaseException] = []

    def cb(p: int) -> None:
        if p == 1:
            d.enqueue(2)
        elif p == 2:
            try:
                d.dispatch(3)
            except flux.AlreadyDispatchingError as exc:
                errors.append(exc)

    d.register(cb)
    d.dispatch(1)
    assert len(errors) == 1


def test_an_on_error_that_raises_fails_the_outermost_call_naming_what_it_was_given(d: flux.Dispatcher[Any]) -> None:
    # The handler's own exception is not lost: the outermost call raises
    # it in place of the failure, which a note names.
    log: list[str] = []
    handed: list[BaseException] = []

    def on_error(exc: BaseException) -> None:
        handed.append(exc)
        raise KeyError("from on_error")

    def cb(p: int) -> None:
        log.append(f"cb{p}")
        if p == 1:
            d.enqueue(2, on_error=on_error)
            d.enqueue(3)
        if p == 2:
            raise Boom(2)

    d.register(cb)
    with pytest.raises(KeyError, match="from on_error") as info:
        d.dispatch(1)
    assert log == ["cb1", "cb2", "cb3"]  # the queue went on
    assert len(handed) == 1 and isinstance(handed[0], Boom)
    assert info.value.__notes__ == [f"raised by on_error, given: Boom: {handed[0]}"]
    d.dispatch(4)  # nothing left over for a later call


def test_an_on_error_that_raises_is_raised_also_when_what_it_was_given_has_no_str(d: flux.Dispatcher[Any]) -> None:
    # The note is cosmetic: a failure whose str() raised replaced the
    # handler's exception (and the failure) with that str()'s.
    class Unprintable(Exception):
        def __str__(self) -> str:
            raise RuntimeError("no str")

    def on_error(exc: BaseException) -> None:
        raise KeyError("from on_error")

    def cb(p: int) -> None:
        if p == 1:
            d.enqueue(2, on_error=on_error)
        if p == 2:
            raise Unprintable

    d.register(cb)
    with pytest.raises(KeyError, match="from on_error") as info:
        d.dispatch(1)
    assert info.value.__notes__ == ["raised by on_error, given: Unprintable (its str() raised)"]
    d.dispatch(3)  # nothing left over for a later call


def test_a_later_queued_failure_with_no_str_is_noted_on_the_first(d: flux.Dispatcher[Any]) -> None:
    # As above, for the notes the outermost call adds: the failure's str()
    # raising replaced the first failure, and left the rest for a later call.
    class Unprintable(Exception):
        def __str__(self) -> str:
            raise RuntimeError("no str")

    def cb(p: int) -> None:
        if p == 1:
            d.enqueue(2)
            d.enqueue(3)
        if p == 2:
            raise Boom(2)
        if p == 3:
            raise Unprintable

    d.register(cb)
    with pytest.raises(Boom) as info:
        d.dispatch(1)
    assert info.value.__notes__ == ["a later queued dispatch also failed: Unprintable (its str() raised)"]
    d.dispatch(4)  # nothing left over for a later call


def test_a_queued_failure_goes_to_on_error_and_the_queue_goes_on(d: flux.Dispatcher[Any]) -> None:
    log: list[str] = []
    failures: list[BaseException] = []
    boom = Boom(2)

    def cb(p: int) -> None:
        log.append(f"cb{p}")
        if p == 1:
            d.enqueue(2, on_error=failures.append)
            d.enqueue(3)
        if p == 2:
            raise boom

    d.register(cb)
    d.dispatch(1)  # nothing raised: on_error took it
    assert log == ["cb1", "cb2", "cb3"]
    assert failures == [boom]
    assert failures[0] is boom


def test_a_queued_failure_is_raised_by_the_outermost_call_after_the_queue_drained(
    d: flux.Dispatcher[Any],
) -> None:
    log: list[str] = []
    boom2, boom3 = Boom(2), Boom(3)

    def cb(p: int) -> None:
        log.append(f"cb{p}")
        if p == 1:
            d.enqueue(2)  # queued: returns at once, raises nothing here
            d.enqueue(3)
            d.enqueue(4)
            log.append("queued")
        if p == 2:
            raise boom2
        if p == 3:
            raise boom3

    d.register(cb)
    with pytest.raises(Boom) as info:
        d.dispatch(1)
    assert info.value is boom2
    assert log == ["cb1", "queued", "cb2", "cb3", "cb4"]
    assert any("Boom: 3" in note for note in getattr(info.value, "__notes__", []))
    d.dispatch(5)  # nothing left over


def test_a_queued_failure_outlives_a_dispatch_of_another_dispatcher_ending_before_it_is_raised(
    d: flux.Dispatcher[Any],
) -> None:
    # The end of a dispatch tests one flag (_native.left_over), not each
    # dispatcher's left-over failures. Another dispatcher's dispatch ends
    # between the queued failure and the outermost call's end (found
    # nothing of its own, it lowers the flag if nothing is left anywhere):
    # the flag must stay up for this thread's failure.
    from flux import _native

    other = flux.Dispatcher[Any]()
    other.register(lambda p: None)
    boom = Boom(2)

    def cb(p: int) -> None:
        if p == 1:
            d.enqueue(2)
            d.enqueue(3)
        if p == 2:
            raise boom
        if p == 3:
            other.dispatch("between")  # ends with boom recorded, not yet raised

    d.register(cb)
    assert not _native.left_over.up
    with pytest.raises(Boom) as info:
        d.dispatch(1)
    assert info.value is boom
    # Taken, so the flag is down again: the hot paths test nothing more.
    assert not _native.left_over.up and _native.left_over.queued == 0
    other.close()


def test_an_escaped_exception_puts_the_flag_up_until_it_is_raised(d: flux.Dispatcher[Any]) -> None:
    # What escaped a trampoline stops the dispatch at the next callback,
    # which tests the flag first: up as the entry is made, down once taken.
    from flux import _native

    log: list[str] = []

    class Alarm(Exception):
        pass

    alarm = Alarm()

    def first(p: object) -> None:
        log.append("first")
        if p == "p":
            _native.park_escaped(threading.get_ident(), alarm)  # as the unraisable hook does
            assert _native.left_over.up

    d.register(first)
    d.register(lambda p: log.append("second"))
    with pytest.raises(Alarm) as info:
        d.dispatch("p")
    assert info.value is alarm
    assert log == ["first"]  # the second callback failed at once
    assert not _native.escaped and not _native.left_over.up
    d.dispatch("q")
    assert log == ["first", "first", "second"]


class DispatchesWhenFreed:
    """Dispatches ``payload`` on ``d`` from its finalizer, as a destroy that
    lets go of the last reference runs it; records the outcome."""

    def __init__(self, d: flux.Dispatcher[Any], payload: object, outcome: list[str]) -> None:
        self.d, self.payload, self.outcome = d, payload, outcome

    def __del__(self) -> None:
        try:
            self.d.dispatch(self.payload)
            self.outcome.append("returned")
        except BaseException as exc:  # noqa: BLE001 -- recorded for the test
            self.outcome.append(f"{exc!r} notes={getattr(exc, '__notes__', [])}")


@pytest.mark.parametrize("outer", ["dispatch", "enqueue", "own failure"])
def test_a_dispatch_from_a_destroy_at_the_end_of_a_call_leaves_that_calls_failures(
    d: flux.Dispatcher[Any], outer: str
) -> None:
    # A callback unregistered during a call is released as the call ends,
    # after its queued dispatches ran; a dispatch from what that lets go of
    # is a call of its own, and used to take (as notes on its own failure)
    # the failures the enclosing call had still to raise -- which then
    # returned normally, or raised a bare CallbackFailedError.
    inner: list[str] = []
    victim: list[flux.Token] = []

    def cb(p: int) -> None:
        if p == 1:
            d.unregister(victim[0])  # released as this call ends
            if outer == "own failure":
                raise Boom(1)
            d.enqueue(2)  # queued, fails, no on_error
        if p in (2, 7):
            raise Boom(p)

    d.register(cb)

    def holder(hook: DispatchesWhenFreed) -> Callable[[Any], None]:
        return lambda p: hook.outcome.append("ran") if p == "never" else None

    victim.append(d.register(holder(DispatchesWhenFreed(d, 7, inner))))  # its only reference
    with pytest.raises(Boom) as info:
        if outer == "enqueue":
            d.enqueue(1)
        else:
            d.dispatch(1)
    assert info.value.args == ((1,) if outer == "own failure" else (2,))
    assert inner == ["Boom(7) notes=[]"]  # its own failure, and only that
    d.dispatch(5)  # nothing left over
    assert not d._pending and not d._queued_errors


def test_the_outer_failure_comes_first_and_queued_ones_are_notes(d: flux.Dispatcher[Any]) -> None:
    outer, queued = Boom("outer"), Boom("queued")

    def cb(p: str) -> None:
        if p == "outer":
            d.enqueue("queued")
            raise outer
        raise queued

    d.register(cb)
    with pytest.raises(Boom) as info:
        d.enqueue("outer")
    assert info.value is outer
    assert any("queued" in note for note in info.value.__notes__)


def test_failures_on_either_side_of_a_suspended_generator_are_one_queued_dispatchs(d: flux.Dispatcher[Any]) -> None:
    # In the queued dispatch a wait inside a generator fails, the generator
    # swallows it and yields, then its caller raises: both entries are that
    # dispatch's (the generator's frame, suspended, has no f_back by then).
    outer, after = Boom("outer"), Boom("after the generator")
    given: list[BaseException] = []
    tokens: dict[str, flux.Token] = {}

    def machine() -> Any:
        while True:
            yield
            try:
                d.wait_for([tokens["failing"]])
            except Boom:
                pass

    gen = machine()
    next(gen)

    def resume(p: str) -> None:
        if p == "outer":
            d.enqueue("queued", on_error=given.append)
            raise outer
        next(gen)
        raise after

    def failing(p: str) -> None:
        raise Boom(p)

    d.register(resume)
    tokens["failing"] = d.register(failing)
    with pytest.raises(Boom) as info:
        d.dispatch("outer")
    assert info.value is outer
    assert given == [after]
    assert not getattr(info.value, "__notes__", None)
    assert not d._pending
    gen.close()


class NoteLess(Exception):
    """An exception as Python 3.10 makes them, with no add_note."""

    @property
    def add_note(self) -> Any:
        raise AttributeError("add_note")


def test_queued_failures_are_noted_where_exceptions_have_no_add_note(d: flux.Dispatcher[Any]) -> None:
    # The package supports Python 3.10 (pyproject's requires-python), whose
    # exceptions lack add_note: calling it turned the first failure into
    # an AttributeError. Its notes go on __notes__ there, as 3.11 keeps them.
    first, second = NoteLess("first"), NoteLess("second")

    def cb(p: str) -> None:
        if p == "go":
            d.enqueue(first)
            d.enqueue(second)
        else:
            raise p  # type: ignore[misc]

    d.register(cb)
    with pytest.raises(NoteLess) as info:
        d.dispatch("go")
    assert info.value is first
    assert info.value.__notes__ == ["a later queued dispatch also failed: NoteLess: second"]


def test_enqueue_on_a_closed_dispatcher(d: flux.Dispatcher[Any]) -> None:
    d.close()
    with pytest.raises(flux.InvalidArgumentError):
        d.enqueue(1)


def test_enqueue_from_other_threads_never_blocks_nothing_lost_nothing_twice(
    d: flux.Dispatcher[Any],
) -> None:
    seen: dict[int, int] = {}
    entered = threading.Event()
    release = threading.Event()
    lock = threading.Lock()

    def cb(p: int) -> None:
        if p == 0:
            entered.set()
            assert release.wait(30)
        with lock:
            seen[p] = seen.get(p, 0) + 1

    d.register(cb)
    holder = threading.Thread(target=d.dispatch, args=(0,))
    holder.start()
    assert entered.wait(30)

    def enqueue_many(base: int) -> None:
        for i in range(1, 51):
            d.enqueue(base + i)

    workers = [threading.Thread(target=enqueue_many, args=(1000 * t,)) for t in range(3)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(30)
        assert not w.is_alive(), "an enqueue blocked while a dispatch ran"
    release.set()
    holder.join(30)
    assert len(seen) == 151
    assert set(seen.values()) == {1}


def test_enqueue_racing_the_end_of_dispatches(d: flux.Dispatcher[Any]) -> None:
    seen: dict[int, int] = {}

    def cb(p: int) -> None:
        if p >= 0:
            seen[p] = seen.get(p, 0) + 1

    d.register(cb)
    running = [3]
    lock = threading.Lock()

    def enqueue_many(base: int) -> None:
        for i in range(300):
            d.enqueue(base + i)
        with lock:
            running[0] -= 1

    workers = [threading.Thread(target=enqueue_many, args=(1000 * t,)) for t in range(3)]
    for w in workers:
        w.start()
    while running[0]:
        d.dispatch(-1)
    for w in workers:
        w.join()
    assert len(seen) == 900
    assert set(seen.values()) == {1}


def test_same_payload_on_two_dispatchers_reaches_the_on_error_of_its_own_call() -> None:
    # Issue 15 item 6: records were keyed by the payload's address across
    # all dispatchers, so d2's done took d1's record (and its on_error).
    payload = object()
    errors1: list[BaseException] = []
    errors2: list[BaseException] = []
    with flux.Dispatcher[Any]() as d1, flux.Dispatcher[Any]() as d2:

        def one(p: object) -> None:
            if p is payload:
                raise Boom("from d1")
            # d1 is dispatching: queued, its done runs after this dispatch.
            d1.enqueue(payload, on_error=errors1.append)
            # d2 is idle: dispatched (and failed) at once, done at once.
            d2.enqueue(payload, on_error=errors2.append)

        def two(p: object) -> None:
            raise Boom("from d2")

        d1.register(one)
        d2.register(two)
        d1.dispatch("start")
    assert [str(e) for e in errors1] == ["from d1"]
    assert [str(e) for e in errors2] == ["from d2"]


def test_a_failure_enqueued_from_another_thread_is_reported_on_the_thread_that_ran_it() -> None:
    # enqueue: a failed dispatch goes to on_error "on the thread that ran it,
    # and to nothing else"; with no on_error, the outermost call of that
    # thread raises it. The thread that queued it returned at once, and
    # raises nothing. A process of its own: a wait there would hang the run.
    result = run_in_own_process(
        """
        import threading
        import flux

        class Boom(Exception):
            pass

        d = flux.Dispatcher()
        handed = []
        outcomes = {}

        def enqueue_from_a_thread(payload, on_error):
            def run():
                try:
                    d.enqueue(payload, on_error=on_error)
                    outcomes[payload] = "returned"
                except BaseException as exc:
                    outcomes[payload] = exc
            thread = threading.Thread(target=run)
            thread.start()
            thread.join()

        def callback(p):
            if p == "first":
                enqueue_from_a_thread("handed", lambda exc: handed.append((exc, threading.get_ident())))
                enqueue_from_a_thread("raised", None)
            elif p != "ok":
                raise Boom(p)

        d.register(callback)
        try:
            d.dispatch("first")
            raise AssertionError("the queued failure was not raised")
        except Boom as exc:
            raised = exc
        assert str(raised) == "raised", raised
        assert [(str(exc), ident) for exc, ident in handed] == [("handed", threading.get_ident())], handed
        assert outcomes == {"handed": "returned", "raised": "returned"}, outcomes
        d.dispatch("ok")  # nothing left over for a later call
        print("ok")
        """
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == "ok\n"


def test_an_enqueue_record_lives_exactly_until_its_done() -> None:
    # Each call's record travels as its done's context, kept alive only
    # while the call is in flight: none is left once every done ran, and
    # none keeps the payload alive.
    import gc
    import weakref

    from flux import dispatcher as module

    class Payload:
        pass

    held = [Payload()]
    ref = weakref.ref(held[0])
    in_flight: list[int] = []
    with flux.Dispatcher[Any]() as d:

        def cb(p: object) -> None:
            if p == "start":
                d.enqueue(held[0], on_error=lambda exc: None)
                d.enqueue(held[0])
                in_flight.append(module.live_enqueued())
            elif p is held[0]:
                raise Boom("queued")

        d.register(cb)
        with pytest.raises(Boom):
            d.dispatch("start")
    assert in_flight == [2], "each queued call has its record in flight"
    assert not module.live_enqueued(), "every record was let go when its done ran"
    held.clear()
    gc.collect()
    assert ref() is None, "a record kept the payload alive"


@pytest.mark.parametrize("queued_fails", ["no", "raises", "raises, with on_error"])
def test_a_listener_that_enqueues_then_raises_has_dispatch_raise_its_own_exception(queued_fails: str) -> None:
    # Issue 15 item 7: the queued dispatch's done took the listener's
    # exception (parked with no payload) for its own, and dispatch raised a
    # generic CallbackFailedError instead of the listener's KeyError.
    mine = KeyError("the listener's")
    queued = ValueError("the queued dispatch's")
    handed: list[BaseException] = []
    with flux.Dispatcher[Any]() as d:

        class Counter(flux.ReduceStore[int]):
            def get_initial_state(self) -> int:
                return 0

            def reduce(self, state: int, action: Any) -> int:
                if action == "queued" and queued_fails != "no":
                    raise queued
                return state + 1

        store = Counter(d)

        def listener() -> None:
            if store.state == 1:
                if queued_fails == "raises, with on_error":
                    d.enqueue("queued", on_error=handed.append)
                else:
                    d.enqueue("queued")
                raise mine

        store.add_listener(listener)
        with pytest.raises(KeyError) as info:
            d.dispatch("go")
        assert info.value is mine
        notes = getattr(info.value, "__notes__", [])
        if queued_fails == "raises":
            assert any("ValueError: the queued dispatch's" in note for note in notes), notes
        else:
            assert not notes
        assert handed == ([queued] if queued_fails == "raises, with on_error" else [])
        d.dispatch("after")  # nothing left over
        store.close()


@pytest.mark.parametrize("failure", ["ArgumentError", "RecursionError"])
def test_no_record_is_left_when_enqueue_fails_before_reaching_libflux(
    d: flux.Dispatcher[Any], monkeypatch: pytest.MonkeyPatch, failure: str
) -> None:
    # Near the recursion limit the ctypes call fails before libflux is
    # called: calling it raises RecursionError, or converting its arguments
    # does, wrapped in ArgumentError. No done will ever let that call's
    # record go, so enqueue must.
    from flux import dispatcher as module

    def refuse(*args: object) -> int:
        if failure == "ArgumentError":
            raise ArgumentError("argument 2: RecursionError: maximum recursion depth exceeded")
        raise RecursionError("maximum recursion depth exceeded while calling a Python object")

    monkeypatch.setattr(module, "_flux_enqueue", refuse)
    with pytest.raises(RecursionError) as info:
        d.enqueue(1)
    assert not isinstance(info.value, ArgumentError), "ctypes' wrapper leaked out"
    assert not module.live_enqueued(), "the record was left behind"


def test_a_queue_that_cannot_grow_raises_no_memory_and_queues_nothing(
    d: flux.Dispatcher[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    # enqueue's ":raises NoMemoryError: the queue could not grow". libflux
    # then runs done at once with that status (faked here, as libflux would:
    # it runs out of memory only in the C tests): the call raises it, and
    # nothing else -- on_error is for failed dispatches, and none ran.
    from flux import dispatcher as module

    def refuse(handle: Any, address: int, done: Any, context: int) -> int:
        done(context, address, int(flux.Status.ERR_NO_MEMORY))
        return int(flux.Status.ERR_NO_MEMORY)

    seen: list[object] = []
    handed: list[BaseException] = []
    d.register(seen.append)

    def queue_during_the_dispatch(p: object) -> None:
        if p == "first":
            with monkeypatch.context() as patched:
                patched.setattr(module, "_flux_enqueue", refuse)
                with pytest.raises(flux.NoMemoryError):
                    d.enqueue("lost", on_error=handed.append)

    d.register(queue_during_the_dispatch)
    d.dispatch("first")
    assert seen == ["first"] and handed == []
    assert module.live_enqueued() == 0, "done let the call's record go"
    d.enqueue("next")
    assert seen == ["first", "next"]


@pytest.mark.parametrize("outer", ["dispatch", "enqueue"])
@pytest.mark.parametrize("shape", ["raises", "a wait unwinds it"])
@pytest.mark.parametrize("with_on_error", [False, True])
def test_a_queued_dispatch_of_the_same_payload_failing_with_the_same_object_is_a_failure_of_its_own(
    d: flux.Dispatcher[Any], outer: str, shape: str, with_on_error: bool
) -> None:
    # Two dispatches of one payload raising one exception object: the queued
    # one's done must take only its own entries (not the outer dispatch's,
    # which then raised a CallbackFailedError), and each failure is reported
    # once -- the outer one raised, the queued one to on_error, or noted on
    # the raised object (itself: it is the same object).
    shared = Boom("shared")
    payload = object()
    queued = [False]
    handed: list[BaseException] = []
    tokens: list[flux.Token] = []

    def fails(p: object) -> None:
        if p is not payload:
            return
        if not queued[0]:
            queued[0] = True
            d.enqueue(p, on_error=handed.append) if with_on_error else d.enqueue(p)
        raise shared

    def waits(p: object) -> None:
        if p is payload:
            d.wait_for(tokens)  # re-raises the shared object: a second entry of the same dispatch

    if shape == "raises":
        d.register(fails)
    else:
        d.register(waits)
        tokens.append(d.register(fails))
    with pytest.raises(Boom) as info:
        getattr(d, outer)(payload)
    assert info.value is shared
    notes = getattr(shared, "__notes__", [])
    if with_on_error:
        assert handed == [shared]
        assert notes == []
    else:
        assert handed == []
        assert notes == ["a later queued dispatch also failed: Boom: shared"]
    assert d._pending == {} and d._queued_errors == {}
    d.dispatch("after")  # nothing left over
    d.enqueue("after")


@pytest.mark.parametrize("with_on_error", [False, True])
def test_a_listener_failing_again_in_the_queued_dispatch_it_caused_is_a_failure_of_its_own(with_on_error: bool) -> None:
    # As above with a store's listener, whose entries carry no payload: it
    # enqueues a payload that changes the store again, and both times raises
    # one exception object.
    shared = KeyError("the listener's")
    handed: list[BaseException] = []
    with flux.Dispatcher[Any]() as d:

        class Counter(flux.ReduceStore[int]):
            def get_initial_state(self) -> int:
                return 0

            def reduce(self, state: int, action: Any) -> int:
                return state + 1 if action == "go" else state

        store = Counter(d)

        def listener() -> None:
            if store.state == 1:
                d.enqueue("go", on_error=handed.append) if with_on_error else d.enqueue("go")
            if store.state <= 2:
                raise shared

        store.add_listener(listener)
        with pytest.raises(KeyError) as info:
            d.dispatch("go")
        assert info.value is shared
        notes = getattr(shared, "__notes__", [])
        if with_on_error:
            assert handed == [shared] and notes == []
        else:
            assert handed == [] and notes == ['a later queued dispatch also failed: KeyError: "the listener\'s"']
        assert d._pending == {} and d._queued_errors == {}
        d.dispatch("after")  # nothing left over
        store.close()


@pytest.mark.parametrize("with_on_error", [False, True])
def test_a_wait_for_a_native_callback_failing_in_a_queued_dispatch_is_not_given_the_outer_failure(
    d: flux.Dispatcher[Any], with_on_error: bool
) -> None:
    # The outer dispatch failed in Python; the queued one fails in a native
    # callback (no Python exception) that a Python callback waits for. The
    # wait must raise the native failure, a CallbackFailedError -- not the
    # outer dispatch's exception, still parked while the queue drains.
    from ctypes import byref, c_uint64

    from flux import _native

    outer_exc = Boom("the outer dispatch's")
    native_token = c_uint64()
    seen: list[BaseException] = []
    handed: list[BaseException] = []

    def first(p: object) -> None:
        if p == "outer":
            d.enqueue("queued", on_error=handed.append) if with_on_error else d.enqueue("queued")
            raise outer_exc
        try:
            d.wait_for([flux.Token(d._serial, native_token.value)])
        except BaseException as exc:
            seen.append(exc)
            raise

    d.register(first)
    native = _native.CALLBACK(lambda context, payload: 7)
    _native.flux_register(d._handle, native, None, _native.DESTROY(), byref(native_token))
    with pytest.raises(Boom) as info:
        d.dispatch("outer")
    assert info.value is outer_exc
    assert len(seen) == 1 and isinstance(seen[0], flux.CallbackFailedError), seen
    if with_on_error:
        assert handed == seen
    else:
        assert getattr(outer_exc, "__notes__", []) == [
            f"a later queued dispatch also failed: CallbackFailedError: {seen[0]}"
        ]
    assert d._pending == {} and d._queued_errors == {}
    _native.flux_unregister(d._handle, native_token.value)


FAILS_IN = ["callback", "reduce", "listener", "native"]


@pytest.mark.parametrize("with_on_error", [False, True])
@pytest.mark.parametrize("queued_fails_in", FAILS_IN)
@pytest.mark.parametrize("outer_fails_in", FAILS_IN)
def test_a_dispatch_and_the_queued_dispatch_of_its_payload_each_report_their_own_failure(
    d: flux.Dispatcher[Any], outer_fails_in: str, queued_fails_in: str, with_on_error: bool
) -> None:
    # One payload dispatched, then dispatched again from the queue; each
    # dispatch fails in Python (a callback, a reduce, a listener) or in a
    # native callback, which parks no Python exception. A queued dispatch
    # failing natively after an outer one failing in Python took the outer
    # exception, parked with the same payload (a listener's with none), for
    # its own: on_error got it, and dispatch raised a CallbackFailedError.
    from ctypes import byref, c_uint64

    from flux import _native

    payload = object()
    runs: list[str] = []  # "outer", then "queued"
    handed: list[BaseException] = []
    raised = {"outer": Boom("the outer dispatch's"), "queued": Boom("the queued dispatch's")}

    def fails_here(where: str) -> bool:
        return (outer_fails_in if runs[-1] == "outer" else queued_fails_in) == where

    current: list[object] = [None]  # the payload of the dispatch running

    def cb(p: object) -> None:
        current[0] = p
        if p is not payload:
            return
        runs.append("queued" if runs else "outer")
        if runs == ["outer"]:
            d.enqueue(p, on_error=handed.append) if with_on_error else d.enqueue(p)
        if fails_here("callback"):
            raise raised[runs[-1]]

    class Counter(flux.ReduceStore[int]):
        def get_initial_state(self) -> int:
            return 0

        def reduce(self, state: int, action: Any) -> int:
            if action is payload and fails_here("reduce"):
                raise raised[runs[-1]]
            return state + 1

    def listener() -> None:
        if current[0] is payload and fails_here("listener"):
            raise raised[runs[-1]]

    d.register(cb)
    store = Counter(d)
    store.add_listener(listener)
    native = _native.CALLBACK(lambda context, p: 7 if fails_here("native") else 0)
    out = c_uint64()
    _native.flux_register(d._handle, native, None, _native.DESTROY(), byref(out))
    native_token = flux.Token(d._serial, out.value)

    def expected(run: str, got: BaseException) -> None:
        if (outer_fails_in if run == "outer" else queued_fails_in) == "native":
            assert isinstance(got, flux.CallbackFailedError) and got.token == native_token, (run, got)
        else:
            assert got is raised[run], (run, got)

    with pytest.raises(BaseException) as info:
        d.dispatch(payload)
    assert runs == ["outer", "queued"]
    expected("outer", info.value)
    notes = getattr(info.value, "__notes__", [])
    if with_on_error:
        assert len(handed) == 1 and notes == [], (handed, notes)
        expected("queued", handed[0])
    else:
        assert handed == [] and len(notes) == 1, notes
        # "later" than the Python exception the outer dispatch raised.
        prefix = "a queued" if outer_fails_in == "native" else "a later queued"
        if queued_fails_in == "native":
            assert notes[0].startswith(f"{prefix} dispatch also failed: CallbackFailedError:"), notes
            assert f"token {native_token.value} " in notes[0], notes
        else:
            assert notes == [f"{prefix} dispatch also failed: Boom: the queued dispatch's"]
    assert d._pending == {} and d._queued_errors == {}
    _native.flux_unregister(d._handle, out.value)
    d.dispatch("after")  # nothing left over
    store.close()


def test_register_and_unregister_in_a_forked_child_on_an_orphaned_dispatch_raise() -> None:
    # A registration would join, and a removal be released, when the orphaned
    # dispatch ends: never. Both are refused; the refused callback is let go
    # (its slot freed, nothing stray), the registered one stays.
    result = fork_during_a_dispatch(
        """
        import gc, weakref
        from flux import _native
        class Callback:
            def __call__(self, p): pass
        callback = Callback()
        gone = weakref.ref(callback)
        try:
            d.register(callback)
            code = 1
        except flux.AlreadyDispatchingError as exc:
            if "forked" not in str(exc):
                code = 2
        del callback
        gc.collect()
        if gone() is not None:
            code = 3
        try:
            d.unregister(token)
            code = 4
        except flux.AlreadyDispatchingError:
            pass
        if _native.stray != {"callback": 0, "destroy": 0}:
            code = 5
        """,
        setup="token = d.register(lambda p: None)",
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == "ok\n"


def test_enqueue_in_a_forked_child_on_an_orphaned_dispatch_raises() -> None:
    # The one case enqueue fails with AlreadyDispatchingError (README, "Queued
    # dispatch and traces"): in a child forked while another thread dispatched,
    # no dispatch will ever drain a queue. Refused, it raises; on_error is for
    # dispatches that ran, and nothing ran.
    result = fork_during_a_dispatch(
        """
        errors = []
        try:
            d.enqueue("queued", on_error=errors.append)
            code = 1
        except flux.AlreadyDispatchingError as exc:
            if "forked" not in str(exc):
                code = 2
        if errors or ran != ["held"]:
            code = 3
        """
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == "ok\n"
