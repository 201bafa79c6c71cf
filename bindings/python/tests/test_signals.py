"""Exceptions that escape a Python callback where no ``try`` can catch them:
a KeyboardInterrupt raised as the callback is entered, because SIGINT arrived
while the thread was in C (blocked in dispatch, or between two callbacks).
The dispatch fails, ``dispatch`` raises that very exception, nothing is
printed as unraisable, and the dispatcher is idle and usable after."""

from __future__ import annotations

import ctypes
import subprocess
import sys
import textwrap
import threading
from typing import Any

import pytest
from on_threads import run_interruptible

from flux import _native

ROUNDS = 20


# Newer CPython's ctypes reports an exception escaping a callback with no
# object (PyErr_FormatUnraisable: the callback is named in the message only);
# 3.11's names the callback as the object. Put after `import flux`, this
# reports every exception the newer way, so the tests parametrized with it
# hold the binding to both.
REPORTED_WITHOUT_OBJECT = """
import sys as _sys
_flux_hook = _sys.unraisablehook
def _with_no_object(report):
    _flux_hook(type(report)((report.exc_type, report.exc_value, report.exc_traceback, report.err_msg, None)))
_sys.unraisablehook = _with_no_object
"""
REPORTS = {"naming the callback": "", "with no object": REPORTED_WITHOUT_OBJECT}


def run_script(body: str) -> subprocess.CompletedProcess[str]:
    return run_interruptible(body)


