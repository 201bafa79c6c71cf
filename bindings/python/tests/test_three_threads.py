"""Three Python threads at once on one dispatcher, its stores, a group,
listeners, queued dispatches, a trace and registered stores, doing random
documented operations -- closing stores, the group, the trace and the
dispatcher itself while the others go on (the cross-thread matrix of
test_crossthread.py has one other thread only).

Each seeded round runs in a process of its own (a deadlock holding the GIL
would stop any watchdog here; a crash cannot end the suite) with a
faulthandler watchdog, and checks, with its own bookkeeping:

- no crash, no hang (the round ends within its time);
- every exception a call raised is one its docstring documents for it;
- every successful dispatch reached the first registration exactly once,
  and every listener of a store present for that whole dispatch exactly
  once (a payload that ran twice, or was lost, fails);
- every enqueued payload whose call returned ran exactly once;
- once everything is closed and collected: no callable handed to flux is
  alive (weak references), no registry slot is filled or lost, no stray
  callback or destroy ran (each destroy exactly once), nothing is left
  for an outermost call to raise.

Each of those assertions fails on the defect it names; the round's own
counts (operations done, refusals seen) also fail when the threads did not
actually overlap.
"""

from __future__ import annotations

import pytest
from on_threads import run_in_own_process

ROUND = r"""
import faulthandler, gc, random, sys, threading, time, weakref
faulthandler.dump_traceback_later(40, exit=True)  # a hang prints every stack
import flux
from flux import _native, stores as stores_module
from flux.dispatcher import live_callbacks

SEED = {seed}
rng0 = random.Random(SEED)
sys.setswitchinterval(rng0.choice([1e-6, 5e-5, 1e-3]))

class Boom(Exception):
    pass

E = flux.InvalidArgumentError
# call -> the exceptions its docstring documents in these conditions (a
# closed dispatcher or store, a dispatch running elsewhere, our own Boom).
DOCUMENTED = {{
    "dispatch": (E, Boom),
    "enqueue": (E, Boom),
    "register": (E,),
    "unregister": (E, flux.UnknownTokenError),
    "add_listener": (E,),
    "remove": (E, flux.UnknownTokenError),
    "store_close": (flux.AlreadyDispatchingError, E),
    "group": (E,),
    "release": (),
    "register_store": (E,),
    "store": (E, flux.UnknownStoreError),
    "trace_start": (E,),
    "trace_stop": (),
    "d_close": (flux.AlreadyDispatchingError,),
    "wait_for": (E, flux.NotDispatchingError),
}}

lock = threading.Lock()
seen = {{}}           # (kind, key) -> count; kind "witness" or ("listener", id)
weak = []            # weak references to every callable handed to flux
listener_runs = {{}}  # listener id -> list of payloads it saw
undocumented = []
done_ops = {{}}
successes = []       # (payload, the stores open right after, listeners present before and after)
enqueued_ok = []
errors_given = []

def note(kind, key):
    with lock:
        seen[(kind, key)] = seen.get((kind, key), 0) + 1

d = flux.Dispatcher()

def witness(payload):  # registered first: sees every dispatch before anything fails it
    note("witness", payload)
    if isinstance(payload, tuple) and payload[-1] == "boom":
        raise Boom(payload)
weak.append(weakref.ref(witness))
d.register(witness, name="witness")

class Latest(flux.ReduceStore):
    # Its state is the payload: every dispatch changes it.
    def get_initial_state(self):
        return None
    def reduce(self, state, action):
        return action

class Users(Latest):
    pass

class Log(flux.Store):
    def on_dispatch(self, payload):
        self.last = payload
        self.emit_change()

stores = [Latest(d), Latest(d), Log(d), d.register_store(Users)]
permanent = {{}}  # store index -> listener ids added at the start, never removed

def make_listener(lid, store):
    def listener():
        payload = store.state if isinstance(store, flux.ReduceStore) else store.last
        with lock:
            listener_runs.setdefault(lid, []).append(payload)
    weak.append(weakref.ref(listener))
    return listener

next_lid = [0]
def new_lid():
    with lock:
        next_lid[0] += 1
        return next_lid[0]

for i, s in enumerate(stores):
    permanent[i] = []
    for _ in range(2):
        lid = new_lid()
        s.add_listener(make_listener(lid, s))
        permanent[i].append(lid)
group_runs = []
def group_fn():
    group_runs.append(1)
weak.append(weakref.ref(group_fn))
groups = [flux.StoreGroup([stores[0], stores[1]], group_fn)]
del group_fn
trace = flux.Trace(d)
trace.start()

stop = threading.Event()

def attempt(name, fn, *args):
    try:
        result = fn(*args)
    except BaseException as exc:
        if not isinstance(exc, DOCUMENTED[name]):
            undocumented.append((name, repr(exc)))
        with lock:
            done_ops[(name, type(exc).__name__)] = done_ops.get((name, type(exc).__name__), 0) + 1
        return False, exc
    with lock:
        done_ops[(name, "ok")] = done_ops.get((name, "ok"), 0) + 1
    return True, result

def worker(n):
    rng = random.Random(SEED * 10 + n)
    mine_tokens, mine_subs = [], []
    count = 0
    while not stop.is_set():
        count += 1
        op = rng.random()
        boom = rng.random() < 0.05
        payload = (n, count, "boom") if boom else (n, count)
        if op < 0.30:
            before = [not s.closed for s in stores]
            ok, exc = attempt("dispatch", d.dispatch, payload)
            after = [not s.closed for s in stores]
            if ok:
                successes.append((payload, [a and b for a, b in zip(before, after)]))
            elif boom and isinstance(exc, Boom):
                pass
        elif op < 0.42:
            def on_error(exc):
                errors_given.append(exc)
            ok, _ = attempt("enqueue", d.enqueue, payload + ("queued",) if not boom else payload, on_error)
            if ok and not boom:
                enqueued_ok.append(payload + ("queued",))
            del on_error
        elif op < 0.50:
            def cb(p):
                note("extra", p)
            weak.append(weakref.ref(cb))
            ok, token = attempt("register", d.register, cb)
            if ok:
                mine_tokens.append(token)
            del cb
        elif op < 0.56 and mine_tokens:
            attempt("unregister", d.unregister, mine_tokens.pop(rng.randrange(len(mine_tokens))))
        elif op < 0.64:
            i = rng.randrange(len(stores))
            lid = new_lid()
            ok, sub = attempt("add_listener", stores[i].add_listener, make_listener(lid, stores[i]))
            if ok:
                mine_subs.append(sub)
        elif op < 0.70 and mine_subs:
            attempt("remove", mine_subs.pop(rng.randrange(len(mine_subs))).remove)
        elif op < 0.73:
            ok, _ = attempt("wait_for", d.wait_for, [stores[0]])
            assert not ok, "wait_for outside a dispatch returned"
        elif op < 0.76:
            attempt("register_store", d.register_store, Users)
            attempt("store", d.store, Users)
        elif op < 0.80:
            g = groups[-1]
            if rng.random() < 0.5:
                attempt("release", g.release)
            else:
                def fn():
                    group_runs.append(1)
                weak.append(weakref.ref(fn))
                ok, made = attempt("group", flux.StoreGroup, [stores[rng.randrange(2)], stores[3]], fn)
                if ok:
                    groups.append(made)
                del fn
        elif op < 0.84:
            if rng.random() < 0.5:
                attempt("trace_start", trace.start)
            else:
                attempt("trace_stop", trace.stop)
        elif op < 0.86 and count > 40:
            # Closing a store while the others dispatch (refused while one
            # runs, or while it is in a live group: both documented).
            i = rng.randrange(len(stores))
            attempt("store_close", stores[i].close)
        elif op < 0.862 and count > 300:
            attempt("d_close", d.close)
        time.sleep(0)

threads = [threading.Thread(target=worker, args=(n,)) for n in range(3)]
for t in threads:
    t.start()
time.sleep({seconds})
stop.set()
for t in threads:
    t.join(20)
    assert not t.is_alive(), "a worker hung"

# Bookkeeping checks, before close
assert not undocumented, undocumented[:10]
ok_dispatches = done_ops.get(("dispatch", "ok"), 0)
assert ok_dispatches > 20, done_ops
witness_count = {{key: c for (kind, key), c in seen.items() if kind == "witness"}}
for payload, open_throughout in successes:
    assert witness_count.get(payload) == 1, (payload, witness_count.get(payload))
    for i, is_open in enumerate(open_throughout):
        if not is_open:
            continue
        for lid in permanent[i]:
            runs = listener_runs.get(lid, []).count(payload)
            assert runs == 1, ("listener", i, lid, payload, runs)
for payload in enqueued_ok:
    # Queued or run at once; either way run exactly once -- unless the
    # dispatcher was closed before a queued one ran, which close() refuses.
    assert witness_count.get(payload) == 1, ("enqueued", payload, witness_count.get(payload))
for lid, payloads in listener_runs.items():
    assert len(payloads) == len(set(payloads)), ("a listener ran twice in one emit", lid)
exc = None
for exc in errors_given:
    assert isinstance(exc, Boom), exc

d.close()
for g in groups:
    g.release()
for s in stores:
    s.close()
trace.stop()
# Exceptions (their tracebacks hold the workers' frames) and our own names go.
del stores, groups, trace, s, g, successes, witness, errors_given, exc
gc.collect()
alive = [w() for w in weak if w() is not None]
assert not alive, alive[:5]
assert live_callbacks(d) == 0
assert stores_module.live_objects() == 0, _native.objects
assert all(o is None for o in _native.objects), _native.objects
lost = len(_native.objects) - 1 - len(_native.free_contexts)
assert lost == 0, ("registry slots lost", lost)
assert _native.stray == {{"callback": 0, "destroy": 0}}, _native.stray
assert not _native.escaped, _native.escaped
faulthandler.cancel_dump_traceback_later()
print("ok", sorted(done_ops.items()))
"""


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_three_threads_share_a_dispatcher_its_stores_a_group_and_a_trace(seed: int) -> None:
    result = run_in_own_process(ROUND.format(seed=seed, seconds=1.0), timeout=60)
    assert result.returncode == 0, result.stderr[-4000:] + result.stdout[-2000:]
    assert result.stdout.startswith("ok"), result.stdout
    assert result.stderr == "", result.stderr[-4000:]


