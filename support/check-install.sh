#!/usr/bin/env bash
# check-install.sh SONAME -- `make install DESTDIR=<scratch> PREFIX=/usr/local`, then
# the README's C example (examples/readme.c) compiled and linked through
# pkg-config against that installed copy only, and run. The installed library
# must carry no RPATH/RUNPATH. Run from the repository root (make check-install).
set -euo pipefail
dest=$(mktemp -d "${TMPDIR:-/tmp}/libflux-install.XXXXXX")
trap 'rm -rf "$dest"' EXIT
prefix=/usr/local
soname=${1:?usage: check-install.sh SONAME}

make --no-print-directory install DESTDIR="$dest" PREFIX="$prefix" >/dev/null
libdir=$dest$prefix/lib
for f in "$libdir/libflux.so" "$libdir/$soname" "$dest$prefix/include/flux.h" "$libdir/pkgconfig/flux.pc"; do
    [ -e "$f" ] || { echo "check-install: $f not installed" >&2; exit 1; }
done
if readelf -d "$libdir/libflux.so" | grep -qE '\((RPATH|RUNPATH)\)'; then
    echo "check-install: the installed libflux.so carries an RPATH/RUNPATH:" >&2
    readelf -d "$libdir/libflux.so" | grep -E '\((RPATH|RUNPATH)\)' >&2
    exit 1
fi

# pkg-config reads the installed flux.pc; the sysroot prefixes its paths with DESTDIR.
export PKG_CONFIG_PATH=$libdir/pkgconfig PKG_CONFIG_SYSROOT_DIR=$dest PKG_CONFIG_LIBDIR=
flags=$(pkg-config --cflags --libs flux)
case $flags in *"$dest"*) ;; *) echo "check-install: pkg-config gave '$flags', not the DESTDIR copy" >&2; exit 1 ;; esac
${CC:-cc} -std=c99 -pedantic -Wall -Wextra -Werror -o "$dest/readme" examples/readme.c $flags

# LD_LIBRARY_PATH stands in for ldconfig (what a real install to /usr/local/lib needs).
out=$(LD_LIBRARY_PATH=$libdir "$dest/readme")
used=$(LD_LIBRARY_PATH=$libdir ldd "$dest/readme" | awk '/libflux/ {print $3}')
[ "$out" = "australia / sydney: FLUX_OK" ] || { echo "check-install: the example printed '$out'" >&2; exit 1; }
case $used in "$libdir"/*) ;; *) echo "check-install: the example loaded $used, not the installed copy" >&2; exit 1 ;; esac
echo "check-install: installed under DESTDIR, no RUNPATH; examples/readme.c built with pkg-config against it prints '$out'"
