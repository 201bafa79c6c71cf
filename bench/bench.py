"""bench.py -- the Python benchmark of libflux (`make bench`).

In one process, the cost per callback of a dispatch to N = 1, 10, 100
trivial Python callbacks:

  flux      flux.Dispatcher.dispatch(payload), callbacks `def cb(payload): pass`
            -- the binding as users run it: one CFUNCTYPE trampoline, a dict
            lookup by context, the exception protocol, the errcheck.
  bare      the floor for any ctypes binding: a C function calling Python
            CFUNCTYPE callbacks that do nothing. The C caller is libflux itself:
            N raw CFUNCTYPE(c_int, c_void_p, c_void_p) no-ops (`return 0`),
            registered through the C ABI with no binding code around them, and
            flux_dispatch called through its own ctypes prototype with no
            errcheck, holding the GIL (ctypes.PyDLL), as the binding does
            when no other thread is in a dispatch: the trampolines then take
            no GIL handoff. libflux's own cost per callback is a few ns (see
            the C bench), so this is the ctypes round trip: argument
            conversion, Python call, result conversion. (ctypes' qsort trick
            would do the same, but calls the comparator ~N log N times with a
            data-dependent count; libflux calls each callback exactly once.)
  floor     the least a binding of this design can cost: a Python method
            passing id(payload) to flux_dispatch (holding the GIL) and
            testing the status, and
            one module-level CFUNCTYPE trampoline calling the callback it
            finds in a list by the context -- with no exception handling, no
            closed check, nothing else. flux / floor is what the binding's own
            code costs; floor / bare is what the design costs (one more
            Python call per callback, id() and a second pointer argument per
            dispatch).
  let go    floor, but letting go of the GIL for the call (ctypes.CDLL), as
            every dispatch of the binding did before it kept the GIL (now
            only one that waits for another thread's does): the design floor
            the target was first set against. flux / let go is the gain.
  python    a pure-Python Dispatcher with Facebook's algorithm (isPending /
            isHandled, waitFor), as Dispatcher.js does it.
  blinker   blinker's Signal.send, the common pure-Python signal library
            (receivers connected with weak=False).

Timed with time.perf_counter_ns in rounds: each round times every variant
once, back to back. The ns figures are each variant's best (minimum) round.
The ratios are the median over rounds of the ratio within a round: this host
drifts between fast and slow spells lasting seconds, and two timings taken
next to each other share the spell, where two separate minimums may not.
The target is flux <= 1.05 x floor at every N: what the binding's own
code adds on top of what its design costs (flux / bare is shown too; the
design's extra Python call per callback puts floor at ~1.45-1.6 x bare). This is a measurement, not a test: it always
exits 0 unless something could not be measured.

    make bench     (or: PYTHONPATH=bindings/python python3 bench/bench.py)
    FLUX_BENCH_REPEATS=21 FLUX_BENCH_CALLBACKS=50000 to tune (rounds, and
    callbacks per variant per round).
"""

from __future__ import annotations

import ctypes
import gc
import os
import statistics
import sys
import time
from ctypes import CFUNCTYPE, POINTER, byref, c_int, c_uint64, c_void_p
from typing import Any, Callable

import flux
from flux import _native

SIZES = (1, 10, 100)
REPEATS = int(os.environ.get("FLUX_BENCH_REPEATS", "21"))
CALLBACKS_PER_RUN = int(os.environ.get("FLUX_BENCH_CALLBACKS", "50000"))
TARGET = 1.05


# -- (b) pure-Python Flux: Facebook's Dispatcher.js ---------------------------


