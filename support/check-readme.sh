#!/usr/bin/env bash
# check-readme.sh -- the README's examples are files that CI compiles and runs:
#   "C in twenty lines"  = examples/readme.c (and it has twenty lines of code)
#   "Python"             = examples/readme.py
#   "Swift"              = support/swift-client/Sources/FluxClient/main.swift
#   bindings/python/README.md's first python block = examples/readme.py too
#   "Stores"'s Swift block = the body of support/swift-client's readmeStores()
#   "Trampolines for dynamic hosts": its C fragment compiles as C11 -pedantic
#   "Stores": its C block compiles as C11 -pedantic and does what it says
#   (its Python block: bindings/python/tests/test_stores.py)
# and the snippets of "JBFlux's store model" are excerpts of its examples:
#   each python block is lines of examples/current_user.py as they stand,
#   each swift block lines of examples/current-user/main.swift.
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

# first_block FILE LANG: the first ```LANG block of FILE.
first_block() {
    awk -v fence="\`\`\`$2" '
        !inside && $0 == fence { inside = 1; next }
        inside && $0 == "```" { exit }
        inside { print }' "$1"
}

same() {  # same HEADING LANG FILE
    if ! diff -u --label "README.md ($1)" --label "$3" <(block "$1" "$2") "$3" >&2; then
        echo "check-readme: README's $2 block under '## $1' differs from $3" >&2
        fail=1
    fi
}

# excerpts HEADING LANG FILE [INDENT]: each ```LANG block of the section
# "## HEADING" is a run of consecutive lines of FILE (each indented by
# INDENT, for statements that need a function around them): short, and
# still true.
excerpts() {
    if ! python3 - "$1" "$2" "$3" "${4:-}" <<'PY'
import sys
heading, lang, path, indent = sys.argv[1:]
source = open(path).read().split("\n")
blocks, block, section = [], None, False
for line in open("README.md").read().split("\n"):
    if line.startswith("## "):
        section = line == "## " + heading
    elif section and block is None and line == "```" + lang:
        block = []
    elif block is not None and line == "```":
        blocks.append(block)
        block = None
    elif block is not None:
        block.append(line)
ok = bool(blocks)
for block in blocks:
    block = [indent + line if line else line for line in block]
    if not any(source[i:i + len(block)] == block for i in range(len(source))):
        print(f"check-readme: README's {lang} block under '## {heading}' beginning {block[0]!r}"
              f" is not a run of lines of {path}", file=sys.stderr)
        ok = False
if not blocks:
    print(f"check-readme: no {lang} block under '## {heading}'", file=sys.stderr)
sys.exit(0 if ok else 1)
PY
    then
        fail=1
    fi
}

same "C in twenty lines" c examples/readme.c
same "Python" python examples/readme.py
same "Swift" swift support/swift-client/Sources/FluxClient/main.swift
if ! diff -u --label "bindings/python/README.md (first python block)" --label examples/readme.py \
        <(first_block bindings/python/README.md python) examples/readme.py >&2; then
    echo "check-readme: bindings/python/README.md's first python block differs from examples/readme.py" >&2
    fail=1
fi
excerpts "JBFlux's store model" python examples/current_user.py
excerpts "JBFlux's store model" swift examples/current-user/main.swift
# "Stores": its Swift block is the body of a function of support/swift-client,
# which check-swift-client compiles.
excerpts "Stores" swift support/swift-client/Sources/FluxClient/Stores.swift "    "

# bindings/python/README.md's "Installing" makes a virtual environment in the
# checkout: git ignores it (else `git status` lists it, and check-pip's copy
# of the tree takes the whole environment along).
venv_dir=$(sed -n 's/^python3 -m venv \([^ ]*\) .*/\1/p' bindings/python/README.md)
if [ -z "$venv_dir" ]; then
    echo "check-readme: bindings/python/README.md no longer shows 'python3 -m venv DIR'" >&2
    fail=1
elif ! git check-ignore -q "$venv_dir/"; then
    echo "check-readme: bindings/python/README.md's virtual environment $venv_dir/ is not ignored by git" >&2
    fail=1
fi

# "Trampolines for dynamic hosts": its C fragment, given the names it leaves
# to the host, compiles as C11 -pedantic -Werror (the handler as it stands,
# the statements inside a function).
if ! block "Trampolines for dynamic hosts" c | awk '
        BEGIN {
            print "#include <flux.h>"
            print "#include <stdint.h>"
            print "int host_invoke(void *host, const void *payload);"
            print "void release_host_object(void *host);"
            print "extern char my_host_object[];"
        }
        !body && $0 == "" { body = 1; print "void readme_fragment(flux_dispatcher *d, flux_token token);"
                             print "void readme_fragment(flux_dispatcher *d, flux_token token) {"; next }
        { print }
        END { print "}" }' \
        | ${CC:-cc} -std=c11 -pedantic -Wall -Wextra -Werror -Iinclude -fsyntax-only -x c - >&2; then
    echo "check-readme: README's C block under '## Trampolines for dynamic hosts' does not compile as C11 -pedantic -Werror" >&2
    fail=1
