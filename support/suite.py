#!/usr/bin/env python3
"""Runs one test suite quietly and keeps its counts; adds counts up.

    suite.py run NAME CMD [ARG...]   run CMD, its output to build/check/NAME.log
    suite.py total LABEL [NAME...]   "LABEL: N passed, N failed" over NAME's counts
                                     (every suite run so far when none is named)

`run` prints one line, "NAME: N passed, N failed[, N skipped] (log: ...)",
read from the runner's own closing lines: the C harness's and any plain
"N passed, N failed" line, pytest's summary, XCTest's "Executed N tests, with
N failures" and Swift Testing's "Test run with N tests". When the command
fails, the whole log is printed and the suite counts at least one failure,
whatever its lines said. V=1 in the environment streams the output as it
comes, as well as logging it. Exits with the command's status (`total`: 1
when anything failed or nothing ran).

Python 3 standard library only.
"""

import os
import re
import subprocess
import sys

DIR = os.path.join("build", "check")

PLAIN = re.compile(r"^(?:\S+: )?(\d+) passed, (\d+) failed(?:, (\d+) skipped)?\s*$")
PYTEST = re.compile(r"^=*\s*(?:\d+ \w+(?:, )?)+ in [\d.]+s")
PYTEST_PART = re.compile(r"(\d+) (passed|failed|skipped|errors?|xfailed|xpassed)")
XCTEST = re.compile(r"^\s*Executed (\d+) tests?, with (\d+) failures?")
SWIFT_TESTING = re.compile(r"Test run with (\d+) tests?\b.*?(passed|failed)(?:.*?with (\d+) issues?)?")


def count(lines):
    """(passed, failed, skipped) from a runner's closing lines, or None."""
    plain = pytest = xctest = swift_testing = None
    for line in lines:
        m = PLAIN.match(line)
        if m:
            plain = (int(m.group(1)), int(m.group(2)), int(m.group(3) or 0))
            continue
        if PYTEST.match(line):
            parts = {}
            for number, word in PYTEST_PART.findall(line):
                parts[word.rstrip("s") if word.startswith("error") else word] = int(number)
            failed = parts.get("failed", 0) + parts.get("error", 0) + parts.get("xpassed", 0)
            pytest = (parts.get("passed", 0) + parts.get("xfailed", 0), failed, parts.get("skipped", 0))
            continue
        m = XCTEST.match(line)
        if m:  # the last one is the total of 'All tests'
            executed, failures = int(m.group(1)), int(m.group(2))
            xctest = (executed - failures, failures, 0)
            continue
        m = SWIFT_TESTING.search(line)
        if m:
            tests = int(m.group(1))
            failed = 0 if m.group(2) == "passed" else max(1, min(tests, int(m.group(3) or 1)))
            swift_testing = (tests - failed, failed, 0)
    found = [c for c in (plain, pytest, xctest, swift_testing) if c is not None]
    if not found:
        return None
    if plain is not None and (pytest or xctest or swift_testing):
        found.remove(plain)  # a runner's own summary wins over a stray plain line
    return tuple(sum(c[i] for c in found) for i in range(3))


def counts_path(name):
    return os.path.join(DIR, name + ".count")


def run(name, argv):
    os.makedirs(DIR, exist_ok=True)
    log_path = os.path.join(DIR, name + ".log")
    verbose = os.environ.get("V", "0") not in ("", "0")
    lines = []
    with open(log_path, "w", encoding="utf-8") as log:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        for raw in proc.stdout:
            line = raw.decode("utf-8", "replace")
            log.write(line)
            if verbose:
                sys.stdout.write(line)
                sys.stdout.flush()
            lines.append(line.rstrip("\r\n"))
        status = proc.wait()
    counted = count(lines)
    passed, failed, skipped = counted or (0, 0, 0)
    if status != 0:
        failed = max(failed, 1)
        if not verbose:
            sys.stdout.write("".join(line + "\n" for line in lines))
    elif counted is None or passed + failed + skipped == 0:
        failed = 1  # green but silent: nothing shows that a test ran (or was skipped, saying so)
        sys.stdout.write("".join(line + "\n" for line in lines))
        print("%s: no test count found in its output" % name)
    with open(counts_path(name), "w", encoding="utf-8") as f:
        f.write("%d %d %d\n" % (passed, failed, skipped))
    print("%s: %s (log: %s)" % (name, summary(passed, failed, skipped), log_path), flush=True)
    return status if status != 0 else (1 if failed else 0)


def summary(passed, failed, skipped):
    text = "%d passed, %d failed" % (passed, failed)
    return text + (", %d skipped" % skipped if skipped else "")


def total(label, names):
    if not names:
        names = sorted(f[: -len(".count")] for f in os.listdir(DIR) if f.endswith(".count")) if os.path.isdir(DIR) else []
    passed = failed = skipped = 0
    for name in names:
        try:
            with open(counts_path(name), encoding="utf-8") as f:
                p, fl, s = (int(x) for x in f.read().split())
        except OSError:
            print("%s: suite %s did not run" % (label, name))
            fl, p, s = 1, 0, 0
        passed, failed, skipped = passed + p, failed + fl, skipped + s
    print("%s: %s" % (label, summary(passed, failed, skipped)))
    return 1 if failed or not passed else 0


def main(argv):
    if len(argv) >= 3 and argv[0] == "run":
        return run(argv[1], argv[2:])
    if len(argv) >= 2 and argv[0] == "total":
        return total(argv[1], argv[2:])
    sys.stderr.write(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
