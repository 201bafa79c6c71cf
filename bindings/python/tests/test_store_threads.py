"""A Python store used from several threads: every method may be called from
any thread, and none ever reaches freed memory. Each race runs in a process
of its own, so a crash fails the test instead of ending the run."""

from __future__ import annotations

from on_threads import run_in_own_process


def test_reading_state_while_another_thread_dispatches_always_gets_a_live_state() -> None:
    result = run_in_own_process(
        """
        import collections, threading, time
        import flux

        class Box:
            __slots__ = ("n",)
            def __init__(self, n):
                self.n = n

        class Other:  # the same size as a Box: takes the memory of a freed one
            __slots__ = ("m",)
            def __init__(self):
                self.m = -1

        junk = collections.deque(maxlen=1000)

        class Counter(flux.ReduceStore):
            def get_initial_state(self):
                return Box(0)
            def reduce(self, state, action):
                return Box(state.n + 1)  # a new object each time: the old one is freed

        d = flux.Dispatcher()
        store = Counter(d)
        stop = threading.Event()
        bad = []
        reads = [0]

        def reader():
            last = 0
            while not stop.is_set():
                state = store.state
                if type(state) is not Box or not last <= state.n:
                    bad.append(repr(state))
                    return
                last = state.n
                reads[0] += 1

        thread = threading.Thread(target=reader)
        thread.start()
        deadline = time.monotonic() + 1.5
        while time.monotonic() < deadline:
            for _ in range(200):
                d.dispatch("inc")
                junk.append(Other())
        stop.set()
        thread.join()
        assert not bad, bad
        assert reads[0] > 0 and store.state.n > 0
        d.close()
        print("ok")
        """
    )
    assert result.returncode == 0, (result.returncode, result.stderr[-2000:])
    assert result.stdout == "ok\n"


def test_store_calls_racing_close_on_another_thread_never_crash() -> None:
    # close() on one thread while others add and remove listeners and read the
    # state: each call either works or raises the closed error.
    result = run_in_own_process(
        """
        import threading, time
        import flux

        class Counter(flux.ReduceStore):
            def get_initial_state(self):
                return 0
            def reduce(self, state, action):
                return state + 1

        unexpected = []

        def hammer(store, started):
            started.set()
            while True:
                try:
                    sub = store.add_listener(lambda: None)
                    store.state
                    sub.remove()
                except flux.InvalidArgumentError as exc:
                    if "closed" not in str(exc):
                        unexpected.append(exc)
                    return
                except BaseException as exc:
                    unexpected.append(exc)
                    return

        deadline = time.monotonic() + 1.5
        rounds = 0
        while time.monotonic() < deadline:
            d = flux.Dispatcher()
            store = Counter(d)
            d.dispatch("inc")
            started = [threading.Event() for _ in range(3)]
            threads = [threading.Thread(target=hammer, args=(store, s)) for s in started]
            for t in threads:
                t.start()
            for s in started:
                s.wait()
            store.close()
            for t in threads:
                t.join()
            d.close()
            rounds += 1
        assert not unexpected, unexpected
        assert rounds > 0
        print("ok")
        """
    )
    assert result.returncode == 0, (result.returncode, result.stderr[-2000:])
    assert result.stdout == "ok\n"


def test_reading_state_while_the_store_is_closed_and_made_again_returns() -> None:
    # A reader that took the store's held states just before another thread
    # closed the store and initialized it again looked for the new C store's
    # state among the old store's states, found it never, and looped for
    # good (holding the store's lock). The reader is held, deterministically,
    # at its first look at the escaped-exception flag, right after it took them.
    result = run_in_own_process(
        """
        import os, threading
        import flux
        from flux import stores

        class Counter(flux.ReduceStore):
            def get_initial_state(self):
                return 0
            def reduce(self, state, action):
                return state + 1

        main = threading.get_ident()
        reached, go = threading.Event(), threading.Event()

        class Gate:
            @property
            def up(self):
                if threading.get_ident() != main and not reached.is_set():
                    reached.set()
                    go.wait()
                return False

        d = flux.Dispatcher()
        store = Counter(d)
        d.dispatch("inc")
        stores._left_over = Gate()
        outcome = []

        def read():
            try:
                outcome.append(store.state)
            except flux.InvalidArgumentError as exc:
                outcome.append(type(exc))

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        reached.wait()
        store.close()
        Counter.__init__(store, d)  # its state, 0, is not the old one, 1
        go.set()
        reader.join(timeout=5)
        if reader.is_alive():
            print("stuck")
            os._exit(1)
        print(outcome)
        """
    )
    assert result.stdout == "[0]\n", (result.returncode, result.stdout, result.stderr[-2000:])


