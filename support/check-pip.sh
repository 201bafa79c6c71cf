#!/usr/bin/env bash
# check-pip.sh -- the Python distribution as a newcomer gets it: a copy of the
# tree with no library built, a fresh virtual environment, and
# `pip install ./bindings/python`.
#   1. with no way to build the library (SWIFT=false), the install fails,
#      says why, and installs nothing;
#   2. otherwise it builds the library (make lib), installs the distribution
#      `libflux` as a platform wheel carrying it, and `import flux` works from
#      anywhere, loading the copy inside the package;
#   3. FLUX_NO_BUNDLE=1 (see 3. below).
# Run from the repository root (make check-pip). Work in build/pip-check.
set -euo pipefail
# What is checked is where the installed package finds its library: not
# where FLUX_LIBRARY (which the binding tries first; make sets it) says.
unset FLUX_LIBRARY
work=$PWD/build/pip-check
rm -rf "$work"
mkdir -p "$work/src"
# The working tree's files (tracked, and new ones not ignored), no build output.
git ls-files -z -co --exclude-standard | xargs -0 cp --parents -t "$work/src"
${SYSTEM_PYTHON:-python3} -m venv "$work/venv"
pip=("$work/venv/bin/python" -m pip install --quiet --disable-pip-version-check)

if SWIFT=false "${pip[@]}" "$work/src/bindings/python" >"$work/fail.log" 2>&1; then
    echo "check-pip: the install succeeded with no way to build libflux" >&2; exit 1
fi
grep -q 'libflux: `make lib` in .* failed' "$work/fail.log" ||
    { cat "$work/fail.log" >&2; echo "check-pip: the failed install does not say why" >&2; exit 1; }
if "$work/venv/bin/python" -m pip show -q libflux >/dev/null 2>&1; then
    echo "check-pip: a failed install left a libflux package behind" >&2; exit 1
fi

"${pip[@]}" "$work/src/bindings/python" >"$work/install.log" 2>&1 ||
    { cat "$work/install.log" >&2; echo "check-pip: pip install ./bindings/python failed" >&2; exit 1; }
tag=$(sed -n 's/^Tag: //p' "$work"/venv/lib/python3*/site-packages/libflux-*.dist-info/WHEEL)
case $tag in py3-none-linux_*) ;; *) echo "check-pip: wheel tagged '$tag', expected py3-none-linux_<arch>" >&2; exit 1 ;; esac
(cd / && "$work/venv/bin/python" - "$work/venv" <<'PY'
import sys

import flux

venv = sys.argv[1]
assert flux.library_path.startswith(venv) and flux.library_path.endswith("/flux/libflux.so"), flux.library_path
d: flux.Dispatcher[str] = flux.Dispatcher()
seen: list[str] = []
d.register(seen.append)
d.dispatch("payload")
assert seen == ["payload"], seen
print(flux.library_path.replace(venv, "<venv>"))
PY
) > "$work/import.log" || { cat "$work/import.log" >&2; exit 1; }

# 3. FLUX_NO_BUNDLE=1: a pure wheel using the system's libflux. Refused while
#    the loader finds none; with one it can find (here through
#    LD_LIBRARY_PATH, as an installed copy would be), a py3-none-any wheel
#    whose import loads that library.
"$work/venv/bin/python" -m pip uninstall --quiet --yes libflux
if env -u LD_LIBRARY_PATH "$work/venv/bin/python" -c 'import ctypes.util, sys; sys.exit(bool(ctypes.util.find_library("flux")))'; then
    if env -u LD_LIBRARY_PATH FLUX_NO_BUNDLE=1 "${pip[@]}" "$work/src/bindings/python" >"$work/nobundle-fail.log" 2>&1; then
        echo "check-pip: FLUX_NO_BUNDLE=1 installed with no libflux the loader finds" >&2; exit 1
    fi
    grep -q 'FLUX_NO_BUNDLE=1, but the system loader finds no libflux' "$work/nobundle-fail.log" ||
        { cat "$work/nobundle-fail.log" >&2; echo "check-pip: the refused FLUX_NO_BUNDLE=1 install does not say why" >&2; exit 1; }
else
    echo "check-pip: a libflux is installed on this system: the refusal without one is not checked"
fi
system=$work/src/build/lib
LD_LIBRARY_PATH=$system FLUX_NO_BUNDLE=1 "${pip[@]}" "$work/src/bindings/python" >"$work/nobundle.log" 2>&1 ||
    { cat "$work/nobundle.log" >&2; echo "check-pip: FLUX_NO_BUNDLE=1 pip install failed" >&2; exit 1; }
pure=$(sed -n 's/^Tag: //p' "$work"/venv/lib/python3*/site-packages/libflux-*.dist-info/WHEEL)
[ "$pure" = py3-none-any ] || { echo "check-pip: FLUX_NO_BUNDLE=1 wheel tagged '$pure', expected py3-none-any" >&2; exit 1; }
[ ! -e "$work"/venv/lib/python3*/site-packages/flux/libflux.so ] ||
    { echo "check-pip: the FLUX_NO_BUNDLE=1 wheel carries a libflux.so" >&2; exit 1; }
loaded=$(cd / && LD_LIBRARY_PATH=$system "$work/venv/bin/python" -c 'import flux; print(flux.library_path)')
case $loaded in "$system"/*|libflux.so*) ;; *) echo "check-pip: the pure wheel loaded '$loaded', not the system's" >&2; exit 1 ;; esac

echo "check-pip: with no Swift the install fails and says why; otherwise it builds libflux," \
     "installs a $tag wheel, and import flux loads $(cat "$work/import.log");" \
     "FLUX_NO_BUNDLE=1 is refused with no system libflux, else a $pure wheel loading $loaded"
