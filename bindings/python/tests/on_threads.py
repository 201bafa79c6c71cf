"""Running test code on threads of its own, for the tests that must not hang
the suite when what they test deadlocks."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
from collections.abc import Callable, Iterable
from typing import Any

import flux

PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(flux.__file__)))


def all_return(target: Callable[[Any], None], args: Iterable[Any], timeout: float = 1.5) -> bool:
    """Runs target(arg) for each arg on a thread of its own, all at once;
    whether every one returned within ``timeout`` (a stuck one is a daemon,
    left behind)."""
    threads = [threading.Thread(target=target, args=(arg,), daemon=True) for arg in args]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=timeout)
    return not any(thread.is_alive() for thread in threads)


def run_python(args: list[str], timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
    """Runs a fresh interpreter with ``args`` (a script and its arguments,
    or ``-c`` and code) that imports this package; its output as text."""
    # Unbuffered whatever the caller's environment says: a body may print
    # and then os._exit(), which flushes nothing.
    env = dict(os.environ, PYTHONPATH=PACKAGE_DIR, PYTHONUNBUFFERED="1")
    return subprocess.run(
        [sys.executable, *args],
        check=False,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def run_in_own_process(body: str, timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
    """Runs ``body`` (dedented) in a fresh interpreter that imports this
    package: a deadlock there -- one that holds the GIL stops every thread,
    the test's watchdog too -- fails the test (TimeoutExpired) instead of
    hanging the run, and a crash cannot end it."""
    return run_python(["-c", textwrap.dedent(body)], timeout)


# Python installs its KeyboardInterrupt handler only when SIGINT is not
# ignored at start-up, and a shell starts background jobs with SIGINT ignored
# (`make check &`): each script sets the disposition it relies on.
SIGINT_RAISES = "import signal; signal.signal(signal.SIGINT, signal.default_int_handler)\n"


def run_interruptible(
    body: str, python: str = sys.executable, timeout: float = 120.0
) -> subprocess.CompletedProcess[str]:
    """Runs ``body`` (dedented) in a fresh interpreter ``python`` that imports
    this package, for a test of signals: a process of its own, which the
    signal goes to, and whose stderr shows whatever would be printed as
    unraisable. Started with SIGINT ignored, as from `make check &`, whatever
    this process inherited, and setting SIGINT to raise KeyboardInterrupt
    itself: the script depends on no parent."""
    env = dict(os.environ, PYTHONPATH=PACKAGE_DIR)
    return subprocess.run(
        [python, "-c", SIGINT_RAISES + textwrap.dedent(body)],
        check=False,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
    )


def fork_during_a_dispatch(child: str, setup: str = "", after: str = "") -> subprocess.CompletedProcess[str]:
    """Runs, in a process of its own, a dispatcher ``d`` whose callback (it
    appends each payload to ``ran``) holds a dispatch on another thread, and
    forks there: ``child`` runs in the child and sets ``code`` (0: passed),
    its exit status. ``setup`` runs before that dispatch begins, ``after`` in
    the parent once it has ended. Prints "ok" when the child passed."""
    body = f"""\
import os, threading, warnings
import flux
warnings.simplefilter("ignore", DeprecationWarning)  # fork with threads
d = flux.Dispatcher()
entered, release = threading.Event(), threading.Event()
ran = []
def callback(p):
    ran.append(p)
    if p == "held":
        entered.set()
        release.wait()
d.register(callback)
{textwrap.dedent(setup)}
thread = threading.Thread(target=d.dispatch, args=("held",))
thread.start()
entered.wait()
pid = os.fork()
if pid == 0:
    code = 0
{textwrap.indent(textwrap.dedent(child), "    ")}
    os._exit(code)
_, status = os.waitpid(pid, 0)
release.set()
thread.join()
{textwrap.dedent(after)}
assert os.waitstatus_to_exitcode(status) == 0, status
print("ok")
"""
    return run_python(["-c", body])
