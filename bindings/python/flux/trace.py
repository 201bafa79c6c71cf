"""flux.Trace: record what a dispatcher does, render it, export it.

::

    with flux.Trace(dispatcher) as trace:
        dispatcher.dispatch(action)
    print(trace.render())                 # a tree: dispatches, callbacks, waits
    trace.write_chrome_trace("trace.json")  # open in Perfetto or chrome://tracing

The trace is libflux's observer (``flux_dispatcher_set_observer``): every
event arrives on the dispatching thread, in order, and is stamped with
``time.perf_counter_ns()`` (monotonic). Callbacks are named by
``Dispatcher.register(..., name=...)``, by default their ``__qualname__``.
"""

from __future__ import annotations

import json
import math
import os
import threading
import time
import weakref
from ctypes import ArgumentError, byref
from dataclasses import dataclass, field
from typing import Any

from . import _native
from .dispatcher import Dispatcher
from .errors import AlreadyDispatchingError, InvalidArgumentError, Status

__all__ = ["Trace", "TraceEvent"]


@dataclass(frozen=True)
class TraceEvent:
    """One observer event.

    ``kind`` is ``"dispatch_begin"``, ``"dispatch_end"``, ``"callback_begin"``,
    ``"callback_end"`` or ``"wait_for"``. ``time_ns`` is a
    ``time.perf_counter_ns()`` stamp; ``thread`` the native thread id. The
    other fields are set for the kinds they concern: ``payload`` (dispatch
    events), ``status`` (dispatch_end: a :class:`flux.Status`, ``Status.OK``
    -- equal to 0 -- or the status of the failure), ``token``/``name``
    (callback events; for wait_for, the waiter), ``result`` (callback_end:
    0, or non-zero when it raised), ``tokens``/``names`` (wait_for: the
    tokens waited for, as given; a token of another dispatcher, which
    libflux never sees, as 0 named "a token of another dispatcher"). A
    callback's events carry the name it was registered with, also when it
    unregistered itself during the dispatch.
    """

    kind: str
    time_ns: int
    thread: int
    payload: Any = None
    status: Status | int | None = None
    token: int | None = None
    name: str | None = None
    result: int | None = None
    tokens: tuple[int, ...] = ()
    names: tuple[str, ...] = ()


# A trace's context is its slot in the one registry (_native.objects). The
# one destroy removes it once libflux is done with the observer, so the hooks
# never see a trace that is gone, even when the trace is closed during a
# dispatch (libflux keeps the old observer to the end of it).
# Dispatcher -> a cell holding the context of the trace that is its observer
# now (0: none): stop() clears the observer only when it is still this
# trace's (replaced during a dispatch, an old trace stays registered until
# that dispatch ends). A cell, made before libflux is called, so recording
# the observer is a store that makes no call: no interrupt can come between
# libflux's change and its record. The lock makes each start/stop's check
# and set one step (reentrant: setting the observer may let go of a trace,
# whose payloads' finalizers may run anything).
_observing: weakref.WeakKeyDictionary[Dispatcher[Any], list[int]] = weakref.WeakKeyDictionary()
_observer_lock = threading.RLock()


def _unlock_in_child() -> None:
    # The one lock of this module, for every dispatcher: held at a fork by
    # another thread (inside start() or stop()), which the child does not
    # have, it would stay held there, and no dispatcher the child makes --
    # flux.h's safe course -- could be traced. Held by the forking thread
    # itself (a fork from inside a finalizer there), it is that thread's.
    if not _observer_lock._is_owned():  # type: ignore[attr-defined]
        _observer_lock._at_fork_reinit()  # type: ignore[attr-defined]


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_unlock_in_child)

_clock = time.perf_counter_ns
_thread = threading.get_native_id
# flux_status -> flux.Status, for dispatch_end: a dict lookup is some 30 ns
# of a traced dispatch's microseconds (Status(code) costs ten times that).
# A code this binding does not know stays an int.
_STATUSES: dict[int, Status] = {int(status): status for status in Status}


