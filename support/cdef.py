#!/usr/bin/env python3
"""Writes flux.h's declarations for FFIs that parse C declarations at run time.

    cdef.py [--cc CC] HEADER OUT

OUT gets every declaration of HEADER with no preprocessor directive, no
attribute, no comment and no system header's text -- what Python's
`cffi.FFI().cdef()` and LuaJIT's `ffi.cdef()` accept verbatim -- and each
integer constant (an object-like FLUX_ macro with a literal value) as an
enum constant. The C preprocessor does the reading, with FLUX_API defined
empty and the system headers replaced by empty ones, so the output is
exactly what a C compiler sees of the header's declarations. A FLUX_ macro
whose value is neither an integer literal nor a string, nor function-like,
is an error: the header must give every integer constant as a literal
(DESIGN.md 10), or an importer that ignores macros cannot see it.

Python 3 standard library only.
"""

import argparse
import os
import re
import subprocess
import sys
import tempfile

DEFINE = re.compile(r"^#define (FLUX_\w+)(\(?)\s*(.*)$")
INTEGER = re.compile(r"^\(?\s*(-?(?:0x[0-9a-fA-F]+|\d+))[uUlL]*\s*\)?$")


def preprocess(cc, header, extra):
    with tempfile.TemporaryDirectory() as stubs:
        for name in ("stddef.h", "stdint.h"):
            open(os.path.join(stubs, name), "w").close()
        argv = [cc, "-E", "-P", "-nostdinc", "-I", stubs, "-DFLUX_API=", *extra, header]
        return subprocess.run(argv, check=True, capture_output=True, text=True).stdout


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cc", default=os.environ.get("CC", "cc"))
    parser.add_argument("header")
    parser.add_argument("out")
    args = parser.parse_args(argv)

    declarations = preprocess(args.cc, args.header, [])
    constants, problems = [], []
    for line in preprocess(args.cc, args.header, ["-dM"]).splitlines():
        m = DEFINE.match(line)
        if not m or m.group(1) == "FLUX_API" or m.group(1) == "FLUX_H":
            continue
        name, function_like, value = m.groups()
        if function_like or value.startswith('"'):
            continue
        literal = INTEGER.match(value)
        if literal:
            constants.append((name, literal.group(1)))
        else:
            problems.append("%s is %r, not an integer literal" % (name, value))
    if problems:
        sys.stderr.write("cdef.py: " + "; ".join(problems) + "\n")
        return 1

    lines = [line.strip() if not line.startswith(" ") else line.rstrip() for line in declarations.splitlines()]
    body = "\n".join(line for line in lines if line.strip())
    with open(args.out + ".tmp", "w", encoding="utf-8") as out:
        out.write("/* flux.h's declarations for cffi's cdef() and LuaJIT's ffi.cdef(); made by\n"
                  " * support/cdef.py (make cdef) from include/flux.h: edit that instead. */\n")
        out.write("enum {\n%s\n};\n" % ",\n".join("    %s = %s" % c for c in sorted(constants)))
        out.write(body + "\n")
    os.replace(args.out + ".tmp", args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
