"""flux.Trace: every observer event, a rendered tree, a Chrome trace file."""

from __future__ import annotations

import json
import re
import sys
import threading
from dataclasses import astuple, fields
from pathlib import Path
from typing import Any

import pytest
from on_threads import fork_during_a_dispatch, run_python

import flux
from flux import _native


def flight(d: flux.Dispatcher[Any]) -> dict[str, flux.Token]:
    """The flight-destination stores: city waits for country, price for city."""
    t: dict[str, flux.Token] = {}

    def country(p: Any) -> None:
        pass

    def city(p: Any) -> None:
        d.wait_for([t["country"]])

    def price(p: Any) -> None:
        d.wait_for([t["city"]])

    t["country"] = d.register(country, name="CountryStore")
    t["price"] = d.register(price, name="FlightPriceStore")
    t["city"] = d.register(city)  # default name: the qualified name
    return t


def kinds(trace: flux.Trace) -> list[str]:
    short = {"dispatch_begin": "D", "dispatch_end": "E", "callback_begin": "b", "callback_end": "e", "wait_for": "w"}
    out = []
    for ev in trace.events:
        text = short[ev.kind]
        if ev.kind == "wait_for":
            text += f"{ev.token}{list(ev.tokens)}"
        elif ev.token is not None:
            text += str(ev.token)
        out.append(text)
    return out


def test_events_in_exact_order_with_names_and_monotonic_times(d: flux.Dispatcher[Any]) -> None:
    t = flight(d)
    payload = {"type": "city-update"}
    with flux.Trace(d) as trace:
        d.dispatch(payload)
    assert kinds(trace) == ["D", "b1", "e1", "b2", "w2[3]", "b3", "w3[1]", "e3", "e2", "E"]
    assert trace.events[0].payload is payload
    assert trace.events[-1].status == 0
    names = {ev.token: ev.name for ev in trace.events if ev.kind == "callback_begin"}
    assert names == {
        t["country"].value: "CountryStore",
        t["price"].value: "FlightPriceStore",
        t["city"].value: "flight.<locals>.city",
    }
    times = [ev.time_ns for ev in trace.events]
    assert times == sorted(times)


def test_failures_abort_and_end_with_the_status(d: flux.Dispatcher[Any]) -> None:
    def bad(p: Any) -> None:
        raise ValueError("no")

    d.register(lambda p: None, name="ok")
    d.register(bad, name="bad")
    d.register(lambda p: None, name="never")
    with flux.Trace(d) as trace, pytest.raises(ValueError):
        d.dispatch(1)
    assert kinds(trace) == ["D", "b1", "e1", "b2", "e2", "E"]
    assert trace.events[4].result != 0
    assert trace.events[-1].status == flux.Status.ERR_CALLBACK_FAILED
    assert "failed (FLUX_ERR_CALLBACK_FAILED)" in trace.render()


def test_stopping_during_a_dispatch_keeps_it_to_the_end(d: flux.Dispatcher[Any]) -> None:
    trace = flux.Trace(d)
    d.register(lambda p: trace.stop(), name="stopper")
    d.register(lambda p: None, name="after")
    trace.start()
    d.dispatch(1)
    assert kinds(trace) == ["D", "b1", "e1", "b2", "e2", "E"]
    d.dispatch(2)
    assert len(trace.events) == 6  # stopped: the next dispatch is not recorded


def test_starting_during_a_dispatch_leaves_that_dispatch_to_the_trace_observing_its_start(
    d: flux.Dispatcher[Any],
) -> None:
    # The class's rule, for start() as the test above has it for stop(): the
    # running dispatch's events all go to the trace that saw it begin, the
    # new trace records from the next dispatch, whole.
    old = flux.Trace(d).start()
    new = flux.Trace(d)
    d.register(lambda p: new.start() if p == 1 else None, name="starter")
    d.register(lambda p: None, name="after")
    d.dispatch(1)
    assert kinds(old) == ["D", "b1", "e1", "b2", "e2", "E"]
    assert new.events == []
    d.dispatch(2)
    assert len(old.events) == 6, "replaced: the old trace records no more"
    assert kinds(new) == ["D", "b1", "e1", "b2", "e2", "E"]
    new.stop()
    old.stop()