def test_a_call_that_read_the_lock_before_a_close_and_a_new_init_excludes_the_new_close() -> None:
    # A store closed and initialized again was given a new lock: a reader
    # that had read the old one before (held here, deterministically, between
    # reading it and taking it) took it after the new init and called into
    # the new native store under it -- while any other thread could take the
    # new lock and close (free) that store. At the reader's call into the
    # native store, another thread tries the store's lock: it must not get it.
    result = run_in_own_process(
        """
        import os, threading
        import flux
        from flux import stores

        class Counter(flux.ReduceStore):
            def get_initial_state(self):
                return 0
            def reduce(self, state, action):
                return state + 1

        d = flux.Dispatcher()
        store = Counter(d)
        store.close()
        reader = []
        reached, go = threading.Event(), threading.Event()

        class Gate:  # the store's lock, holding the reader before it takes it
            def __init__(self, lock):
                self.lock = lock
            def __enter__(self):
                if threading.get_ident() in reader and not reached.is_set():
                    reached.set()
                    go.wait()
                return self.lock.__enter__()
            def __exit__(self, *exc):
                return self.lock.__exit__(*exc)

        store._lock = Gate(store._lock)
        real_state = stores._flux_store_state
        seen = []

        def state_call(handle):
            if threading.get_ident() in reader and not seen:
                def try_close():
                    lock = getattr(store._lock, "lock", store._lock)  # the Gate's, or a new lock
                    if lock.acquire(blocking=False):
                        try:
                            store.close()
                            seen.append("closed under the reader")
                        finally:
                            lock.release()
                    else:
                        seen.append("waited")
                other = threading.Thread(target=try_close)
                other.start()
                other.join()
            return real_state(handle)

        stores._flux_store_state = state_call
        outcome = []

        def read():
            reader.append(threading.get_ident())
            try:
                outcome.append(store.state)
            except flux.InvalidArgumentError as exc:
                outcome.append(type(exc).__name__)

        thread = threading.Thread(target=read, daemon=True)
        thread.start()
        reached.wait()
        Counter.__init__(store, d)
        go.set()
        thread.join(timeout=10)  # a read of the freed store may loop for good
        print(seen, outcome, "stuck" if thread.is_alive() else "")
        os._exit(0)
        """
    )
    assert result.stdout == "['waited'] [0] \n", (result.returncode, result.stdout, result.stderr[-2000:])


_GATED_CLOSE = """
import os, threading
import flux
from flux import stores

class Counter(flux.ReduceStore):
    def get_initial_state(self):
        return 0
    def reduce(self, state, action):
        return state + 1

d = flux.Dispatcher()
store = Counter(d)
closer, maker = [], []
inside, progress, go = threading.Event(), threading.Event(), threading.Event()

class Gate:  # a lock that tells when the maker is about to take it
    def __init__(self, lock):
        self.lock = lock
    def __enter__(self):
        if threading.get_ident() in maker:
            progress.set()
        return self.lock.__enter__()
    def __exit__(self, *exc):
        return self.lock.__exit__(*exc)

def gated(real):  # holds the closer once libflux has destroyed what it closes
    def call(handle):
        status = real(handle)
        if threading.get_ident() in closer:
            inside.set()
            go.wait()
        return status
    return call

def run(close, make):
    def closing():
        closer.append(threading.get_ident())
        close()
    def making():
        maker.append(threading.get_ident())
        make()
        progress.set()  # made without waiting for the close
    one = threading.Thread(target=closing)
    one.start()
    inside.wait()
    two = threading.Thread(target=making)
    two.start()
    progress.wait()  # made, or about to wait for the close to finish
    go.set()
    one.join()
    two.join()
"""


def test_a_store_made_again_while_another_thread_closes_it_is_made_after_that_close() -> None:
    # The new init did not wait for a close() running on another thread,
    # whose clean-up then undid the new store's records: `state` looked for
    # the new C store's state among emptied held states, for good (holding
    # the lock), and the dispatcher's close() no longer closed the store.
    result = run_in_own_process(
        _GATED_CLOSE
        + """
store._lock = Gate(store._lock)
stores._flux_store_destroy_raw = gated(stores._flux_store_destroy_raw)
run(store.close, lambda: Counter.__init__(store, d))
outcome = []
reader = threading.Thread(target=lambda: outcome.append(store.state), daemon=True)
reader.start()
reader.join(timeout=10)
if reader.is_alive():
    print("stuck")
    os._exit(1)
d.close()
print(outcome, store.closed)
"""
    )
    assert result.stdout == "[0] True\n", (result.returncode, result.stdout, result.stderr[-2000:])


def test_a_group_made_again_while_another_thread_releases_it_is_made_after_that_release() -> None:
    # As for a store: the release's clean-up, finding the new group's handle,
    # kept the released native group among the dispatcher's, whose finalizer
    # would release it again (freed memory).
    result = run_in_own_process(
        _GATED_CLOSE
        + """
group = flux.StoreGroup([store], lambda: None)
released = group._handle
group._lock = Gate(group._lock)
stores._flux_store_group_release_raw = gated(stores._flux_store_group_release_raw)
run(group.release, lambda: flux.StoreGroup.__init__(group, [store], lambda: None))
print(released in d._natives, group._handle in d._natives)
group.release()
d.close()
"""
    )
    assert result.stdout == "False True\n", (result.returncode, result.stdout, result.stderr[-2000:])
