"""Exceptions that escape a Python callback where no ``try`` can catch them:
a KeyboardInterrupt raised as the callback is entered, because SIGINT arrived
while the thread was in C (blocked in dispatch, or between two callbacks).
The dispatch fails, ``dispatch`` raises that very exception, nothing is
printed as unraisable, and the dispatcher is idle and usable after."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import flux

PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(flux.__file__)))
ROUNDS = 20


# Python installs its KeyboardInterrupt handler only when SIGINT is not
# ignored at start-up, and a shell starts background jobs with SIGINT ignored
# (`make check &`): each script sets the disposition it relies on.
SIGINT_RAISES = "import signal; signal.signal(signal.SIGINT, signal.default_int_handler)\n"


def run_script(body: str) -> subprocess.CompletedProcess[str]:
    # A process of its own: the signal goes to it, and its stderr shows
    # whatever would be printed as unraisable.
    env = dict(os.environ, PYTHONPATH=PACKAGE_DIR)
    # Started with SIGINT ignored, as from `make check &`, whatever this
    # process inherited: the script must not depend on its parent.
    script = SIGINT_RAISES + textwrap.dedent(body)
    return subprocess.run(
        [sys.executable, "-c", script],
        check=False,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
    )


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


def test_sigint_between_two_callbacks_raises_keyboard_interrupt_from_dispatch() -> None:
    # A native callback -- libc's raise(), with SIGINT as its context -- gets
    # the signal delivered while the dispatch is in C; the next Python
    # callback is interrupted as it is entered, before its body runs.
    result = run_script(
        f"""
        import ctypes, signal
        import flux
        from flux import _native
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