def test_a_started_trace_is_kept_and_keeps_its_dispatcher_until_it_stops() -> None:
    import gc
    import weakref

    d: flux.Dispatcher[Any] = flux.Dispatcher()
    d.register(lambda p: None)
    trace = flux.Trace(d).start()
    trace_ref, d_ref = weakref.ref(trace), weakref.ref(d)
    del trace, d
    gc.collect()
    kept = trace_ref()
    assert kept is not None and d_ref() is not None, "the observer keeps the trace, the trace its dispatcher"
    kept.dispatcher.dispatch("still recorded")
    assert [ev.payload for ev in kept.events if ev.kind == "dispatch_begin"] == ["still recorded"]
    kept.stop()
    del kept
    gc.collect()
    assert trace_ref() is None and d_ref() is None


def test_queued_dispatches_are_traced_too(d: flux.Dispatcher[Any]) -> None:
    def cb(p: int) -> None:
        if p == 1:
            d.enqueue(2)

    d.register(cb)
    with flux.Trace(d) as trace:
        d.dispatch(1)
    assert kinds(trace) == ["D", "b1", "e1", "E", "D", "b1", "e1", "E"]
    assert [ev.payload for ev in trace.events if ev.kind == "dispatch_begin"] == [1, 2]


def test_render_nests_waited_for_callbacks_under_the_waiter(d: flux.Dispatcher[Any]) -> None:
    flight(d)
    with flux.Trace(d) as trace:
        d.dispatch("select")
    lines = trace.render().splitlines()
    assert lines[0].startswith("dispatch 'select'") and lines[0].endswith("ok")
    assert lines[1].startswith("├─ CountryStore (token 1)")
    assert lines[2].startswith("└─ FlightPriceStore (token 2)")
    assert lines[3] == "   ├─ waits for flight.<locals>.city"
    assert lines[4].startswith("   └─ flight.<locals>.city (token 3)")
    assert lines[5] == "      └─ waits for CountryStore"
    assert all("µs" in line or "ms" in line for line in (lines[0], lines[1], lines[2], lines[4]))


def test_chrome_trace_file_is_trace_event_format_with_nested_slices(d: flux.Dispatcher[Any], tmp_path: Path) -> None:
    flight(d)
    with flux.Trace(d) as trace:
        d.dispatch("one")
        d.dispatch("two")
    path = tmp_path / "trace.json"
    trace.write_chrome_trace(path)
    data = json.loads(path.read_text())
    events = data["traceEvents"]
    slices = [e for e in events if e["ph"] == "X"]
    for e in events:
        assert {"name", "ph", "ts", "pid", "tid"} <= e.keys()
        assert isinstance(e["ts"], (int, float))
    assert len(slices) == 2 * (1 + 3)
    assert sum(e["ph"] == "i" for e in events) == 2 * 2
    # Slices on one track nest properly: each is inside the one open before it.
    open_: list[dict[str, Any]] = []
    depth_of: dict[str, int] = {}
    for e in sorted(slices, key=lambda e: (e["ts"], -e["dur"])):
        while open_ and open_[-1]["ts"] + open_[-1]["dur"] <= e["ts"]:
            open_.pop()
        if open_:
            parent = open_[-1]
            assert e["ts"] + e["dur"] <= parent["ts"] + parent["dur"], "slices overlap without nesting"
        depth_of.setdefault(e["name"], len(open_))
        open_.append(e)
    assert depth_of["CountryStore"] == 1
    assert depth_of["FlightPriceStore"] == 1
    assert depth_of["flight.<locals>.city"] == 2  # nested under the price store that waited