def test_sigint_while_dispatch_blocks_raises_keyboard_interrupt_from_dispatch() -> None:
    result = run_script(
        f"""
        import os, signal, threading, time
        import flux
        d = flux.Dispatcher()
        ran = []
        hold, holding = threading.Event(), threading.Event()
        def first(p):
            ran.append(("first", p))
            if p == "holder":
                holding.set()
                hold.wait()
        d.register(first)
        d.register(lambda p: ran.append(("second", p)))
        for _ in range({ROUNDS}):
            ran.clear(); hold.clear(); holding.clear()
            holder = threading.Thread(target=d.dispatch, args=("holder",))
            holder.start()
            holding.wait()
            def interrupt_then_release():
                time.sleep(0.05)  # the main thread is blocked in flux_dispatch by now
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(0.02)
                hold.set()
            helper = threading.Thread(target=interrupt_then_release)
            helper.start()
            try:
                d.dispatch("main")
            except KeyboardInterrupt:
                outcome = "KeyboardInterrupt"
            else:
                outcome = "returned"
            holder.join(); helper.join()
            assert outcome == "KeyboardInterrupt", outcome
            assert [r for r in ran if r[1] == "main"] == [], ran
            assert not d.is_dispatching
            d.dispatch("after")
            assert [r for r in ran if r[1] == "after"] == [("first", "after"), ("second", "after")], ran
        print("ok")
        """
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == "ok\n"
    assert result.stderr == "", result.stderr  # nothing printed as unraisable


@pytest.mark.parametrize("reports", REPORTS)
def test_sigint_between_two_callbacks_raises_keyboard_interrupt_from_dispatch(reports: str) -> None:
    # A native callback -- libc's raise(), with SIGINT as its context -- gets
    # the signal delivered while the dispatch is in C; the next Python
    # callback is interrupted as it is entered, before its body runs.
    result = run_script(
        f"""
        import ctypes, signal
        import flux
        from flux import _native
        {textwrap.indent(REPORTS[reports], " " * 8).strip()}
        d = flux.Dispatcher()
        ran = []
        libc = ctypes.CDLL(None)
        raise_signal = _native.CALLBACK(ctypes.cast(getattr(libc, "raise"), ctypes.c_void_p).value)
        tokens = {{}}
        def waits(p):
            ran.append("waits")
            if p == "wait":
                d.wait_for([tokens["raise"], tokens["b"]])
            ran.append("waits, after its wait")
        d.register(lambda p: ran.append("a"))
        d.register(waits)
        out = ctypes.c_uint64()
        no_destroy = ctypes.cast(None, _native.DESTROY)
        _native.flux_register(d._handle, raise_signal, signal.SIGINT, no_destroy, ctypes.byref(out))
        tokens["raise"] = flux.Token(d._serial, out.value)
        tokens["b"] = d.register(lambda p: ran.append("b"))
        d.register(lambda p: ran.append("c"))
        for payload in ["plain", "wait"] * {ROUNDS // 2}:
            ran.clear()
            try:
                d.dispatch(payload)
            except KeyboardInterrupt:
                pass
            else:
                raise AssertionError("dispatch returned")
            if payload == "plain":
                assert ran == ["a", "waits", "waits, after its wait"], ran
            else:
                # The wait ran raise(), then b, which was interrupted as it
                # was entered: the wait raises it.
                assert ran == ["a", "waits"], ran
            assert not d.is_dispatching
        _native.flux_unregister(d._handle, out.value)
        ran.clear()
        d.dispatch("plain")
        assert ran == ["a", "waits", "waits, after its wait", "b", "c"], ran
        print("ok")
        """
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == "ok\n"
    assert result.stderr == "", result.stderr


# -- every other trampoline ---------------------------------------------------
#
# Each script below makes a signal arrive while the thread is in C right
# before the kind of Python code it tests is entered: libc's raise() (which
# sends the signal to the calling thread, as os.kill to oneself does) is
# handed to libflux as a native callback, listener or destroy, so the next
# Python code libflux calls is interrupted as it is entered. The handler
# raises a fresh KeyboardInterrupt each time and keeps it: the outermost call
# must raise that very object; nothing may be printed; nothing may leak.

PREAMBLE = """
import ctypes, gc, signal, weakref
import flux
from flux import _native, stores

sent = []
def on_sigint(signum, frame):
    exc = KeyboardInterrupt(f"interrupt {len(sent)}")
    sent.append(exc)
    raise exc
signal.signal(signal.SIGINT, on_sigint)

libc = ctypes.CDLL(None)
RAISE = ctypes.cast(getattr(libc, "raise"), ctypes.c_void_p).value
NO_DESTROY = ctypes.cast(None, _native.DESTROY)

def native_callback(d, destroy=False):
    # A registration whose callback (and destroy) is raise(SIGINT).
    keep.append(_native.DESTROY(RAISE) if destroy else NO_DESTROY)
    out = ctypes.c_uint64()
    _native.flux_register(d._handle, _native.CALLBACK(RAISE), signal.SIGINT, keep[-1], ctypes.byref(out))
    return out.value

def native_listener(store, fn=True, destroy=False):
    # A listener whose function and/or destroy is raise(SIGINT).
    keep.append(_native.LISTENER(RAISE if fn else NOOP_ADDRESS))
    keep.append(_native.DESTROY(RAISE) if destroy else NO_DESTROY)
    out = ctypes.c_uint64()
    _native.flux_store_add_listener(store._handle, keep[-2], signal.SIGINT, keep[-1], ctypes.byref(out))
    return out.value

keep = []
NOOP = _native.LISTENER(lambda context: None)
NOOP_ADDRESS = ctypes.cast(NOOP, ctypes.c_void_p).value

def interrupted(call, *args):
    # The exception call raised: must be the last one the handler raised.
    try:
        call(*args)
    except KeyboardInterrupt as exc:
        assert exc is sent[-1], (exc, sent[-1:])
        return True
    return False

class State:
    def __init__(self, n):
        self.n = n

class Counter(flux.ReduceStore):
    def get_initial_state(self):
        return State(0)
    def reduce(self, state, action):
        ran.append("reduce")
        return State(state.n + 1)

class Comparing(Counter):
    def are_equal(self, one, two):
        ran.append("are_equal")
        return one.n == two.n

ran = []

def clean():
    gc.collect()
    assert not _native.escaped, _native.escaped
    assert stores.live_objects() == 0, _native.objects
    assert _native.stray == {"callback": 0, "destroy": 0}, _native.stray
"""


def run_with_preamble(body: str, prefix: str = "") -> None:
    result = run_script(PREAMBLE + prefix + textwrap.dedent(body) + "\nprint('ok')\n")
    assert result.returncode == 0, result.stderr
    assert result.stdout == "ok\n"
    assert result.stderr == "", result.stderr  # nothing printed as unraisable


@pytest.mark.parametrize("store_type", ["Counter", "Comparing"])
def test_sigint_before_a_reduce_or_are_equal_raises_keyboard_interrupt_from_dispatch(store_type: str) -> None:
    run_with_preamble(
        f"""
        for _ in range({ROUNDS}):
            d = flux.Dispatcher()
            native = native_callback(d)
            store = {store_type}(d)
            before = store.state
            heard = []
            store.add_listener(lambda: heard.append(1))
            ran.clear()
            assert interrupted(d.dispatch, "inc")
            assert ran == [] and heard == [] and store.state is before
            assert not d.is_dispatching
            _native.flux_unregister(d._handle, native)
            d.dispatch("inc")
            assert store.state.n == 1 and heard == [1]
            d.close()
            clean()
        """
    )


@pytest.mark.parametrize("reports", REPORTS)
def test_sigint_before_a_listener_raises_keyboard_interrupt_from_dispatch(reports: str) -> None:
    run_with_preamble(
        f"""
        for _ in range({ROUNDS}):
            d = flux.Dispatcher()
            store = Counter(d)
            native_listener(store)
            heard = []
            store.add_listener(lambda: heard.append(1))
            after = []
            d.register(lambda p: after.append(p))
            with flux.Trace(d) as trace:
                assert interrupted(d.dispatch, "inc")
            # The listener was failed: the dispatch stopped, with a status.
            assert heard == [] and after == []
            assert trace.events[-1].kind == "dispatch_end"
            assert trace.events[-1].status == flux.Status.ERR_CALLBACK_FAILED
            d.close()
            clean()
        """,
        REPORTS[reports],
    )


def test_sigint_before_a_group_function_raises_keyboard_interrupt_from_dispatch() -> None:
    run_with_preamble(
        f"""
        for _ in range({ROUNDS}):
            d = flux.Dispatcher()
            store = Counter(d)
            native_listener(store)
            grouped = []
            group = flux.StoreGroup([store], lambda: grouped.append(1))
            with flux.Trace(d) as trace:
                assert interrupted(d.dispatch, "inc")
            assert grouped == []
            assert trace.events[-1].status == flux.Status.ERR_CALLBACK_FAILED
            group.release()
            d.close()
            clean()
        """
    )


def test_sigint_before_a_listener_or_store_destroy_raises_from_close_and_frees_all() -> None:
    run_with_preamble(
        f"""
        for python_listener in [False, True] * ({ROUNDS} // 2):
            d = flux.Dispatcher()
            store = Counter(d)
            d.dispatch("inc")
            # Destroys run in the order added, the store's last (its states
            # are held in Python: no release): the first Python code after
            # raise() is the listener's destroy, or the store's.
            native_listener(store, fn=False, destroy=True)
            class Listener:
                def __call__(self):
                    pass
            listener = Listener()
            if python_listener:
                store.add_listener(listener)
            refs = [weakref.ref(store.state), weakref.ref(listener)]
            del listener
            assert interrupted(store.close)
            assert store.closed
            assert [r() for r in refs] == [None, None]  # by reference counting
            d.close()
            clean()
        """
    )


def test_sigint_before_a_callback_destroy_raises_from_dispatch_and_frees_it() -> None:
    run_with_preamble(
        f"""
        for _ in range({ROUNDS}):
            d = flux.Dispatcher()
            tokens = {{}}
            def remover(p):
                # Both destroys run as this dispatch ends: raise() first.
                _native.flux_unregister(d._handle, tokens["native"])
                d.unregister(tokens["victim"])
            class Victim:
                def __call__(self, p):
                    pass
            victim = Victim()
            ref = weakref.ref(victim)
            d.register(remover)
            tokens["native"] = native_callback(d, destroy=True)
            tokens["victim"] = d.register(victim)
            del victim
            assert interrupted(d.dispatch, None)
            assert ref() is None
            assert flux.dispatcher.live_callbacks(d) == 1
            d.close()
            clean()
        """
    )


@pytest.mark.parametrize("owner", ["Trampoline", "Dispatcher"])
def test_an_interrupt_kept_for_the_outermost_call_is_not_taken_by_a_finalizer_run_before_it(owner: str) -> None:
    # A finalizer runs wherever the last reference goes: here, in the
    # destroy of a callback unregistered during the dispatch, after an
    # interrupt escaped the next callback and was kept for dispatch() to
    # raise. A Trampoline's or a Dispatcher's finalizer must leave it
    # there: raised inside the finalizer, it was printed as unraisable and
    # dispatch() raised a CallbackFailedError instead.
    run_with_preamble(
        f"""
        for _ in range({ROUNDS}):
            d = flux.Dispatcher()
            held = flux.{owner}() if {owner!r} == "Dispatcher" else flux.Trampoline("v()", lambda: None)
            owned = weakref.ref(held)
            def holder(p, held=held):
                pass
            del held
            token = d.register(holder)
            del holder
            d.register(lambda p: d.unregister(token))  # holder's destroy runs as the dispatch ends
            raising = native_callback(d)
            d.register(lambda p: None)  # interrupted as it is entered
            assert interrupted(d.dispatch, None)
            assert owned() is None
            assert not _native.escaped
            _native.flux_unregister(d._handle, raising)
            d.close()
            sent.clear()
            del d
            clean()
        """
    )


def test_sigint_before_an_enqueue_done_raises_from_enqueue_and_keeps_no_record() -> None:
    run_with_preamble(
        f"""
        from flux import dispatcher as dispatcher_module
        for _ in range({ROUNDS}):
            d = flux.Dispatcher()
            # The dispatch's last callback is raise(): done is entered next.
            native_callback(d)
            handled = []
            assert interrupted(d.enqueue, "payload", handled.append)
            # The dispatch itself succeeded: on_error has nothing; the
            # interrupt came out of enqueue, and done's bookkeeping was done.
            assert handled == []
            assert not dispatcher_module.live_enqueued()
            d.close()
            clean()
        """
    )


def test_sigint_before_a_trace_hook_raises_from_dispatch_and_the_event_is_kept() -> None:
    run_with_preamble(
        f"""
        for _ in range({ROUNDS}):
            d = flux.Dispatcher()
            native = native_callback(d)
            after = []
            d.register(lambda p: after.append(p))
            with flux.Trace(d) as trace:
                assert interrupted(d.dispatch, "x")
            kinds = [e.kind for e in trace.events]
            # The hook after raise() ran once made up for: every event is there.
            assert kinds == ["dispatch_begin", "callback_begin", "callback_end", "callback_begin",
                             "callback_end", "dispatch_end"], kinds
            assert after == []
            d.close()
            clean()
        """
    )


def test_sigint_in_a_replaced_traces_destroy_leaves_the_new_trace_observing_and_stoppable() -> None:
    # The replaced trace's destroy runs inside flux_dispatcher_set_observer,
    # after libflux made the new trace the observer: SIGINT as it is
    # entered comes out of start(), and the new trace must be recorded as
    # the observer all the same, so that stop() stops it.
    run_with_preamble(
        f"""
        import sys
        def sigint_as_a_destroy_is_entered(frame, event, arg):
            if event == "call" and frame.f_code is _native._on_destroy.__code__:
                sys.settrace(None)
                signal.raise_signal(signal.SIGINT)
        for _ in range({ROUNDS}):
            d = flux.Dispatcher()
            d.register(lambda p: None)
            old, new = flux.Trace(d).start(), flux.Trace(d)
            sys.settrace(sigint_as_a_destroy_is_entered)
            try:
                assert interrupted(new.start)
            finally:
                sys.settrace(None)
            d.dispatch("recorded")
            new.stop()
            old.stop()
            d.dispatch("not recorded")
            assert [e.payload for e in new.events if e.kind == "dispatch_begin"] == ["recorded"], new.events
            assert old.events == []
            assert _native.live(lambda obj, extra: isinstance(obj, flux.Trace)) == 0
            d.close()
            clean()
        """
    )


# -- an owner-bound listener's removal ------------------------------------------
#
# add_listener(fn, owner=view) removes the listener from the owner's weakref
# callback, which Python runs wherever the owner's last reference went: an
# exception escaping it would be printed and lost, and the listener left
# registered, or counted after libflux let it go. The interrupt must come out
# of the next call into flux on the thread; the listener must be gone (as if
# sub.remove() ran) and the store's count of listeners right.

OWNERS = """
class View:
    def __init__(self, heard):
        self.heard = heard
    def refresh(self):
        self.heard.append("refresh")
    def __call__(self):
        self.heard.append("call")

def bind(store, kind):
    # A view and its listener: a bound method, the view itself, or a function.
    heard = []
    view = View(heard)
    listener = {"method": view.refresh, "itself": view, "function": lambda: heard.append("function")}[kind]
    return view, store.add_listener(listener, owner=view), heard

def removed_as_if_by_remove(store, sub):
    # Only the store's own listener is left, uncounted, and nothing of the view's.
    try:
        sub.remove()
    except flux.UnknownTokenError:
        pass
    else:
        raise AssertionError("the listener was still registered")
    assert store._listeners == 0, store._listeners
    assert all(type(fn) is stores._Settler for fn in store._fns.values()), store._fns
    assert stores.live_objects() == 1, _native.objects  # the store
    # Nor is the store's lock left held (the removal takes it only if free).
    import threading
    free = []
    other = threading.Thread(target=lambda: free.append(store._lock.acquire(blocking=False) and store._lock.release() is None))
    other.start()
    other.join()
    assert free == [True], "the store's lock was left held"
"""


@pytest.mark.parametrize("reports", REPORTS)
@pytest.mark.parametrize("kind", ["method", "itself", "function"])
def test_sigint_as_an_owners_weakref_callback_is_entered_comes_out_of_the_next_call(kind: str, reports: str) -> None:
    # An owner's weakref callbacks run newest first: one made after the
    # listener's -- libc's raise() itself, handed the weak reference as a
    # SIGINT -- sends the signal from C, and the listener's removal is
    # interrupted as it is entered, before anything ran.
    run_with_preamble(
        REPORTS[reports]
        + OWNERS
        + textwrap.dedent(
            f"""
        class AsSigint:
            @staticmethod
            def from_param(obj):
                return signal.SIGINT
        raise_sigint = libc["raise"]
        raise_sigint.argtypes = (AsSigint,)
        for _ in range({ROUNDS}):
            d = flux.Dispatcher()
            store = Counter(d)
            view, sub, heard = bind(store, {kind!r})
            d.dispatch("inc")
            assert len(heard) == 1, heard
            made_last = weakref.ref(view, raise_sigint)  # so called first
            del view
            # Removed at once all the same (made up for, as a trampoline is).
            assert stores.live_objects() == 1 and store._listeners == 0
            assert interrupted(lambda: store.state)  # kept, and raised once
            assert not _native.escaped
            removed_as_if_by_remove(store, sub)
            d.dispatch("inc")
            assert len(heard) == 1 and store.state.n == 2
            d.close()
            clean()
        """
        )
    )


# Every place an interrupt can land, one per round, in order: as a function
# is entered, and right after a call returns (a signal handler runs nowhere
# else). A trace function raises SIGINT there, once, in whatever the traced
# call runs.
INTERRUPT_AT = """
import dis, functools, sys, threading

after_call = {}
def landing_points(code):
    points = after_call.get(code)
    if points is None:
        points, previous = set(), None
        for instruction in dis.get_instructions(code):
            if previous is not None and previous.opname.startswith("CALL") and (
                not previous.opname.startswith("CALL_INTRINSIC")
            ):
                points.add(instruction.offset)
            previous = instruction
        after_call[code] = points
    return points

class InterruptAt:
    def __init__(self, place):
        self.place, self.seen = place, 0
    def __call__(self, frame, event, arg):
        if event == "call":
            frame.f_trace_opcodes = True
            self.count()
        elif event == "opcode" and frame.f_lasti in landing_points(frame.f_code):
            self.count()
        return self
    def count(self):
        self.seen += 1
        if self.seen == self.place:
            stop()
            signal.raise_signal(signal.SIGINT)  # its handler raises here

# Runs action(*args) with SIGINT raised at its landing point number `place`.
# Returns whether there was one (False once action ran to its end: every
# place was tried) and what action raised, or None.
def interrupt_at(place, action, *args):
    tracer = InterruptAt(place)
    raised = None
    start(tracer)
    try:
        action(*args)
    except BaseException as exc:
        raised = exc
    finally:
        stop()
    return tracer.seen >= place, raised

if sys.version_info < (3, 12):
    # C callables: no frame of theirs to trace.
    start, stop = sys.settrace, functools.partial(sys.settrace, None)
else:
    # From 3.12 sys.settrace runs on sys.monitoring, and f_trace_opcodes set
    # in the trace function gives a frame no opcode events until the next
    # settrace (3.12), nor after a round whose trace was unset inside the
    # trace function, as count() does (3.13.0): most landing points went
    # uncounted. The same events from sys.monitoring itself: PY_START and
    # PY_RESUME are settrace's "call", INSTRUCTION its "opcode".
    MONITOR, EVENTS = sys.monitoring.DEBUGGER_ID, sys.monitoring.events

    def start(tracer):
        thread = threading.get_ident()  # settrace's was this thread's only
        def entered(code, offset):
            if code in HARNESS:
                return sys.monitoring.DISABLE
            if threading.get_ident() == thread:
                tracer.count()
        def instruction(code, offset):
            if code in HARNESS or offset not in landing_points(code):
                return sys.monitoring.DISABLE  # never one: not seen again
            if threading.get_ident() == thread:
                tracer.count()
        sys.monitoring.use_tool_id(MONITOR, "interrupt_at")
        for event, callback in [("PY_START", entered), ("PY_RESUME", entered), ("INSTRUCTION", instruction)]:
            sys.monitoring.register_callback(MONITOR, getattr(EVENTS, event), callback)
        sys.monitoring.set_events(MONITOR, EVENTS.PY_START | EVENTS.PY_RESUME | EVENTS.INSTRUCTION)

    def stop():
        if sys.monitoring.get_tool(MONITOR) is not None:
            sys.monitoring.set_events(MONITOR, 0)
            sys.monitoring.free_tool_id(MONITOR)

    # Unlike settrace's, the events come from frames already running too:
    # the harness's own are not the action's.
    HARNESS = {interrupt_at.__code__, start.__code__, stop.__code__}
"""


def test_sigint_anywhere_in_an_owners_removal_leaves_it_removed_and_counted() -> None:
    run_with_preamble(
        OWNERS
        + INTERRUPT_AT
        + textwrap.dedent(
            """
        for kind in ["method", "itself", "function"]:
            place = 0
            while True:
                place += 1
                d = flux.Dispatcher()
                store = Counter(d)
                view, sub, heard = bind(store, kind)
                owner = [view]
                del view
                reached, raised = interrupt_at(place, owner.clear)  # the owner's last reference goes
                assert raised is None, (kind, place, raised)
                if not reached:
                    break  # the removal ran to its end: every place was tried
                assert interrupted(lambda: store.state), (kind, place)  # kept for this call
                removed_as_if_by_remove(store, sub)
                d.dispatch("inc")
                assert heard == [] and store.state.n == 1
                d.close()
                clean()
            d.close()
            clean()
            assert place > 20, place  # the removal was traced
        """
        )
    )


def test_sigint_anywhere_in_a_stores_close_leaves_nothing_for_the_finalizer_to_destroy_again() -> None:
    # A store's close() that destroyed the native store must forget its
    # handle before anything an interrupt can cut short: the dispatcher's
    # finalizer destroys the handles still recorded, and a freed store
    # destroyed again crashed the process (as a `_unshown.pop` before the
    # forgetting let SIGALRM do, now and then, in the test after this one).
    run_with_preamble(
        INTERRUPT_AT
        + textwrap.dedent(
            """
        place = 0
        while True:
            place += 1
            d = flux.Dispatcher()
            store = Counter(d)
            store.add_listener(lambda: None)
            d.dispatch("inc")
            handle = store._handle
            reached, raised = interrupt_at(place, store.close)
            assert raised is None or raised is sent[-1], (place, raised)
            if not reached:
                break  # close() ran to its end: every place was tried
            store.close()  # finishes, or finds it closed
            assert store.closed and handle not in d._natives, place
            d.close()
            del d, store
            clean()  # the finalizer: a handle left recorded is destroyed again
            assert all(c is None for c in _native.objects), (place, _native.objects)
        assert place > 10, place  # close() was traced
        """
        )
    )


def test_sigint_anywhere_in_a_groups_release_leaves_it_released_and_forgotten() -> None:
    # A release() that libflux carried out must be recorded whole whatever
    # cuts it short: an interrupt after it forgot the native handle left the
    # group among the dispatcher's children, holding fn. Made again over a
    # store made since, the group kept its old place, before that store, so
    # the dispatcher's close() closed the store first -- refused, a member of
    # a live group -- and raised, leaving the dispatcher open.
    run_with_preamble(
        INTERRUPT_AT
        + textwrap.dedent(
            """
        place = 0
        while True:
            place += 1
            d = flux.Dispatcher()
            calls = []
            group = flux.StoreGroup([Counter(d)], lambda: calls.append(1))
            reached, raised = interrupt_at(place, group.release)
            assert raised is None or raised is sent[-1], (place, raised)
            group.release()  # finishes, or finds it released
            assert group._ident not in d._children and group._fn is None, place
            d.dispatch("inc")
            assert calls == [], place
            flux.StoreGroup.__init__(group, [Counter(d)], lambda: None)
            d.close()  # the group first, then its stores
            del d, group
            clean()
            if not reached:
                break  # release() ran to its end: every place was tried
        assert place > 5, place  # release() was traced
        """
        )
    )


def test_sigint_anywhere_in_a_stores_close_leaves_no_state_held_by_the_closed_store() -> None:
    # close() cut short after it forgot the native handle reads as closed,
    # and a second close() returns at once: the states must already be
    # let go of by then, not kept by the closed store object until it goes.
    run_with_preamble(
        INTERRUPT_AT
        + textwrap.dedent(
            """
        place = 0
        while True:
            place += 1
            d = flux.Dispatcher()
            store = Counter(d)
            d.dispatch("inc")
            state = weakref.ref(store.state)
            reached, raised = interrupt_at(place, store.close)
            assert raised is None or raised is sent[-1], (place, raised)
            if not reached:
                break  # close() ran to its end: every place was tried
            store.close()  # finishes, or finds it closed
            raised = None
            sent.clear()  # their tracebacks hold close()'s frame, and what it kept
            gc.collect()
            assert store.closed and state() is None, place
            d.close()
            del d, store
            clean()
        assert place > 10, place  # close() was traced
        """
        )
    )


def test_sigint_anywhere_in_close_leaves_a_close_the_next_one_finishes() -> None:
    # close() cut short once it cleared its handle reads as closed: the next
    # close() must finish it -- every store and group closed, every
    # registration ended, the observer cleared -- not return at once.
    run_with_preamble(
        INTERRUPT_AT
        + textwrap.dedent(
            """
        from flux.dispatcher import live_callbacks

        place = 0
        while True:
            place += 1
            d = flux.Dispatcher()
            registered, other = d.register_store(Counter), Counter(d)
            registered.add_listener(lambda: None)
            group = flux.StoreGroup([registered, other], lambda: None)
            token = d.register(lambda p: None, name="callback")
            trace = flux.Trace(d).start()
            reached, raised = interrupt_at(place, d.close)
            assert raised is None or raised is sent[-1], (place, raised)
            if not reached:
                break  # close() ran to its end: every place was tried
            d.close()  # finishes what the interrupt cut short
            assert d.closed and registered.closed and other.closed and group._handle is None, place
            assert d.stores == () and d.name_of(token) is None and live_callbacks(d) == 0, place
            assert _native.live(lambda obj, extra: obj is trace) == 0, place  # the observer was cleared
            del registered, other, group, trace
            clean()
            assert all(c is None for c in _native.objects), (place, _native.objects)
        assert place > 50, place  # close() was traced
        """
        )
    )


def test_sigalrm_at_any_moment_comes_out_as_that_exception_and_leaks_nothing() -> None:
    # One SIGALRM per round, 50-450 µs in: it lands anywhere -- in Python
    # code, or in C right before any trampoline (a reduce, are_equal, a
    # listener, a group function, a destroy, a trace hook).
    run_with_preamble(
        """
        import random, time

        class Alarm(BaseException):
            pass

        armed = [False]
        alarms = []
        def on_alarm(signum, frame):
            if armed[0]:
                armed[0] = False
                exc = Alarm()
                alarms.append(exc)
                raise exc
        signal.signal(signal.SIGALRM, on_alarm)

        states = []  # weak references with no callback: nothing runs as a state goes
        class Tracked(Counter):
            def reduce(self, state, action):
                new = State(state.n + 1)
                states.append(weakref.ref(new))
                return new
        class TrackedComparing(Tracked):
            def are_equal(self, one, two):
                return one.n == two.n

        rng = random.Random(7)
        interrupted_rounds = 0
        deadline = time.monotonic() + 4
        while time.monotonic() < deadline:
            d = flux.Dispatcher()
            a, b = Tracked(d), TrackedComparing(d)
            a.add_listener(lambda: None)
            b.add_listener(lambda: a.state)
            group = flux.StoreGroup([a, b], lambda: None)
            d.register(lambda p: None)
            trace = flux.Trace(d).start()
            # Named up front: on a slow machine every round may be
            # interrupted before it gets as far as these.
            sub = extra = g = None
            for _ in range(100):
                try:
                    armed[0] = True
                    signal.setitimer(signal.ITIMER_REAL, rng.uniform(50e-6, 450e-6))
                    d.dispatch("inc")
                    sub = a.add_listener(lambda: None)
                    sub.remove()
                    d.unregister(d.register(lambda p: None))
                    d.dispatch("inc")
                    extra = Tracked(d)
                    extra.add_listener(lambda: None)
                    g = flux.StoreGroup([extra], lambda: None)
                    d.dispatch("inc")
                    g.release()
                    extra.close()
                    armed[0] = False
                except Alarm as exc:
                    assert exc is alarms[-1]
                    interrupted_rounds += 1
                alarms.clear()  # its traceback holds the frames it passed
                signal.setitimer(signal.ITIMER_REAL, 0)
                armed[0] = False
                assert not _native.escaped, _native.escaped
                assert not d.is_dispatching
            trace.stop()
            group.release()
            a.close()
            b.close()
            d.close()
            del d, a, b, group, trace, sub, extra, g
            clean()
            assert [r for r in states if r() is not None] == []
            states.clear()
            assert all(c is None for c in _native.objects), _native.objects
        assert interrupted_rounds > 0
        """
    )


# A timer that fires every few microseconds while a tight loop makes and
# ends registrations and traces dispatches: the alarm lands inside each
# trampoline's body too, between its calls, not only before it begins.
FAST_ALARMS = """
import random, time

class Alarm(BaseException):
    pass

armed = [False]
def on_alarm(signum, frame):
    if armed[0]:
        armed[0] = False
        raise Alarm()
signal.signal(signal.SIGALRM, on_alarm)
rng = random.Random(11)

def alarm_soon():
    armed[0] = True
    signal.setitimer(signal.ITIMER_REAL, rng.uniform(1e-6, 40e-6))

def disarm():
    signal.setitimer(signal.ITIMER_REAL, 0)
    armed[0] = False

def under_alarms(body, rounds=200):
    # Runs body() `rounds` times, each with an alarm due within 40 us;
    # returns how many rounds the alarm interrupted.
    interrupted = 0
    for _ in range(rounds):
        try:
            alarm_soon()
            body()
            disarm()
        except Alarm:
            interrupted += 1
        disarm()
    return interrupted
"""


def test_sigalrm_inside_a_destroy_never_leaves_its_slot_filled() -> None:
    run_with_preamble(
        FAST_ALARMS
        + textwrap.dedent(
            """
        interrupted_rounds = 0
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:
            d = flux.Dispatcher()
            def churn():
                for _ in range(5):
                    d.unregister(d.register(lambda p: None))
            interrupted_rounds += under_alarms(churn)
            d.close()
            del d
            clean()
            assert all(c is None for c in _native.objects), _native.objects
        assert interrupted_rounds > 100, interrupted_rounds
        """
        )
    )


def test_sigalrm_inside_a_store_change_keeps_its_state_and_lets_the_replaced_ones_go() -> None:
    # The alarm lands inside a reduce, a listener or the store's own
    # listener as they settle a change (see "held states" in flux/stores.py):
    # the store always holds the C store's state (reading it never hangs, and
    # never goes back), and once the stores close every state is gone.
    run_with_preamble(
        FAST_ALARMS
        + textwrap.dedent(
            """
        states = []
        class Tracked(Counter):
            def reduce(self, state, action):
                if action == "swallow":
                    try:
                        self.dispatcher.wait_for([failing[0]])
                    except RuntimeError:
                        pass
                new = State(state.n + 1)
                states.append(weakref.ref(new))
                return new
        failing = []
        def fail(p):
            if p == "swallow":
                raise RuntimeError("fail")

        interrupted_rounds = 0
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:
            d = flux.Dispatcher()
            quiet, heard = Tracked(d), Tracked(d)  # no listener, one
            heard.add_listener(lambda: None)
            failing.append(d.register(fail))
            seen = {quiet: 0, heard: 0}
            def change():
                for payload in ("inc", "swallow", "inc"):
                    try:
                        d.dispatch(payload)
                    except RuntimeError:
                        pass
            for _ in range(20):
                interrupted_rounds += under_alarms(change, rounds=10)
                for store in (quiet, heard):
                    n = store.state.n
                    assert n >= seen[store], (n, seen[store])
                    seen[store] = n
            quiet.close()
            heard.close()
            d.close()
            del d, quiet, heard, seen, store
            failing.clear()
            ran.clear()
            clean()
            assert [r for r in states if r() is not None] == []
            states.clear()
            assert all(c is None for c in _native.objects), _native.objects
        assert interrupted_rounds > 100, interrupted_rounds
        """
        )
    )


def test_sigalrm_inside_a_trace_hook_loses_no_event() -> None:
    run_with_preamble(
        FAST_ALARMS
        + textwrap.dedent(
            """
        interrupted_rounds = 0
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:
            d = flux.Dispatcher()
            d.register(lambda p: None)
            d.register(lambda p: None)
            with flux.Trace(d) as trace:
                interrupted_rounds += under_alarms(lambda: d.dispatch("x"))
            # Every dispatch that began has each of its events, in order:
            # begin, two callbacks begun and ended (or the dispatch stopped
            # at a failed one), end.
            kinds = [e.kind for e in trace.events]
            i = 0
            while i < len(kinds):
                assert kinds[i] == "dispatch_begin", (i, kinds[i:i + 6])
                i += 1
                while kinds[i] == "callback_begin":
                    assert kinds[i + 1] == "callback_end", (i, kinds[i:i + 6])
                    i += 2
                assert kinds[i] == "dispatch_end", (i, kinds[i:i + 6])
                i += 1
            d.close()
            del d, trace
            clean()
        assert interrupted_rounds > 100, interrupted_rounds
        """
        )
    )


def test_sigint_anywhere_in_a_failing_enqueue_leaves_no_failure_for_a_later_call() -> None:
    # "each failure is reported exactly once, never by a later call": an
    # interrupt anywhere in the enqueue (or dispatch) that ran the queue --
    # as libflux returns, as _raise_left_over is entered -- takes the queued
    # failures with it.
    run_with_preamble(
        INTERRUPT_AT
        + textwrap.dedent(
            """
        class Boom(Exception):
            pass

        for mode in ["enqueue", "enqueue_in_callback"]:
            place = 0
            while True:
                place += 1
                d = flux.Dispatcher()
                def first(p):
                    if p == "go":
                        d.enqueue("fail")
                def second(p):
                    if p == "fail":
                        raise Boom(p)
                d.register(first)
                d.register(second)
                # Whatever it raises (the interrupt, Boom) is not this test's concern.
                if mode == "enqueue":
                    reached, _ = interrupt_at(place, d.enqueue, "fail")
                else:
                    reached, _ = interrupt_at(place, d.dispatch, "go")
                if not reached:
                    break
                assert not d._queued_errors, (mode, place, d._queued_errors)
                assert not d._pending, (mode, place, d._pending)
                d.dispatch("ok")  # raises nothing
                d.close()
                sent.clear()
                del d, first, second
                gc.collect()  # no finalizer left to run under the next trace
            assert place > 10, place
        """
        )
    )


def test_sigint_anywhere_in_register_leaves_no_registration_after_close() -> None:
    # Registered by libflux, then interrupted (as the errcheck was entered,
    # say): the registration is still recorded, and close() ends it.
    run_with_preamble(
        INTERRUPT_AT
        + textwrap.dedent(
            """
        from flux.dispatcher import live_callbacks

        place = 0
        while True:
            place += 1
            d = flux.Dispatcher()
            reached, raised = interrupt_at(place, d.register, lambda p: None)  # named by its __qualname__: a call
            assert raised is None or raised is sent[-1], (place, raised)
            if not reached:
                break
            d.dispatch("x")
            d.close()
            assert live_callbacks(d) == 0, place
            del d
            clean()
        assert place > 5, place
        """
        )
    )


def test_sigint_anywhere_in_a_failing_dispatch_that_drains_a_failing_one_reports_each_failure() -> None:
    # A dispatch fails and drains a queued dispatch that fails too. Wherever
    # the interrupt lands -- in dispatch/enqueue as they report, in the
    # queued dispatch's done as it takes its entries or calls on_error --
    # no entry is left in _pending (a later call would raise it, or take it
    # for its own), no failure is left for a later call, and each failure
    # is given to on_error, raised, or attached (noted or chained) to what
    # the call raised instead: the interrupt that took its place.
    run_with_preamble(
        INTERRUPT_AT
        + textwrap.dedent(
            """
        class Boom(Exception):
            pass

        def carries(raised, failure):
            # raised, chained to what was raised, or in one of their notes
            text = f"{type(failure).__name__}: {failure}"
            seen = set()
            while raised is not None and id(raised) not in seen:
                seen.add(id(raised))
                if raised is failure or any(text in note for note in getattr(raised, "__notes__", [])):
                    return True
                raised = raised.__cause__ or raised.__context__
            return False

        def reported(raised, failure):
            # or carried by an interrupt that is (one raised as on_error
            # began carries the failure it was given)
            return carries(raised, failure) or any(carries(k, failure) and carries(raised, k) for k in sent)

        def on_error(exc):  # a landing point as it is entered, unlike handed.append
            handed.append(exc)

        def raising(exc):  # its exception replaces the failure: given once all the same
            handed.append(exc)
            raise KeyError("on_error")

        for outer in ["dispatch", "enqueue"]:
            for handler in [None, "append", "function", "raising"]:
                place = 0
                while True:
                    place += 1
                    d = flux.Dispatcher()
                    own, queued = Boom("own"), Boom("queued")
                    handed = []
                    def fails(p):
                        if p == "go":
                            if handler == "append":
                                d.enqueue("queued", on_error=handed.append)
                            elif handler == "function":
                                d.enqueue("queued", on_error=on_error)
                            elif handler == "raising":
                                d.enqueue("queued", on_error=raising)
                            else:
                                d.enqueue("queued")
                            raise own
                        if p == "queued":
                            raise queued
                    d.register(fails)
                    reached, raised = interrupt_at(place, getattr(d, outer), "go")
                    if not reached:
                        break
                    where = (outer, handler, place, raised, handed)
                    assert not d._pending and not d._queued_errors, (where, d._pending, d._queued_errors)
                    if own.__traceback__ is not None:  # raised
                        assert reported(raised, own), where
                    if queued.__traceback__ is not None:
                        assert reported(raised, queued) or handed == [queued], where
                    assert len(handed) <= 1, where  # given once (aborted at once by an interrupt that escaped: a FluxError)
                    d.dispatch("ok")  # raises nothing
                    d.enqueue("ok")
                    assert not d._pending and not d._queued_errors, where
                    d.close()
                    sent.clear()
                    del d, fails, raised, own, queued, handed
                    gc.collect()  # no finalizer left to run under the next trace
                assert place > 50, (outer, handler, place)
        """
        )
    )


@pytest.mark.parametrize("action", ["make", "close"])
def test_sigint_anywhere_in_making_or_closing_a_trampoline_leaks_no_closure(action: str) -> None:
    # Between libflux making the closure and the Trampoline recording it (the
    # errcheck, flux_closure_code, the finalizer), or between close() taking
    # it and libflux destroying it, an interrupt left a live closure that
    # nothing would ever free.
    run_with_preamble(
        INTERRUPT_AT
        + textwrap.dedent(
            f"""
        from flux import trampoline

        place = 0
        while True:
            place += 1
            made = []
            if {action!r} == "make":
                reached, raised = interrupt_at(place, lambda: made.append(flux.Trampoline("i(i)", lambda n: n + 1)))
            else:
                made.append(flux.Trampoline("i(i)", lambda n: n + 1))
                reached, raised = interrupt_at(place, made[0].close)
            assert raised is None or raised is sent[-1], (place, raised)
            if made and not made[0].closed:
                assert made[0](41) == 42, place  # whole, and callable
            sent.clear()  # its traceback holds the trampoline
            del made, raised
            clean()
            assert trampoline.live_closures() == 0, place
            if not reached:
                break
        assert place > 10, place
        """
        )
    )


@pytest.mark.parametrize("shape", ["plain", "a wait"])
def test_sigint_before_a_callback_fails_the_queued_dispatches_after_it_without_giving_them_the_interrupt(
    shape: str,
) -> None:
    # An interrupt that escapes a callback before its body ran is kept for
    # the outermost call, and until then every Python callback on the thread
    # refuses (see _native.escaped): the queued dispatches that call drains
    # fail too, none of their Python code running -- each with a
    # CallbackFailedError naming the callback that refused, as documented.
    # The interrupt is raised once, by that call: never given to a queued
    # dispatch's on_error. It was, when the callback whose wait it cut short
    # parked it with the payload a queued dispatch had too.
    run_with_preamble(
        f"""
        shape = {shape!r}
        for _ in range({ROUNDS}):
            d = flux.Dispatcher()
            payload = object()
            ran, handed, tokens = [], [], []
            def first(p):
                ran.append(("first", p))
                if p is payload and len(ran) == 1:
                    d.enqueue(payload, on_error=handed.append)  # the same payload
                    d.enqueue("other")  # no on_error: noted on what the call raises
                if shape == "a wait" and p is payload:
                    d.wait_for(tokens)  # raise(), then victim: interrupted as it is entered
            first_token = d.register(first)
            raising = native_callback(d)
            victim = d.register(lambda p: ran.append(("victim", p)))
            if shape == "a wait":
                tokens.extend([flux.Token(d._serial, raising), victim])
            d.register(lambda p: ran.append(("last", p)))
            try:
                d.dispatch(payload)
            except KeyboardInterrupt as exc:
                raised = exc
            else:
                raise AssertionError("dispatch returned")
            assert raised is sent[-1] and len(sent) == 1, (raised, sent)
            assert ran == [("first", payload)], ran  # nothing of the queued dispatches ran
            assert len(handed) == 1 and type(handed[0]) is flux.CallbackFailedError, handed
            assert handed[0].token == first_token, handed[0]
            notes = [n for n in getattr(raised, "__notes__", []) if "queued dispatch also failed" in n]
            assert len(notes) == 1 and "CallbackFailedError" in notes[0], raised.__notes__
            assert not d._pending and not d._queued_errors and not _native.escaped
            _native.flux_unregister(d._handle, raising)
            ran.clear()
            d.dispatch("after")
            assert ran == [("first", "after"), ("victim", "after"), ("last", "after")], ran
            d.close()
            sent.clear()
            del d, first, raised, handed
            clean()
        """
    )


def test_sigint_anywhere_in_a_dispatch_that_drains_the_queue_reports_the_interrupt_once() -> None:
    # Wherever the interrupt lands -- in a callback of the outer dispatch or
    # of a queued one, as it is entered, inside a wait, in a done -- it is
    # reported exactly once: raised by the call (or carried by what it
    # raised), or given to the on_error of the queued dispatch it failed
    # (one whose callback it interrupted once its body began); and nothing
    # is left for a later call.
    run_with_preamble(
        INTERRUPT_AT
        + textwrap.dedent(
            """
        def carries(raised, exc):
            seen = set()
            while raised is not None and id(raised) not in seen:
                if raised is exc:
                    return True
                seen.add(id(raised))
                raised = raised.__cause__ or raised.__context__
            return False

        for shape in ["plain", "a wait"]:
            place = 0
            while True:
                place += 1
                d = flux.Dispatcher()
                payload = object()
                ran, handed, tokens = [], [], []
                def first(p):
                    ran.append(p)
                    if p is payload and len(ran) == 1:
                        d.enqueue(payload, on_error=handed.append)
                        d.enqueue(payload, on_error=handed.append)
                    if shape == "a wait" and p is payload:
                        d.wait_for(tokens)
                d.register(first)
                tokens.append(d.register(lambda p: None))
                reached, raised = interrupt_at(place, d.dispatch, payload)
                if not reached:
                    break
                where = (shape, place, raised, handed)
                if sent:
                    given = sum(1 for exc in handed if exc is sent[0])
                    assert given + carries(raised, sent[0]) == 1, where
                assert not d._pending and not d._queued_errors and not _native.escaped, where
                d.dispatch("ok")  # raises nothing
                d.close()
                sent.clear()
                del d, first, raised, handed, where
                gc.collect()  # no finalizer left to run under the next trace
            assert place > 30, (shape, place)
        """
        )
    )


@pytest.mark.parametrize("reports", REPORTS)
def test_sigint_in_or_just_before_a_trampolines_handler_comes_out_of_the_call(reports: str) -> None:
    # flux.Trampoline's handler is user code C calls: its exceptions are
    # reported as unraisable, but an interrupt was printed as one and lost
    # (the C caller got 0 and the program went on as if Ctrl-C never came).
    # In the handler (raise_signal), and as it is entered (libc's raise()
    # as a native flux callback just before the trampoline, so the signal
    # arrives while the thread is in C), it comes out of flux.call.
    result = run_script(
        f"""
        import ctypes, signal
        import flux
        from flux import _native
        {textwrap.indent(REPORTS[reports], " " * 8).strip()}
        calls = []
        def handler(context, payload):
            calls.append(payload)
            if payload == 1:
                signal.raise_signal(signal.SIGINT)
            return 0
        with flux.Trampoline("i(pp)", handler) as t:
            for _ in range({ROUNDS}):
                try:
                    flux.call(t.address, "i(pp)", 0, 1)
                except KeyboardInterrupt:
                    pass
                else:
                    raise AssertionError("the interrupt in the handler was lost")
                assert flux.call(t.address, "i(pp)", 0, 2) == 0  # nothing left over

            libc = ctypes.CDLL(None)
            raise_signal = _native.CALLBACK(ctypes.cast(getattr(libc, "raise"), ctypes.c_void_p).value)
            d = _native.flux_dispatcher_create()
            out = ctypes.c_uint64()
            no_destroy = ctypes.cast(None, _native.DESTROY)
            _native.flux_register(d, raise_signal, signal.SIGINT, no_destroy, ctypes.byref(out))
            _native.flux_register(d, _native.CALLBACK(t.address), None, no_destroy, ctypes.byref(out))
            dispatch = ctypes.cast(_native.lib.flux_dispatch, ctypes.c_void_p).value
            for _ in range({ROUNDS}):
                calls.clear()
                try:
                    flux.call(dispatch, "i(pp)", d, 3)
                except KeyboardInterrupt:
                    pass
                else:
                    raise AssertionError("the interrupt on entering the handler was lost")
                assert calls == [], calls  # interrupted as it was entered
            _native.flux_dispatcher_destroy(d)
        print("ok")
        """
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == "ok\n"
    assert result.stderr == "", result.stderr  # nothing printed as unraisable


def test_an_interrupt_reported_with_no_object_from_outside_the_package_goes_to_the_previous_hook(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Newer CPython reports many exceptions with no object.
    # One that no function of the package raised is not the package's: an
    # interrupt among them goes to the hook chained before, not to this
    # thread's next libflux call (it did, taken for a flux.Trampoline's).
    captured: list[Any] = []
    monkeypatch.setattr(sys, "unraisablehook", captured.append)

    def raises() -> int:
        raise KeyboardInterrupt

    ctypes.CFUNCTYPE(ctypes.c_int)(raises)()
    monkeypatch.undo()
    (report,) = captured
    foreign = type(report)((report.exc_type, report.exc_value, report.exc_traceback, report.err_msg, None))
    passed_on: list[Any] = []
    monkeypatch.setattr(_native, "_previous_unraisable_hook", passed_on.append)
    _native._unraisable_hook(foreign)
    assert passed_on == [foreign]
    assert _native.take_escaped(threading.get_ident()) is None


@pytest.mark.parametrize("making", ["store", "listener", "owner-bound listener", "group"])
def test_sigint_anywhere_in_making_a_store_listener_or_group_leaves_no_registry_slot_after_close(making: str) -> None:
    # An interrupt raised as add() returned -- where a signal that arrived
    # while it filled the registry slot is handled -- left the slot filled
    # with no caller knowing its number: the store's held states, or the
    # listener or group function, were kept for good.
    run_with_preamble(
        INTERRUPT_AT
        + textwrap.dedent(
            f"""
        class View:
            def refresh(self):
                pass

        def spare_slots():
            # Free registry slots: add() then takes one without growing the
            # registry, the same landing points every round.
            token = object()
            for context in [_native.add(token) for _ in range(8)]:
                _native.drop(context, token, _native.UNTOUCHED)

        view = View()
        make = {{
            "store": lambda d, store: Counter(d),
            "listener": lambda d, store: store.add_listener(lambda: None),
            "owner-bound listener": lambda d, store: store.add_listener(view.refresh, owner=view),
            "group": lambda d, store: flux.StoreGroup([store], lambda: None),
        }}[{making!r}]
        place = 0
        while True:
            place += 1
            d = flux.Dispatcher()
            store = Counter(d)
            spare_slots()
            reached, raised = interrupt_at(place, make, d, store)
            assert raised is None or raised is sent[-1], (place, raised)
            if not reached:
                break  # made to its end: every place was tried
            d.close()
            del d, store, raised
            sent.clear()  # their tracebacks hold the frames, and what they made
            clean()
            assert all(c is None for c in _native.objects), (place, _native.objects)
        assert place > 5, place
        """
        )
    )


@pytest.mark.parametrize("making", ["registration", "enqueued call", "queued call", "trace", "trampoline"])
def test_sigint_anywhere_in_handing_libflux_a_context_leaves_no_registry_slot_after_close(making: str) -> None:
    # As for a store (above): an interrupt raised as add() returned left the
    # slot filled with no caller knowing its number -- a callback, an
    # enqueued call's record (and its payload), a trace, a trampoline's
    # handler kept for good. And a queued call's record must not be dropped
    # with it: its done, run by the dispatch draining the queue, needs it
    # (a stray done, counted in _native.stray, if it was).
    run_with_preamble(
        INTERRUPT_AT
        + textwrap.dedent(
            f"""
        def spare_slots():
            # Free registry slots: add() then takes one without growing the
            # registry, the same landing points every round.
            token = object()
            for context in [_native.add(token) for _ in range(8)]:
                _native.drop(context, token, _native.UNTOUCHED)

        made = []
        make = {{
            "registration": lambda d: d.register(lambda p: None, name="callback"),
            "enqueued call": lambda d: d.enqueue("now"),
            "queued call": lambda d: d.dispatch("go"),  # its callback enqueues
            "trace": lambda d: flux.Trace(d).start(),
            "trampoline": lambda d: made.append(flux.Trampoline("i(i)", lambda n: n + 1)),
        }}[{making!r}]
        place = 0
        while True:
            place += 1
            d = flux.Dispatcher()
            d.register(lambda p: d.enqueue("queued") if p == "go" else None, name="enqueues")
            spare_slots()
            reached, raised = interrupt_at(place, make, d)
            assert raised is None or raised is sent[-1], (place, raised)
            if not reached:
                break  # made to its end: every place was tried
            d.close()
            for trampoline in made:
                trampoline.close()
            del d, raised
            made.clear()
            sent.clear()  # their tracebacks hold the frames, and what they made
            clean()
            assert _native.stray.get("done", 0) == 0, (place, _native.stray)
            assert all(c is None for c in _native.objects), (place, _native.objects)
        assert place > 5, place
        """
        )
    )