class PyDispatcher:
    """Facebook's Dispatcher, line by line, in Python."""

    def __init__(self) -> None:
        self._callbacks: dict[int, Callable[[Any], object]] = {}
        self._is_dispatching = False
        self._is_handled: dict[int, bool] = {}
        self._is_pending: dict[int, bool] = {}
        self._last_id = 0
        self._pending_payload: Any = None

    def register(self, callback: Callable[[Any], object]) -> int:
        self._last_id += 1
        self._callbacks[self._last_id] = callback
        return self._last_id

    def unregister(self, token: int) -> None:
        if token not in self._callbacks:
            raise KeyError(token)
        del self._callbacks[token]

    def wait_for(self, ids: list[int]) -> None:
        if not self._is_dispatching:
            raise RuntimeError("wait_for must be invoked while dispatching")
        for token in ids:
            if self._is_pending.get(token):
                if not self._is_handled.get(token):
                    raise RuntimeError(f"circular dependency waiting for {token}")
                continue
            if token not in self._callbacks:
                raise KeyError(token)
            self._invoke_callback(token)

    def dispatch(self, payload: Any) -> None:
        if self._is_dispatching:
            raise RuntimeError("cannot dispatch in the middle of a dispatch")
        self._start_dispatching(payload)
        try:
            for token in self._callbacks:
                if self._is_pending[token]:
                    continue
                self._invoke_callback(token)
        finally:
            self._stop_dispatching()

    def _invoke_callback(self, token: int) -> None:
        self._is_pending[token] = True
        self._callbacks[token](self._pending_payload)
        self._is_handled[token] = True

    def _start_dispatching(self, payload: Any) -> None:
        for token in self._callbacks:
            self._is_pending[token] = False
            self._is_handled[token] = False
        self._pending_payload = payload
        self._is_dispatching = True

    def _stop_dispatching(self) -> None:
        self._pending_payload = None
        self._is_dispatching = False


# -- the variants: each returns a zero-argument "one dispatch" function -------------


def cb(payload: Any) -> None:
    pass


def setup_flux(n: int, keep: list[Any]) -> Callable[[], None]:
    d: flux.Dispatcher[Any] = flux.Dispatcher()
    keep.append(d)
    for _ in range(n):
        d.register(cb)
    dispatch = d.dispatch
    payload = object()
    return lambda: dispatch(payload)


RAW_CALLBACK = CFUNCTYPE(c_int, c_void_p, c_void_p)


def raw_noop(context: Any, payload: Any) -> int:
    return 0


RAW_NOOP = RAW_CALLBACK(raw_noop)  # lives as long as the module


def setup_bare(n: int, keep: list[Any]) -> Callable[[], None]:
    # A second handle on the library, so these prototypes are separate from
    # the binding's (no errcheck, plain void* payload).
    lib = ctypes.PyDLL(flux.library_path)
    create = lib.flux_dispatcher_create
    create.argtypes, create.restype = (), c_void_p
    register = lib.flux_register
    register.argtypes = (c_void_p, RAW_CALLBACK, c_void_p, c_void_p, POINTER(c_uint64))
    register.restype = c_int
    destroy = lib.flux_dispatcher_destroy
    destroy.argtypes, destroy.restype = (c_void_p,), c_int
    dispatch = lib.flux_dispatch
    dispatch.argtypes, dispatch.restype = (c_void_p, c_void_p), c_int

    handle = create()
    token = c_uint64()
    for _ in range(n):
        if register(handle, RAW_NOOP, None, None, byref(token)) != 0:
            raise SystemExit("bench: flux_register failed: " + _native.last_error())
    keep.append(_Closer(lambda: destroy(handle)))

    if dispatch(handle, None) != 0:
        raise SystemExit("bench: flux_dispatch failed: " + _native.last_error())
    return lambda: dispatch(handle, None)


_floor_callbacks: list[Any] = [None]


def floor_trampoline(context: int, payload: Any) -> int:
    _floor_callbacks[context](payload)
    return 0


FLOOR_CALLBACK = CFUNCTYPE(c_int, c_void_p, ctypes.py_object)(floor_trampoline)


class FloorDispatcher:
    __slots__ = ("_handle",)

    def __init__(self, handle: int) -> None:
        self._handle = handle

    def dispatch(self, payload: Any) -> None:
        if _floor_dispatch(self._handle, id(payload)):
            raise RuntimeError("flux_dispatch failed")