RING = r"""
import faulthandler, threading
faulthandler.dump_traceback_later(30, exit=True)
import flux

# Three dispatchers in a ring: thread i dispatches ring[i], whose callback
# waits until all three are inside their dispatch and then dispatches
# ring[i + 1] -- each would wait for the next for good. README: "the
# flux_dispatch whose wait would close the cycle fails with
# FLUX_ERR_ALREADY_DISPATCHING; the others go on".
for round_ in range({rounds}):
    ring = [flux.Dispatcher() for _ in range(3)]
    inside = threading.Barrier(3)
    outcome = {{}}
    ran = []
    for i, d in enumerate(ring):
        def callback(payload, i=i):
            if payload == "inner":
                ran.append(i)
                return
            inside.wait(10)
            try:
                ring[(i + 1) % 3].dispatch("inner")
                outcome[i] = "ok"
            except flux.AlreadyDispatchingError:
                outcome[i] = "refused"
        d.register(callback)
    def run(i):
        ring[i].dispatch("outer")
    threads = [threading.Thread(target=run, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(15)
        assert not t.is_alive(), ("hung", round_, outcome)
    assert sorted(outcome) == [0, 1, 2], outcome
    refused = [i for i, o in outcome.items() if o == "refused"]
    assert len(refused) >= 1, outcome  # else it deadlocked (caught above) or ran a cycle
    assert sorted(ran) == sorted((i + 1) % 3 for i, o in outcome.items() if o == "ok"), (ran, outcome)  # each once
    for d in ring:
        assert not d.is_dispatching
        d.dispatch("inner")  # idle and usable
        d.close()
faulthandler.cancel_dump_traceback_later()
print("ok")
"""


def test_three_threads_dispatching_a_ring_of_dispatchers_refuse_the_dispatch_closing_the_cycle() -> None:
    # Guards the cross-thread deadlock detection with a cycle of three
    # (test_crossthread has two threads): a hang here is the deadlock, a
    # round with no refusal a cycle that was run.
    result = run_in_own_process(RING.format(rounds=30), timeout=60)
    assert result.returncode == 0, result.stderr[-4000:]
    assert result.stdout == "ok\n", result.stdout
    assert result.stderr == "", result.stderr[-4000:]