def test_circular_messages_use_the_names(d: flux.Dispatcher[Any]) -> None:
    t: dict[str, flux.Token] = {}
    errors: list[flux.CircularDependencyError] = []

    def a(p: Any) -> None:
        d.wait_for([t["b"]])

    def b(p: Any) -> None:
        try:
            d.wait_for([t["a"]])
        except flux.CircularDependencyError as exc:
            errors.append(exc)

    t["a"] = d.register(a, name="StoreA")
    t["b"] = d.register(b, name="StoreB")
    d.dispatch(None)
    assert str(errors[0]) == (
        f"flux_wait_for: circular dependency: token {t['b'].value} (StoreB) waits for "
        f"{t['a'].value} (StoreA), which is waiting for {t['b'].value} (StoreB)"
    )


def test_stopping_a_replaced_trace_leaves_its_replacement_observing(d: flux.Dispatcher[Any]) -> None:
    first = flux.Trace(d)
    second = flux.Trace(d)

    def replace(p: Any) -> None:
        if p == 1:
            # Replaced during a dispatch: libflux keeps the first observer's
            # context to the end of it.
            second.start()
            first.stop()

    d.register(replace, name="replace")
    first.start()
    d.dispatch(1)
    first.stop()  # after the dispatch too: still not the observer
    d.dispatch(2)
    assert [ev.payload for ev in second.events if ev.kind == "dispatch_begin"] == [2]
    assert [ev.payload for ev in first.events if ev.kind == "dispatch_begin"] == [1]
    second.stop()
    d.dispatch(3)
    assert len(second.events) == 4


@pytest.mark.parametrize("replacing", [False, True])
def test_start_records_the_trace_before_raising_what_escaped_earlier(d: flux.Dispatcher[Any], replacing: bool) -> None:
    # An exception that escaped a trampoline earlier on this thread comes out
    # of the next call into libflux -- start()'s, after libflux made the
    # trace the observer: it must be recorded as the observer, so that
    # stop() stops it.
    d.register(lambda p: None)
    old = flux.Trace(d).start() if replacing else None
    new = flux.Trace(d)
    pending = KeyboardInterrupt("escaped before start()")
    _native.park_escaped(threading.get_ident(), pending)
    with pytest.raises(KeyboardInterrupt) as info:
        new.start()
    assert info.value is pending
    d.dispatch("recorded")
    new.stop()
    d.dispatch("not recorded")
    assert [ev.payload for ev in new.events if ev.kind == "dispatch_begin"] == ["recorded"]
    if old is not None:
        assert old.events == []
        old.stop()  # replaced: stops nothing
        d.dispatch("not recorded")
        assert old.events == [] and len(new.events) == 4
    assert _native.live(lambda obj, extra: isinstance(obj, flux.Trace)) == 0


class Unrepresentable:
    def __repr__(self) -> str:
        raise RuntimeError("no repr")


def test_render_and_chrome_trace_survive_a_payload_whose_repr_raises(d: flux.Dispatcher[Any]) -> None:
    d.register(lambda p: None, name="cb")
    with flux.Trace(d) as trace:
        d.dispatch(Unrepresentable())
    assert trace.render().splitlines()[0].startswith("dispatch <unrepresentable Unrepresentable>")
    names = [e["name"] for e in trace.chrome_trace()["traceEvents"]]
    assert "dispatch <unrepresentable Unrepresentable>" in names
    json.dumps(trace.chrome_trace())