_floor_lib = ctypes.PyDLL(flux.library_path)
_floor_dispatch = _floor_lib.flux_dispatch
_floor_dispatch.argtypes, _floor_dispatch.restype = (c_void_p, c_void_p), c_int
_letgo_dispatch = ctypes.CDLL(flux.library_path).flux_dispatch
_letgo_dispatch.argtypes, _letgo_dispatch.restype = (c_void_p, c_void_p), c_int


class LetGoDispatcher(FloorDispatcher):
    __slots__ = ()

    def dispatch(self, payload: Any) -> None:
        if _letgo_dispatch(self._handle, id(payload)):
            raise RuntimeError("flux_dispatch failed")


def setup_letgo(n: int, keep: list[Any]) -> Callable[[], None]:
    return setup_floor(n, keep, LetGoDispatcher)


def setup_floor(n: int, keep: list[Any], kind: type[FloorDispatcher] = FloorDispatcher) -> Callable[[], None]:
    create = _floor_lib.flux_dispatcher_create
    create.argtypes, create.restype = (), c_void_p
    register = _floor_lib.flux_register
    register.argtypes = (c_void_p, type(FLOOR_CALLBACK), c_void_p, c_void_p, POINTER(c_uint64))
    register.restype = c_int
    destroy = _floor_lib.flux_dispatcher_destroy
    destroy.argtypes, destroy.restype = (c_void_p,), c_int
    handle = create()
    token = c_uint64()
    _floor_callbacks.append(cb)
    context = len(_floor_callbacks) - 1
    for _ in range(n):
        if register(handle, FLOOR_CALLBACK, context, None, byref(token)) != 0:
            raise SystemExit("bench: flux_register failed: " + _native.last_error())
    keep.append(_Closer(lambda: destroy(handle)))
    dispatch = kind(handle).dispatch
    payload = object()
    return lambda: dispatch(payload)


class _Closer:
    def __init__(self, close: Callable[[], object]) -> None:
        self.close = close


def setup_python(n: int, keep: list[Any]) -> Callable[[], None]:
    d = PyDispatcher()
    for _ in range(n):
        d.register(cb)
    dispatch = d.dispatch
    payload = object()
    return lambda: dispatch(payload)


def setup_blinker(n: int, keep: list[Any]) -> Callable[[], None] | None:
    try:
        import blinker
    except ImportError:
        return None
    signal = blinker.Signal()
    receivers = []
    for _ in range(n):
        # A distinct function per receiver (blinker keys receivers by identity).
        def receiver(sender: Any) -> None:
            pass

        receivers.append(receiver)
        signal.connect(receiver, weak=False)
    keep.append(receivers)
    send = signal.send
    payload = object()
    return lambda: send(payload)


# -- timing ------------------------------------------------------------------


def time_loop(one: Callable[[], None], loops: int) -> int:
    rng = range(loops)
    start = time.perf_counter_ns()
    for _ in rng:
        one()
    return time.perf_counter_ns() - start


def empty() -> None:
    pass