fi

# "Stores": its C block, the reduce as it stands and the statements inside
# main(), compiles as C11 -pedantic -Werror and does what its comments say:
# the dispatch runs reduce, then on_change() (once), and flux_store_state()
# is then (void *)1; the store is destroyed before its dispatcher. The
# block's own flux_store_state() call is wrapped to record what it returned.
stores=$(mktemp -d "${TMPDIR:-/tmp}/libflux-readme.XXXXXX")
trap 'rm -rf "$stores"' EXIT
block "Stores" c | awk '
    BEGIN {
        print "#include <flux.h>"
        print "#include <stdint.h>"
        print "#include <stdio.h>"
        print "#include <string.h>"
        print "static flux_dispatcher *d;"
        print "static flux_listener_id listener_id;"
        print "static void *read_by_the_block = (void *)-1;"
        print "static int changes;"
        print "static void on_change(void *context) { (void)context; changes++; }"
        print "#define flux_store_state(s) (read_by_the_block = (flux_store_state)(s))"
    }
    !body { print }
    !body && $0 == "}" { body = 1
                         print "int main(void) {"
                         print "    if ((d = flux_dispatcher_create()) == NULL) return 1;"; next }
    body { print }
    END {
        print "    printf(\"%d %p\\n\", changes, read_by_the_block);"
        print "    return flux_dispatcher_destroy(d);"
        print "}"
    }' >"$stores/stores.c"
if ! ${CC:-cc} -std=c11 -pedantic -Wall -Werror -Iinclude -o "$stores/stores" "$stores/stores.c" \
        -L"${B:-build}/lib" -lflux -Wl,-rpath,"$PWD/${B:-build}/lib" >&2; then
    echo "check-readme: README's C block under '## Stores' does not compile as C11 -pedantic -Werror" >&2
    fail=1
elif ! out=$("$stores/stores") || [ "$out" != "1 0x1" ]; then
    echo "check-readme: README's C block under '## Stores' printed '$out'," \
         "not one on_change() and a state of (void *)1, its dispatcher then destroyed" >&2
    fail=1
fi

# "Set-up": Swift on PATH. Without it, building the library says so and
# what to do (make alone said "swift: No such file or directory").
if out=$(make --no-print-directory lib B="$stores/no-swift" SWIFT=no-such-swift 2>&1); then
    echo "check-readme: make lib succeeded with SWIFT=no-such-swift" >&2
    fail=1
elif ! grep -q "no Swift toolchain: 'no-such-swift' is not on PATH.*README.md, Set-up" <<<"$out"; then
    printf '%s\n' "$out" >&2
    echo "check-readme: make lib without a Swift toolchain does not say what to do" >&2
    fail=1
fi

# Code lines: neither blank nor comment only.
lines=$(grep -v '^[[:space:]]*$' examples/readme.c | grep -vc '^[[:space:]]*/\*.*\*/[[:space:]]*$' || true)
if [ "$lines" -ne 20 ]; then
    echo "check-readme: examples/readme.c has $lines lines of code, and the README says twenty" >&2
    fail=1
fi
# "`make help` lists every target": each .PHONY target is named in it.
help=$(make --no-print-directory help)
for target in $(sed -n '/^\.PHONY:/,/[^\\]$/p' Makefile | sed 's/^\.PHONY://; s/\\//'); do
    if ! grep -qw -- "$target" <<<"$help"; then
        echo "check-readme: make help does not list the target $target (the README says it lists every one)" >&2
        fail=1
    fi
done

[ $fail -eq 0 ] || exit 1
echo "check-readme: make help lists every target; without Swift on PATH, make lib says what to do;"
echo "check-readme: bindings/python/README.md's venv is git-ignored; the trampoline fragment compiles as C11 -pedantic;"
echo "check-readme: the Stores C block compiles, runs on_change() once and leaves the state (void *)1;"
echo "check-readme: the README's C, Python and Swift examples are examples/readme.c (20 lines), examples/readme.py, support/swift-client;"
echo "  bindings/python/README.md's example is examples/readme.py;"
echo "  JBFlux's store model's snippets are lines of examples/current_user.py and examples/current-user/main.swift;"
echo "  the Stores Swift block is support/swift-client's readmeStores()"
