#!/usr/bin/env bash
# check-readme.sh -- the README's examples are files that CI compiles and runs:
#   "C in twenty lines"  = examples/readme.c (and it has twenty lines of code)
#   "Python"             = examples/readme.py
#   "Swift"              = support/swift-client/Sources/FluxClient/main.swift
# Run from the repository root (make check-readme).
set -euo pipefail
fail=0

# block HEADING LANG: the first ```LANG block after the line "## HEADING".
block() {
    awk -v heading="## $1" -v fence="\`\`\`$2" '
        $0 == heading { found = 1; next }
        found && !inside && $0 == fence { inside = 1; next }
        inside && $0 == "```" { exit }
        inside { print }' README.md
}

same() {  # same HEADING LANG FILE
    if ! diff -u --label "README.md ($1)" --label "$3" <(block "$1" "$2") "$3" >&2; then
        echo "check-readme: README's $2 block under '## $1' differs from $3" >&2
        fail=1
    fi
}

same "C in twenty lines" c examples/readme.c
same "Python" python examples/readme.py
same "Swift" swift support/swift-client/Sources/FluxClient/main.swift

# Code lines: neither blank nor comment only.
lines=$(grep -v '^[[:space:]]*$' examples/readme.c | grep -vc '^[[:space:]]*/\*.*\*/[[:space:]]*$' || true)
if [ "$lines" -ne 20 ]; then
    echo "check-readme: examples/readme.c has $lines lines of code, and the README says twenty" >&2
    fail=1
fi
[ $fail -eq 0 ] || exit 1
echo "check-readme: the README's C, Python and Swift examples are examples/readme.c (20 lines), examples/readme.py, support/swift-client"