def test_a_store_is_named_by_its_class_and_an_unnamed_token_only_once(d: flux.Dispatcher[Any]) -> None:
    class Counter(flux.ReduceStore[int]):
        def get_initial_state(self) -> int:
            return 0

        def reduce(self, state: int, action: Any) -> int:
            return state + 1

    store = Counter(d)
    group = flux.StoreGroup([store], lambda: None)
    with flux.Trace(d) as trace:
        d.dispatch("inc")
    lines = trace.render().splitlines()
    token = store.dispatch_token.value
    assert any(line.startswith(f"├─ Counter (token {token})  ") for line in lines), lines
    group_line = next(line for line in lines if f"token {token + 1}" in line)
    assert group_line.count("token") == 1, group_line
    group.release()
    store.close()
    assert d.name_of(token) is None


def test_closing_the_dispatcher_inside_a_trace_leaks_nothing(native_destroys: list[int]) -> None:
    import gc
    import weakref

    class Payload:
        pass

    d: flux.Dispatcher[Any] = flux.Dispatcher()
    handle = d._handle
    d.register(lambda p: None)
    payload = Payload()
    with flux.Trace(d) as trace:
        d.dispatch(payload)
        d.close()
    assert trace.events
    refs = [weakref.ref(x) for x in (trace, d, payload)]
    del trace, d, payload
    gc.collect()
    assert [r() for r in refs] == [None, None, None]
    assert handle in native_destroys  # the native dispatcher too


def test_a_callback_that_unregisters_itself_keeps_its_name_to_the_end_of_the_dispatch(
    d: flux.Dispatcher[Any],
) -> None:
    # libflux ends the registration (runs its destroy) when the dispatch
    # ends; the name goes then, not at unregister: callback_end and the
    # callback's own waits come after it unregistered.
    t: dict[str, flux.Token] = {}
    names_meanwhile: list[str | None] = []

    def leaver(p: Any) -> None:
        d.unregister(t["leaver"])
        names_meanwhile.append(d.name_of(t["leaver"]))
        d.wait_for([t["other"]])

    t["leaver"] = d.register(leaver, name="leaver")
    t["other"] = d.register(lambda p: None, name="other")
    with flux.Trace(d) as trace:
        d.dispatch(1)
    leaver_events = [(ev.kind, ev.name) for ev in trace.events if ev.token == t["leaver"].value]
    assert leaver_events == [("callback_begin", "leaver"), ("wait_for", "leaver"), ("callback_end", "leaver")]
    assert names_meanwhile == ["leaver"]
    assert d.name_of(t["leaver"]) is None  # the dispatch is over: so is the registration
    # Unregistered outside a dispatch, the registration ends, name and all, at once.
    d.unregister(t["other"])
    assert d.name_of(t["other"]) is None


def test_start_on_a_closed_dispatcher_raises_also_for_the_trace_observing_at_close() -> None:
    d: flux.Dispatcher[Any] = flux.Dispatcher()
    trace = flux.Trace(d).start()
    d.close()  # clears the observer: the trace no longer records
    with pytest.raises(flux.InvalidArgumentError, match="Trace: the dispatcher is closed"):
        trace.start()
    with pytest.raises(flux.InvalidArgumentError, match="Trace: the dispatcher is closed"):
        flux.Trace(d).start()
    trace.stop()  # only forgets it


def test_start_again_after_being_replaced_observes_again(d: flux.Dispatcher[Any]) -> None:
    first = flux.Trace(d).start()
    second = flux.Trace(d).start()  # replaces the first
    first.start()  # and back: the first observes, the second stops
    d.dispatch(1)
    assert len(first.events) == 2 and second.events == []
    second.stop()  # not the observer: leaves the first be
    d.dispatch(2)
    assert len(first.events) == 4
    first.stop()


def test_a_stale_trace_stops_nothing_when_its_slot_went_to_another_trace(d: flux.Dispatcher[Any]) -> None:
    # A replaced trace's context is freed and reused, newest first: the old
    # trace's number may come to stand for the trace observing now.
    stale = flux.Trace(d).start()
    flux.Trace(d).start().stop()  # replaces it, and its context is free
    others = [flux.Trace(d).start() for _ in range(2)]
    observing = others[-1]
    assert observing._context == stale._context  # the case this test is about
    stale.stop()
    d.dispatch(1)
    assert len(observing.events) == 2
    observing.stop()


