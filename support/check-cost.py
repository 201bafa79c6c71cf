#!/usr/bin/env python3
"""Instruction budgets of the hot paths (`make check-cost`).

    check-cost.py DRIVER

Counts, under valgrind's cachegrind, the instructions one pass of each hot
path of Tests/c/cost.c executes -- the driver's own loop and the callbacks
included -- and fails when one exceeds its budget. Two runs per path, N and
3N passes, so that start-up and exit cancel out: the count is exact and the
same on every run, unlike a timing, and a change that adds work to every
dispatch shows here instead of only in a noisy `make bench`.

The budgets are today's counts (Swift 6.3, x86-64) plus about a fifth: room
for a compiler's drift, none for a slip like the one that made every dispatch
destroy a nil error through the runtime's generic witnesses (+100
instructions, twice the cost of dispatch itself).

Python 3 standard library only.
"""

import re
import subprocess
import sys

# path: (what it is, instructions counted when the budget was set, budget)
BUDGETS = {
    "dispatch": ("flux_dispatch, one no-op callback", 99, 118),
    "store-same": ("a reduce store, no change", 150, 180),
    "store-change": ("a reduce store, change + 1 listener", 236, 283),
    "wait-for": ("two callbacks, the first waits for the second", 327, 395),
}
N = 20000


def instructions(driver, path, passes):
    run = subprocess.run(
        [
            "valgrind",
            "--tool=cachegrind",
            "--cache-sim=no",
            "--cachegrind-out-file=/dev/null",
            driver,
            path,
            str(passes),
        ],
        check=False,
        capture_output=True,
        text=True,
    )
    if run.returncode != 0:
        sys.exit(f"check-cost: {driver} {path} {passes} failed ({run.returncode}):\n{run.stderr}")
    found = re.search(r"I\s+refs:\s+([\d,]+)", run.stderr)
    if not found:
        sys.exit(f"check-cost: no instruction count from cachegrind:\n{run.stderr}")
    return int(found.group(1).replace(",", ""))


def main():
    driver = sys.argv[1]
    passed = failed = 0
    for path, (label, counted, budget) in BUDGETS.items():
        per_pass = (instructions(driver, path, 3 * N) - instructions(driver, path, N)) / (2 * N)
        ok = per_pass <= budget
        passed += ok
        failed += not ok
        verdict = "ok" if ok else "OVER BUDGET"
        print(f"{label:48} {per_pass:7.1f} instructions (budget {budget}, {counted} when set): {verdict}")
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
