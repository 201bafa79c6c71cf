"""The suite sets up the signals it relies on instead of inheriting them
(conftest.pytest_configure): an ignored disposition and the signal mask
survive exec, as from ``nohup``, a background job or a daemon."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import flux

TESTS = Path(__file__).resolve().parent
PACKAGE_DIR = Path(flux.__file__).resolve().parent.parent

HOSTILE = (signal.SIGCHLD, signal.SIGALRM, signal.SIGINT, signal.SIGUSR1)


def hostile_parent() -> None:
    for sig in HOSTILE:
        signal.signal(sig, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_BLOCK, HOSTILE)


def test_the_suite_passes_under_a_parent_that_ignored_and_blocked_signals() -> None:
    # Without pytest_configure's reset: the cdef test reads its failing child
    # as a success (with SIGCHLD ignored no child can be waited for, and
    # subprocess takes that for exit status 0), and the SIGINT test's script
    # inherits SIGINT blocked, so the interrupt it waits for never comes.
    chosen = [
        f"{TESTS / 'test_cffi_cdef.py'}::test_the_cdef_tool_refuses_a_computed_integer_constant",
        f"{TESTS / 'test_signals.py'}::test_sigint_while_dispatch_blocks_raises_keyboard_interrupt_from_dispatch",
    ]
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *chosen],
        check=False,
        capture_output=True,
        text=True,
        timeout=300,
        cwd=TESTS,
        env=dict(os.environ, PYTHONPATH=str(PACKAGE_DIR)),
        preexec_fn=hostile_parent,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "2 passed" in result.stdout, result.stdout
