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
