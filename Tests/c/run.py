#!/usr/bin/env python3
"""Runs the libflux C test programs and summarizes their TAP output.

    run.py [--wrap "CMD ARGS"] [--timeout SECONDS] BIN...

Each BIN runs (prefixed by the wrap command, split with shlex, e.g. valgrind)
with a timeout. Its TAP goes to stdout as it arrives. A program fails when any
"not ok" line appears, or it exits non-zero, is killed by a signal, times out,
prints "Bail out!", or its plan ("1..N", exactly once, first or last) does not
match the tests it printed. The last line is "N passed, N failed": the ok and
not ok lines of every program, plus one failure for each program that failed
in any of the other ways without a "not ok" line to show for it (a crash or
timeout always counts). Exits 0 only when nothing failed.

Every program starts from a parent that left it hostile signals: SIGCHLD,
SIGALRM, SIGINT, SIGUSR1, SIGUSR2 and SIGHUP ignored and blocked (both
survive exec, as from `nohup`, a background job or a daemon). A program sets
up the signals it relies on (tap_init() does) instead of inheriting them, and
this keeps every run proving it.

Python 3 standard library only.
"""

import argparse
import os
import re
import shlex
import signal
import subprocess
import sys
import threading
import time

TEST_LINE = re.compile(r"^(not )?ok\b\s*(\d+)?\s*(?:-\s*)?([^#]*)(#.*)?$")
PLAN_LINE = re.compile(r"^1\.\.(\d+)\s*(#.*)?$")


def signal_name(number):
    try:
        return signal.Signals(number).name
    except ValueError:
        return "signal %d" % number


class Result:
    def __init__(self, name):
        self.name = name
        self.passed = 0
        self.failed = 0          # "not ok" lines (not TODO)
        self.problems = []       # reasons the program failed besides "not ok"
        self.fatal = False       # crash/timeout: counts as a failure regardless


def parse_line(line, state, result):
    """Updates state and result from one line of TAP."""
    m = PLAN_LINE.match(line)
    if m:
        state["plans"].append((int(m.group(1)), state["tests"]))
        return
    if line.startswith("Bail out!"):
        result.problems.append(line.strip())
        result.fatal = True
        return
    m = TEST_LINE.match(line)
    if not m:
        return
    state["tests"] += 1
    number = m.group(2)
    if number is not None and int(number) != state["tests"]:
        state["misnumbered"] += 1
    directive = (m.group(4) or "").lower()
    todo = directive.startswith("# todo")
    if m.group(1) and not todo:
        result.failed += 1
    else:
        result.passed += 1


# Run between the fork and the test (or its wrapper): see the module docstring.
HOSTILE_PARENT = """
import os, signal, sys
hostile = (signal.SIGCHLD, signal.SIGALRM, signal.SIGINT, signal.SIGUSR1, signal.SIGUSR2, signal.SIGHUP)
for sig in hostile:
    signal.signal(sig, signal.SIG_IGN)
signal.pthread_sigmask(signal.SIG_BLOCK, hostile)
os.execvp(sys.argv[1], sys.argv[1:])
"""


def run_one(binary, wrap, timeout):
    result = Result(binary)
    argv = [sys.executable, "-c", HOSTILE_PARENT] + wrap + [binary]
    state = {"tests": 0, "plans": [], "misnumbered": 0}
    try:
        proc = subprocess.Popen(
            argv,
            stdout=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            start_new_session=True,   # its own process group, killed on timeout
        )
    except OSError as e:
        result.problems.append("cannot run: %s" % e)
        result.fatal = True
        return result

    timed_out = threading.Event()

    def on_timeout():
        timed_out.set()
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    timer = threading.Timer(timeout, on_timeout)
    timer.daemon = True
    timer.start()
    start = time.monotonic()
    try:
        for raw in proc.stdout:
            line = raw.decode("utf-8", "replace").rstrip("\r\n")
            print(line, flush=True)
            parse_line(line, state, result)
        returncode = proc.wait()
    finally:
        timer.cancel()
    elapsed = time.monotonic() - start

    if timed_out.is_set():
        result.problems.append("timed out after %gs" % timeout)
        result.fatal = True
    elif returncode < 0:
        result.problems.append("killed by %s" % signal_name(-returncode))
        result.fatal = True
    elif returncode != 0:
        result.problems.append("exit status %d" % returncode)

    tests, plans = state["tests"], state["plans"]
    if not plans:
        result.problems.append("no plan (1..N) printed")
    elif len(plans) > 1:
        result.problems.append("%d plans printed" % len(plans))
    else:
        planned, seen_before = plans[0]
        if seen_before not in (0, tests):
            result.problems.append("plan printed in the middle of the tests")
        if planned != tests:
            result.problems.append("planned %d tests, ran %d" % (planned, tests))
    if tests == 0:
        result.problems.append("no tests ran")
    if state["misnumbered"]:
        result.problems.append("%d test lines numbered out of sequence" % state["misnumbered"])

    status = "ok" if not result.failed and not result.problems else "FAILED"
    detail = "; ".join(result.problems)
    print("# %s: %s -- %d passed, %d failed%s (%.1fs)"
          % (binary, status, result.passed, result.failed,
             ", " + detail if detail else "", elapsed), flush=True)
    return result


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--wrap", default="",
                        help='a command to run each program under, e.g. "valgrind -q"')
    parser.add_argument("--timeout", type=float, default=None,
                        help="seconds per program (default 300, or 3600 with --wrap;"
                             " env FLUX_TEST_TIMEOUT)")
    parser.add_argument("binaries", nargs="*", metavar="BIN")
    args = parser.parse_args(argv)

    wrap = shlex.split(args.wrap)
    timeout = args.timeout
    if timeout is None:
        env = os.environ.get("FLUX_TEST_TIMEOUT")
        timeout = float(env) if env else (3600.0 if wrap else 300.0)

    if not args.binaries:
        print("run.py: no test programs given", file=sys.stderr)
        print("0 passed, 1 failed")
        return 2

    passed = failed = 0
    failed_programs = []
    for binary in args.binaries:
        r = run_one(binary, wrap, timeout)
        passed += r.passed
        failed += r.failed
        if r.fatal or (r.problems and r.failed == 0):
            failed += 1
        if r.failed or r.problems:
            failed_programs.append(binary)

    if failed_programs:
        print("# failed: %s" % " ".join(failed_programs))
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