# The hooks are trampolines (see _native.trampoline): what escapes one is
# raised by the outermost call, and a hook interrupted before its last call,
# the append that is all it does (a signal that arrived in C, or one that
# landed while it computed the event), runs again, so that costs the trace
# no event.


def _trace(context: int | None) -> Trace | None:
    t = _native.objects[context or 0]
    return t if isinstance(t, Trace) else None


@_native.trampoline(rerun=True, effect_is_last_call=True)
def _on_dispatch_begin(context: int | None, payload: Any) -> None:
    t = _trace(context)
    if t is not None:
        t.events.append(TraceEvent("dispatch_begin", _clock(), _thread(), payload=payload))


@_native.trampoline(rerun=True, effect_is_last_call=True)
def _on_dispatch_end(context: int | None, payload: Any, status: int) -> None:
    t = _trace(context)
    if t is not None:
        t.events.append(
            TraceEvent("dispatch_end", _clock(), _thread(), payload=payload, status=_STATUSES.get(status, status))
        )


@_native.trampoline(rerun=True, effect_is_last_call=True)
def _on_callback_begin(context: int | None, token: int) -> None:
    t = _trace(context)
    if t is not None:
        t.events.append(TraceEvent("callback_begin", _clock(), _thread(), token=token, name=t._name(token)))


@_native.trampoline(rerun=True, effect_is_last_call=True)
def _on_callback_end(context: int | None, token: int, result: int) -> None:
    t = _trace(context)
    if t is not None:
        t.events.append(
            TraceEvent("callback_end", _clock(), _thread(), token=token, name=t._name(token), result=result)
        )


@_native.trampoline(rerun=True, effect_is_last_call=True)
def _on_wait_for(context: int | None, waiter: int, tokens: Any, count: int) -> None:
    t = _trace(context)
    if t is not None:
        values = tuple(int(tokens[i]) for i in range(count))
        t.events.append(
            TraceEvent(
                "wait_for",
                _clock(),
                _thread(),
                token=waiter,
                name=t._name(waiter),
                tokens=values,
                names=tuple(t._name(v) for v in values),
            )
        )


_HOOKS = _native.Observer(
    1,
    _native.Observer._fields_[1][1](_on_dispatch_begin),
    _native.Observer._fields_[2][1](_on_dispatch_end),
    _native.Observer._fields_[3][1](_on_callback_begin),
    _native.Observer._fields_[4][1](_on_callback_end),
    _native.Observer._fields_[5][1](_on_wait_for),
)


@dataclass
class _Node:
    """A dispatch or a callback in the rendered tree."""

    label: str
    begin: int
    end: int | None = None
    thread: int = 0
    outcome: str = ""
    #: In the order they happened: waits (str) and nested nodes.
    items: list[str | _Node] = field(default_factory=list)