def test_initializing_an_observing_trace_again_is_refused_and_changes_nothing() -> None:
    # As for a store, a group, a dispatcher or a trampoline: a second
    # __init__ forgot the observer it had set, so stop() did nothing and the
    # old dispatcher went on recording into the trace (and keeping every
    # payload) until it closed -- another trace on it then ended that.
    d: flux.Dispatcher[Any] = flux.Dispatcher()
    other: flux.Dispatcher[Any] = flux.Dispatcher()
    d.register(lambda p: None)
    trace = flux.Trace(d).start()
    with pytest.raises(RuntimeError, match="already"):
        flux.Trace.__init__(trace, other)
    assert trace.dispatcher is d
    d.dispatch(1)
    trace.stop()
    d.dispatch(2)
    assert [ev.payload for ev in trace.events if ev.kind == "dispatch_begin"] == [1], "it stopped"
    # Stopped, or replaced by another trace, it may be made anew.
    flux.Trace.__init__(trace, other)
    assert trace.events == [] and trace.dispatcher is other
    replaced = flux.Trace(d).start()
    flux.Trace(d).start()
    flux.Trace.__init__(replaced, other)
    d.close()
    other.close()


def test_dispatch_end_status_is_a_flux_status(d: flux.Dispatcher[Any]) -> None:
    def bad(p: Any) -> None:
        raise ValueError("no")

    token = d.register(lambda p: None)
    with flux.Trace(d) as trace:
        d.dispatch(1)
        d.unregister(token)
        d.register(bad)
        with pytest.raises(ValueError):
            d.dispatch(2)
    statuses = [ev.status for ev in trace.events if ev.kind == "dispatch_end"]
    assert [type(status) for status in statuses] == [flux.Status, flux.Status]
    assert statuses == [flux.Status.OK, flux.Status.ERR_CALLBACK_FAILED]
    assert statuses == [0, 6]  # still equal to the C codes


@pytest.mark.parametrize("bad", [None, 1, "dispatcher", object()])
def test_a_trace_of_something_not_a_dispatcher_is_a_type_error(bad: Any) -> None:
    # A clear error where the trace is made, not an AttributeError from
    # start() (or, from stop() and render(), none at all).
    with pytest.raises(TypeError, match="expected a flux.Dispatcher"):
        flux.Trace(bad)


def test_a_trace_started_as_another_thread_closes_the_dispatcher_is_let_go(native_destroys: list[int]) -> None:
    # start() found the dispatcher open; close() then ran to its end on
    # another thread before start() set the observer. Either close() clears
    # the trace start() set, or start() finds the dispatcher closed: never
    # an observer of a closed dispatcher, held by the registry (which keeps
    # the trace, and through it the dispatcher, alive for good).
    import gc
    import weakref

    d: flux.Dispatcher[Any] = flux.Dispatcher()
    handle = d._handle
    trace = flux.Trace(d)
    closed = threading.Event()

    def close(dispatcher: flux.Dispatcher[Any]) -> None:
        dispatcher.close()
        closed.set()

    closer = threading.Thread(target=close, args=(d,))

    def pause_before_the_observer_is_set(frame: Any, event: str, arg: Any) -> None:
        # As start() makes the context it hands libflux: past its check.
        caller = frame.f_back
        if frame.f_code is _native.add.__code__ and caller is not None and caller.f_code is flux.Trace._start.__code__:
            sys.settrace(None)
            closer.start()
            closed.wait(0.5)  # a close() that waits for start() waits no longer than this

    sys.settrace(pause_before_the_observer_is_set)
    try:
        try:
            trace.start()
        except flux.InvalidArgumentError:
            pass  # found the dispatcher closed: as good
    finally:
        sys.settrace(None)
    assert closer.ident is not None, "the pause was reached"
    closer.join()
    assert d.closed
    observing = _native.live(lambda obj, extra: isinstance(obj, flux.Trace))
    assert observing == 0, "close() left the trace observing"
    refs = [weakref.ref(x) for x in (trace, d)]
    del trace, d
    gc.collect()
    assert [r() for r in refs] == [None, None]
    assert handle in native_destroys