def measure(variants: dict[str, Callable[[], None]], loops: int, units: int) -> tuple[
    dict[str, float], dict[str, float], dict[str, tuple[float, float]]
]:
    """Times every variant once per round, REPEATS rounds, each preceded by an
    empty loop whose time is subtracted. Returns each variant's best ns per
    unit, and for each variant but flux the median over rounds of
    flux / variant within the round, and the lowest and highest of them."""
    for one in variants.values():  # warm up
        time_loop(one, loops // 10 + 1)
    rounds: list[dict[str, float]] = []
    gc_was = gc.isenabled()
    gc.disable()
    try:
        for _ in range(REPEATS):
            empty_ns = time_loop(empty, loops)
            rounds.append(
                {name: max(time_loop(one, loops) - empty_ns, 1) / (loops * units) for name, one in variants.items()}
            )
    finally:
        if gc_was:
            gc.enable()
    best = {name: min(r[name] for r in rounds) for name in variants}
    each = {name: [r["flux"] / r[name] for r in rounds] for name in variants if name != "flux"}
    ratio = {name: statistics.median(values) for name, values in each.items()}
    spread = {name: (min(values), max(values)) for name, values in each.items()}
    return best, ratio, spread


def main() -> int:
    print(f"python bench: libflux {flux.library_version_string} at {flux.library_path}")
    print(
        f"  Python {sys.version.split()[0]}; {REPEATS} rounds of ~{CALLBACKS_PER_RUN} callbacks"
        " per variant, interleaved"
    )
    print("  ns per callback: best round (the loop's own cost subtracted);")
    print("  ratios: flux / other, the median of the ratios within a round; vs floor also (lowest-highest)")
    print()
    header = (
        f"  {'N':>4}  {'flux':>7}  {'let go':>7}  {'bare':>7}  {'floor':>7}  {'python':>7}  {'blinker':>7}"
        f"   {'vs let go':>9}  {'vs bare':>7}  {'vs floor':>19}  {'vs python':>9}  {'vs blinker':>10}"
    )
    print(header)
    blinker_missing = False
    misses = 0
    keep: list[Any] = []
    for n in SIZES:
        loops = max(CALLBACKS_PER_RUN // n, 1000)
        variants: dict[str, Callable[[], None]] = {
            "flux": setup_flux(n, keep),
            "letgo": setup_letgo(n, keep),
            "bare": setup_bare(n, keep),
            "floor": setup_floor(n, keep),
            "python": setup_python(n, keep),
        }
        blink = setup_blinker(n, keep)
        if blink is None:
            blinker_missing = True
        else:
            variants["blinker"] = blink
        ns, ratio, spread = measure(variants, loops, n)
        low, high = spread["floor"]
        blinker_ns = f"{ns['blinker']:7.1f}" if "blinker" in ns else f"{'-':>7}"
        blinker_ratio = f"{ratio['blinker']:9.2f}x" if "blinker" in ratio else f"{'-':>10}"
        print(
            f"  {n:>4}  {ns['flux']:7.1f}  {ns['letgo']:7.1f}  {ns['bare']:7.1f}  {ns['floor']:7.1f}  {ns['python']:7.1f}"
            f"  {blinker_ns}   {ratio['letgo']:8.2f}x  {ratio['bare']:6.2f}x  {ratio['floor']:6.2f}x ({low:4.2f}-{high:4.2f})"
            f"  {ratio['python']:8.2f}x  {blinker_ratio}"
        )
        if ratio["floor"] > TARGET:
            misses += 1
    # The fixed cost of one dispatch with no callback: what N = 1 pays on top.
    ns, ratio, spread = measure(
        {
            "flux": setup_flux(0, keep),
            "letgo": setup_letgo(0, keep),
            "bare": setup_bare(0, keep),
            "floor": setup_floor(0, keep),
        },
        CALLBACKS_PER_RUN,
        1,
    )
    print(
        f"  {0:>4}  {ns['flux']:7.1f}  {ns['letgo']:7.1f}  {ns['bare']:7.1f}  {ns['floor']:7.1f}  {'':7}  {'':7}"
        f"   {ratio['letgo']:8.2f}x  {ratio['bare']:6.2f}x  {ratio['floor']:6.2f}x"
        f" ({spread['floor'][0]:4.2f}-{spread['floor'][1]:4.2f})"
        "   (ns per dispatch, no callback: the fixed cost)"
    )
    if ratio["floor"] > TARGET:
        misses += 1
    print()
    print(
        f"  target: flux <= {TARGET}x floor at every N and with none: "
        + ("ok" if misses == 0 else f"MISSED at {misses} of {len(SIZES) + 1}")
    )
    if blinker_missing:
        print("  blinker: not installed")
    for item in keep:
        if isinstance(item, flux.Dispatcher):
            item.close()
        elif isinstance(item, _Closer):
            item.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