class Trace(_native.Unshareable):
    """Records every event of ``dispatcher`` while active (a context
    manager, or :meth:`start` / :meth:`stop`). The dispatcher has one observer:
    starting a trace replaces any other. Events of a dispatch already running
    when the trace starts or stops go to whoever observed its start. Until it
    stops (or the dispatcher closes), a started trace is kept by the
    dispatcher's observer, and keeps the dispatcher alive in turn.
    Initializing a trace that observes again raises :class:`RuntimeError`
    (stop it first)."""

    def __init__(self, dispatcher: Dispatcher[Any]) -> None:
        """:raises TypeError: ``dispatcher`` is not a :class:`flux.Dispatcher`.
        :raises RuntimeError: this trace observes its dispatcher; nothing changed."""
        if not isinstance(dispatcher, Dispatcher):
            raise TypeError(f"Trace: expected a flux.Dispatcher, not {type(dispatcher).__name__}")
        with _observer_lock:  # no start() or stop() between the check and the change
            observed: Any = self.__dict__.get("dispatcher")  # the one of an earlier __init__
            if self.__dict__.get("_context") and self._observes(_observing.get(observed)):
                # Made anew, it would forget the observer it set: stop() could
                # no longer clear it, and the dispatcher would go on recording
                # into this trace, payloads and all, until it closed.
                raise RuntimeError("Trace: this trace is already started: stop() it before initializing it again")
            self.dispatcher = dispatcher
            #: Every event recorded, in order (:class:`TraceEvent`).
            self.events: list[TraceEvent] = []
            self._context = 0

    def _name(self, token: int) -> str:
        if not token:
            # libflux never issues 0: it is how Dispatcher.wait_for hands
            # libflux a token of another dispatcher (which it then refuses).
            return "a token of another dispatcher"
        return self.dispatcher.name_of(token) or f"token {token}"

    def _observes(self, cell: list[int] | None) -> bool:
        """Whether this trace is the dispatcher's observer now, ``cell``
        being the dispatcher's in _observing. Its context alone does not
        say: closing the dispatcher, or another trace's start, ends it, and
        its slot may then serve another trace. Under the lock."""
        context = self._context
        return bool(context) and cell is not None and cell[0] == context and _native.objects[context] is self

    def start(self) -> Trace:
        """Sets this trace as the dispatcher's observer (again, if another
        trace replaced it); nothing when it is the observer already.

        :raises InvalidArgumentError: the dispatcher is closed.
        """
        dispatcher = self.dispatcher
        # The trace this replaces, kept until the locks are let go: idle,
        # libflux lets go of it inside the call, and its finalizer (user
        # code) must not run holding them (other threads' calls wait on them).
        replaced: list[object] = []
        try:
            self._start(dispatcher, replaced)
        finally:
            replaced.clear()  # with the locks let go, also when it raised
        return self

    def _start(self, dispatcher: Dispatcher[Any], replaced: list[object]) -> None:
        # Under the lock Dispatcher.close() clears its handle with (as a
        # store's creation): either this sets the observer before, and
        # close() clears it, or this finds the dispatcher closed -- never an
        # observer of a closed dispatcher, kept (with it) by the registry.
        with _observer_lock, dispatcher._closing_lock:
            handle = dispatcher._handle
            if handle is None:
                # Checked first: a trace that was observing when the
                # dispatcher closed is not observing any more.
                raise InvalidArgumentError("Trace: the dispatcher is closed")
            cell = _observing.get(dispatcher)
            if self._observes(cell):
                return
            if cell is None:
                cell = _observing[dispatcher] = [0]
            elif cell[0]:
                replaced.append(_native.objects[cell[0]])
            hooks = byref(_HOOKS)
            error: BaseException | None = None
            # No out-parameter says whether libflux ran: `context` does, still
            # 0 when an interrupt was raised as add() returned (only `added`
            # has the slot then); from its store to the call there is no call.
            added = [0]
            context = 0
            try:
                context = _native.add(self, None, added)
                # No errcheck: it would raise what escaped on this thread (the
                # replaced trace's destroy interrupted, say) after libflux made
                # this trace the observer, before it was recorded.
                status = _native.flux_dispatcher_set_observer_raw(handle, hooks, context, _native.destroy_trampoline)
                if status:
                    error = _native.status_error(status)  # read at once, on this thread
            except ArgumentError as exc:
                _native.drop(context, self, _native.UNTOUCHED)  # libflux never ran (the recursion limit)
                raise _native.argument_error(exc) from None
            finally:
                # libflux holds the context exactly when its slot still holds
                # this trace (on failure it ran the destroy at once, which
                # freed it): recorded with no call, whatever comes out.
                if not context:
                    if added[0]:
                        _native.drop(added[0], self, _native.UNTOUCHED)  # libflux never ran
                elif _native.objects[context] is self:
                    self._context = context
                    cell[0] = context
            try:
                _native.raise_outcome(error)  # what escaped first, then the failure
            finally:
                error = None  # no exception -> traceback -> frame cycle

    def stop(self) -> None:
        """Clears the dispatcher's observer if it is still this trace; a
        trace another one replaced just stops recording. Once the dispatcher
        is closed (which cleared its observer) -- or, in a forked child,
        orphaned by a dispatch another thread of the parent was running --
        only forgets the trace."""
        if not self._context:
            return
        dispatcher = self.dispatcher
        with _observer_lock:
            cell = _observing.get(dispatcher)
            observing = self._observes(cell)
            handle = dispatcher._handle
            # Forgotten with no call between this and libflux's: an interrupt
            # comes before (nothing changed) or after libflux cleared it, as
            # does what its errcheck raises.
            self._context = 0
            # Not the observer (replaced, or the dispatcher closed, which
            # cleared its observer): whichever trace observes keeps on.
            if not observing or cell is None:
                return
            cell[0] = 0
            if handle is not None:
                try:
                    _native.flux_dispatcher_set_observer(handle, None, None, _native.NO_DESTROY)
                except AlreadyDispatchingError:
                    # Refused only in a forked child whose dispatch another
                    # thread of the parent ran (flux.h, "fork"): it never
                    # ends, so no event can come; forgotten, as when closed.
                    pass

    def __enter__(self) -> Trace:  # noqa: PYI034 -- no typing.Self before Python 3.11
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- the tree ------------------------------------------------------------

    def _tree(self) -> list[_Node]:
        roots: list[_Node] = []
        stacks: dict[int, list[_Node]] = {}
        for ev in self.events:
            stack = stacks.setdefault(ev.thread, [])
            if ev.kind == "dispatch_begin":
                node = _Node(f"dispatch {_short(ev.payload)}", ev.time_ns, thread=ev.thread)
                if stack:
                    stack[-1].items.append(node)  # another dispatcher, from a callback
                else:
                    roots.append(node)
                stack.append(node)
            elif ev.kind == "callback_begin":
                label = f"token {ev.token}"
                if ev.name != label:  # a registration with no name is named by its token
                    label = f"{ev.name} ({label})"
                node = _Node(label, ev.time_ns, thread=ev.thread)
                if stack:
                    stack[-1].items.append(node)
                else:
                    roots.append(node)
                stack.append(node)
            elif ev.kind in ("callback_end", "dispatch_end") and stack:
                node = stack.pop()
                node.end = ev.time_ns
                if ev.kind == "callback_end":
                    node.outcome = "" if ev.result == 0 else f"failed ({ev.result})"
                else:
                    node.outcome = "ok" if ev.status == 0 else f"failed ({_status_name(ev.status)})"
            elif ev.kind == "wait_for" and stack:
                stack[-1].items.append(", ".join(ev.names) or "nothing")
        return roots

    def render(self) -> str:
        """A readable tree: each dispatch with its duration and outcome; under
        it, its callbacks in the order they ran, each callback a wait_for ran
        nested under the callback that waited for it."""
        lines: list[str] = []

        def walk(node: _Node, prefix: str, last: bool, top: bool) -> None:
            took = _duration(node.begin, node.end)
            tail = f"  {took}" + (f"  {node.outcome}" if node.outcome else "")
            label = _printable(node.label)
            if top:
                lines.append(label + tail)
                child_prefix = ""
            else:
                lines.append(prefix + ("└─ " if last else "├─ ") + label + tail)
                child_prefix = prefix + ("   " if last else "│  ")
            for i, item in enumerate(node.items):
                is_last = i == len(node.items) - 1
                if isinstance(item, str):
                    lines.append(child_prefix + ("└─ " if is_last else "├─ ") + f"waits for {_printable(item)}")
                else:
                    walk(item, child_prefix, is_last, False)

        for root in self._tree():
            walk(root, "", True, True)
        return "\n".join(lines)

    def chrome_trace(self) -> dict[str, Any]:
        """The trace in the Trace Event Format: one complete ("X") event per
        dispatch and callback (nested callbacks are nested slices on the
        thread's track), and an instant ("i") event per wait_for. A dispatch
        or callback still running (the trace taken during a dispatch) is a
        begin ("B") event with no end: viewers show it unfinished."""
        out: list[dict[str, Any]] = []
        pid = os.getpid()
        open_: dict[int, list[TraceEvent]] = {}
        for ev in self.events:
            stack = open_.setdefault(ev.thread, [])
            if ev.kind in ("dispatch_begin", "callback_begin"):
                stack.append(ev)
            elif ev.kind in ("dispatch_end", "callback_end") and stack:
                begin = stack.pop()
                slice_ = _slice(begin, pid)
                slice_["ph"] = "X"
                slice_["dur"] = (ev.time_ns - begin.time_ns) / 1000
                if begin.kind == "dispatch_begin":
                    slice_["args"] = {"status": _status_name(ev.status)}
                else:
                    slice_["args"] = {"token": begin.token, "result": ev.result}
                out.append(slice_)
            elif ev.kind == "wait_for":
                out.append(
                    {
                        "name": _unicode(f"wait_for {', '.join(ev.names)}"),
                        "cat": "wait_for",
                        "ph": "i",
                        "s": "t",
                        "pid": pid,
                        "tid": ev.thread,
                        "ts": ev.time_ns / 1000,
                        "args": {"waiter": ev.token, "tokens": list(ev.tokens)},
                    }
                )
        # Still running: dropped, it would leave what ran inside it parentless.
        for stack in open_.values():
            for begin in stack:
                slice_ = _slice(begin, pid)
                slice_["ph"] = "B"
                slice_["args"] = {} if begin.kind == "dispatch_begin" else {"token": begin.token}
                out.append(slice_)
        # Parents before children at equal timestamps: viewers nest by order
        # (a slice still running outlasts any).
        out.sort(key=lambda e: (e["ts"], -e.get("dur", math.inf if e["ph"] == "B" else 0)))
        return {"traceEvents": out, "displayTimeUnit": "ms"}

    def write_chrome_trace(self, path: str | os.PathLike[str]) -> None:
        """Writes :meth:`chrome_trace` as JSON to ``path``: open it in
        https://ui.perfetto.dev or chrome://tracing."""
        with open(path, "w", encoding="utf-8") as f:
            json.dump(self.chrome_trace(), f, indent=1)
            f.write("\n")