def test_a_wait_for_a_token_of_another_dispatcher_is_not_named_as_token_0(d: flux.Dispatcher[Any]) -> None:
    # The binding hands libflux a foreign token as 0 (never a token), so the
    # wait_for event carried token 0 named "token 0": a token nobody gave.
    other: flux.Dispatcher[Any] = flux.Dispatcher()
    foreign = other.register(lambda p: None)
    t: dict[str, flux.Token] = {}

    def waiter(p: Any) -> None:
        with pytest.raises(flux.UnknownTokenError):
            d.wait_for([t["mine"], foreign])

    d.register(waiter, name="waiter")
    t["mine"] = d.register(lambda p: None, name="mine")
    with flux.Trace(d) as trace:
        d.dispatch(1)
    (wait,) = [ev for ev in trace.events if ev.kind == "wait_for"]
    assert wait.tokens == (t["mine"].value, 0)
    assert wait.names == ("mine", "a token of another dispatcher")
    assert "waits for mine, a token of another dispatcher" in trace.render()
    other.close()


def test_stop_in_a_forked_child_whose_dispatch_another_thread_ran_only_forgets_the_trace() -> None:
    # In the child, the dispatch the parent's other thread was running never
    # ends: libflux refuses to change the observer (flux.h, "fork"), so
    # stop() -- and leaving a with block -- only forgets the trace, as for a
    # closed dispatcher, instead of raising.
    result = fork_during_a_dispatch(
        """
        try:
            trace.stop()
        except BaseException:
            code = 1
        if trace._context != 0:
            code = 2
        try:
            flux.Trace(d).start()  # refused by start(), which says why
            code = 3
        except flux.AlreadyDispatchingError as exc:
            if "forked" not in str(exc):
                code = 4
        """,
        setup="trace = flux.Trace(d).start()",
        after="trace.stop()",
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == "ok\n"


FORK_WHILE_ANOTHER_THREAD_STARTS_A_TRACE = """
import os, signal, sys, threading, time, warnings
import flux
import flux.trace
warnings.simplefilter("ignore", DeprecationWarning)  # fork with threads
inside, forked = threading.Event(), threading.Event()

def pause_inside_start(frame, event, arg):
    # A tracer: parks the thread inside Trace.start(), once it holds what
    # start() holds, until the other thread has forked.
    if frame.f_code is not flux.Trace._start.__code__:
        return None
    def line(frame, event, arg):
        if event == "line" and flux.trace._observer_lock._is_owned() and not inside.is_set():
            inside.set()
            forked.wait()
        return line
    return line

def start():
    sys.settrace(pause_inside_start)
    flux.Trace(flux.Dispatcher()).start()

thread = threading.Thread(target=start)
thread.start()
inside.wait()
pid = os.fork()
if pid == 0:
    # The safe course flux.h gives a child: dispatchers of its own.
    d = flux.Dispatcher()
    d.register(lambda payload: None)
    with flux.Trace(d) as trace:
        d.dispatch(1)
    os._exit(0 if [ev.kind for ev in trace.events][0] == "dispatch_begin" else 1)
forked.set()
thread.join()
for _ in range(2000):  # a deadlocked child is killed rather than left behind
    done, status = os.waitpid(pid, os.WNOHANG)
    if done:
        break
    time.sleep(0.005)
else:
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    sys.exit("the child hangs tracing a dispatcher of its own")
assert os.waitstatus_to_exitcode(status) == 0, status
print("ok")
"""


def test_a_child_forked_while_another_thread_starts_a_trace_can_trace_its_own_dispatchers() -> None:
    # The trace module's one lock, held by the other thread inside start()
    # at the fork, stayed held in the child, where no thread releases it:
    # every Trace.start() or stop() there waited for ever, on any dispatcher.
    result = run_python(["-c", FORK_WHILE_ANOTHER_THREAD_STARTS_A_TRACE])
    assert result.returncode == 0, result.stderr
    assert result.stdout == "ok\n"


# ---------------------------------------------------------------------------
# The README's trace: what examples/flight_trace.py (make demo) prints
# ---------------------------------------------------------------------------

ROOT = Path(__file__).resolve().parents[3]
FLIGHT_TRACE = ROOT / "examples" / "flight_trace.py"


def without_durations(text: str) -> str:
    return re.sub(r"  [0-9.]+ [µm]?s\b", "  <t>", text)


@pytest.mark.skipif(not FLIGHT_TRACE.exists(), reason="not in a libflux checkout")
def test_the_flight_trace_example_prints_the_readmes_tree(tmp_path: Path) -> None:
    # The README shows this output (section "Observing dispatches: traces"); only
    # the durations may differ.
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    shown = re.search(r"\n```\n(dispatch Action\(type='city-update'.*?\n)```\n", readme, re.DOTALL)
    assert shown is not None, "the README no longer shows the flight trace"
    result = run_python([str(FLIGHT_TRACE), str(tmp_path / "trace.json")])
    assert result.returncode == 0, result.stderr
    tree = result.stdout.split("\n\n")[0] + "\n"
    assert without_durations(tree) == without_durations(shown.group(1))
    assert json.loads((tmp_path / "trace.json").read_text())["traceEvents"]


class MultiLine:
    def __repr__(self) -> str:
        return "MultiLine(\n  rows=2\n)"  # as a numpy array's or a DataFrame's repr


def test_render_keeps_one_line_per_node_whatever_the_names_and_payloads(d: flux.Dispatcher[Any]) -> None:
    t: dict[str, flux.Token] = {}
    t["a"] = d.register(lambda p: d.wait_for([t["b"]]), name="first\nsecond\u2028\ud800")
    t["b"] = d.register(lambda p: None, name="b\r\x00")
    with flux.Trace(d) as trace:
        d.dispatch(MultiLine())
    lines = trace.render().splitlines()
    assert len(lines) == 4, lines  # the dispatch, its callback, its wait, the waited-for callback
    assert lines[0].startswith("dispatch MultiLine(\\n  rows=2\\n)  ")
    assert lines[1].startswith("└─ first\\nsecond\\u2028\\ud800 (token 1)  ")
    assert lines[2] == "   ├─ waits for b\\r\\x00"
    assert lines[3].startswith("   └─ b\\r\\x00 (token 2)  ")
    trace.render().encode("utf-8")  # printable, to a terminal or a file


def test_chrome_trace_names_are_valid_unicode_whatever_the_names_and_payloads(d: flux.Dispatcher[Any]) -> None:
    t: dict[str, flux.Token] = {}
    t["a"] = d.register(lambda p: d.wait_for([t["b"]]), name="a\ud800")
    t["b"] = d.register(lambda p: None, name="b\udfff")
    with flux.Trace(d) as trace:
        d.dispatch("p\udc80")
    names = sorted(e["name"] for e in trace.chrome_trace()["traceEvents"])
    assert names == ["a\\ud800", "b\\udfff", "dispatch 'p\\udc80'", "wait_for b\\udfff"]
    # Strict: a lone surrogate cannot be encoded, so would raise here.
    json.dumps(trace.chrome_trace(), ensure_ascii=False).encode("utf-8")


def test_chrome_trace_taken_during_a_dispatch_shows_what_is_still_running(d: flux.Dispatcher[Any]) -> None:
    t: dict[str, flux.Token] = {}
    taken: list[dict[str, Any]] = []

    def waiter(p: Any) -> None:
        d.wait_for([t["b"]])
        taken.append(trace.chrome_trace())

    t["a"] = d.register(waiter, name="A")
    t["b"] = d.register(lambda p: None, name="B")
    with flux.Trace(d) as trace:
        d.dispatch("p")
    events = taken[0]["traceEvents"]
    json.dumps(taken[0])
    running = [(e["ph"], e["name"]) for e in events if e["ph"] == "B"]
    assert running == [("B", "dispatch 'p'"), ("B", "A")]  # open slices, outermost first
    b = next(e for e in events if e["name"] == "B")
    a = next(e for e in events if e["name"] == "A")
    assert b["ph"] == "X" and a["ts"] <= b["ts"]
    assert [e["name"] for e in events].index("A") < [e["name"] for e in events].index("B")


def test_start_again_while_observing_does_nothing(d: flux.Dispatcher[Any]) -> None:
    # "Nothing when it is the observer already": no new observer (context),
    # from inside a dispatch either.
    trace = flux.Trace(d)
    contexts: list[int] = []
    d.register(lambda p: contexts.append(trace.start()._context), name="restarter")
    with trace:
        contexts.append(trace.start()._context)
        d.dispatch(1)
        d.dispatch(2)
    assert len(set(contexts)) == 1
    assert kinds(trace) == ["D", "b1", "e1", "E"] * 2


def test_chrome_trace_lists_an_enclosing_slice_before_one_that_begins_with_it(d: flux.Dispatcher[Any]) -> None:
    # Equal stamps (a coarse clock): the longer slice, the enclosing one,
    # comes first, so a viewer nests the other in it.
    trace = flux.Trace(d)
    trace.events[:] = [
        flux.TraceEvent("dispatch_begin", 1000, 7, payload="p"),
        flux.TraceEvent("callback_begin", 1000, 7, token=1, name="cb"),
        flux.TraceEvent("callback_end", 2000, 7, token=1, name="cb", result=0),
        flux.TraceEvent("dispatch_end", 3000, 7, payload="p", status=flux.Status.OK),
    ]
    assert [e["name"] for e in trace.chrome_trace()["traceEvents"]] == ["dispatch 'p'", "cb"]


def test_trace_event_fields_come_in_the_order_the_readme_shows(d: flux.Dispatcher[Any]) -> None:
    # The README ("Observing dispatches: traces") writes an event as
    # TraceEvent(kind, time_ns, thread, payload, status, token, ...): those
    # six positions are API for whoever builds or unpacks one by position.
    d.register(lambda p: None)
    with flux.Trace(d) as trace:
        d.dispatch("p")
    end = trace.events[-1]
    assert end.kind == "dispatch_end"
    assert flux.TraceEvent(*astuple(end)) == end
    assert astuple(end)[:6] == (end.kind, end.time_ns, end.thread, "p", flux.Status.OK, None)
    assert [f.name for f in fields(flux.TraceEvent)][:6] == ["kind", "time_ns", "thread", "payload", "status", "token"]


def test_a_long_payload_is_shown_in_sixty_characters(d: flux.Dispatcher[Any]) -> None:
    d.register(lambda p: None)
    with flux.Trace(d) as trace:
        d.dispatch("x" * 100)
    label = trace.render().splitlines()[0].split("  ")[0]
    assert label == "dispatch " + repr("x" * 100)[:57] + "..."


def test_an_empty_name_leaves_a_registration_unnamed(d: flux.Dispatcher[Any]) -> None:
    # name="" is a name given, not "use the default": the token names it.
    token = d.register(lambda p: None, name="")
    assert d.name_of(token) == ""
    with flux.Trace(d) as trace:
        d.dispatch(1)
    assert trace.events[1].name == f"token {token.value}"
    assert trace.render().splitlines()[1].startswith(f"└─ token {token.value}  ")