def _slice(begin: TraceEvent, pid: int) -> dict[str, Any]:
    """The fields of a dispatch's or callback's slice that its begin gives."""
    if begin.kind == "dispatch_begin":
        name, cat = f"dispatch {_short(begin.payload)}", "dispatch"
    else:
        name, cat = begin.name or f"token {begin.token}", "callback"
    return {"name": _unicode(name), "cat": cat, "pid": pid, "tid": begin.thread, "ts": begin.time_ns / 1000}


def _unicode(text: str) -> str:
    """text as valid Unicode: a lone surrogate (a name or a repr may hold
    one) would reach the JSON as an escape strict parsers reject, and fail
    json.dump(ensure_ascii=False) to a UTF-8 file; escaped as repr() does."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _printable(text: str) -> str:
    """text on one line of a tree: a newline in a name or a repr would start
    a line with no tree prefix, a lone surrogate fail print(); escaped as
    repr() escapes them."""
    return text if text.isprintable() else "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def _short(payload: Any, limit: int = 60) -> str:
    try:
        text = repr(payload)
    except Exception:  # noqa: BLE001 -- a trace renders what it can
        text = f"<unrepresentable {type(payload).__name__}>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _duration(begin: int, end: int | None) -> str:
    if end is None:
        return "(unfinished)"
    ns = end - begin
    if ns < 10_000:
        return f"{ns / 1000:.1f} µs"
    if ns < 10_000_000:
        return f"{ns / 1000:.0f} µs"
    return f"{ns / 1_000_000:.1f} ms"


def _status_name(status: int | None) -> str:
    try:
        return Status(status).c_name if status else "FLUX_OK"
    except ValueError:
        return str(status)
