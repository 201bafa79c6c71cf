#!/usr/bin/env bash
# check-install.sh SONAME -- the README's install paths, followed as a user would:
#  1. `make install DESTDIR=<scratch> PREFIX=/usr/local` (a package's staging),
#     then the README's C example (examples/readme.c) compiled and linked
#     through pkg-config against that staged copy only, and run. The library is
#     lib/libflux.so.MAJOR.MINOR.PATCH, the SONAME and libflux.so links to it; the installed
#     library must carry no RPATH/RUNPATH. Then `make uninstall` removes it all.
#  2. `make install PREFIX=<scratch>` (a prefix the loader does not search),
#     then the README's two recipes for it, literally: pkg-config through
#     PKG_CONFIG_PATH with an rpath, and CMake's find_package(libflux) through
#     CMAKE_PREFIX_PATH (examples/cmake); both programs run with no
#     LD_LIBRARY_PATH; and find_package(libflux 0.MINOR) accepts this
#     version only. (Without cmake, CMake is skipped, saying so; under CI it fails.)
# Run from the repository root (make check-install).
set -euo pipefail
dest=$(mktemp -d "${TMPDIR:-/tmp}/libflux-install.XXXXXX")
trap 'rm -rf "$dest"' EXIT
prefix=/usr/local
soname=${1:?usage: check-install.sh SONAME}

make --no-print-directory install DESTDIR="$dest" PREFIX="$prefix" >/dev/null
libdir=$dest$prefix/lib
for f in "$libdir/libflux.so" "$libdir/$soname" "$dest$prefix/include/flux.h" "$libdir/pkgconfig/flux.pc" \
         "$libdir/cmake/libflux/libfluxConfig.cmake" "$dest$prefix/share/libflux/flux_cdef.h"; do
    [ -e "$f" ] || { echo "check-install: $f not installed" >&2; exit 1; }
done
# The README: lib/libflux.so.MAJOR.MINOR.PATCH, the file itself, with the
# SONAME and the development name libflux.so as links to it.
realname=libflux.so.$(sed -n 's/^#define FLUX_VERSION_\(MAJOR\|MINOR\|PATCH\) \([0-9]*\)$/\2/p' include/flux.h | paste -sd.)
[ -f "$libdir/$realname" ] && [ ! -L "$libdir/$realname" ] \
    || { echo "check-install: $libdir/$realname is not installed as a file" >&2; exit 1; }
for link in "$soname" libflux.so; do
    [ "$(readlink "$libdir/$link")" = "$realname" ] \
        || { echo "check-install: $libdir/$link is not a link to $realname" >&2; exit 1; }
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
# `make uninstall` (make help: "what install put there") leaves no file of it behind.
make --no-print-directory uninstall DESTDIR="$dest" PREFIX="$prefix" >/dev/null
left=$(find "$dest$prefix" ! -type d)
[ -z "$left" ] || { echo "check-install: make uninstall left behind:" $left >&2; exit 1; }
echo "check-install: make uninstall removes every file it installed"

# 2. A non-default prefix, as the README's Install section says to use it.
PREFIX=$dest/opt/libflux
make --no-print-directory install PREFIX="$PREFIX" >/dev/null
expect() {  # expect WHAT PROGRAM: it prints the example's line, and loads $PREFIX's library
    local got loaded
    got=$(env -u LD_LIBRARY_PATH "$2")
    loaded=$(env -u LD_LIBRARY_PATH ldd "$2" | awk '/libflux/ {print $3}')
    [ "$got" = "australia / sydney: FLUX_OK" ] || { echo "check-install: $1 printed '$got'" >&2; exit 1; }
    case $loaded in "$PREFIX"/lib/*) ;; *) echo "check-install: $1 loaded '$loaded', not $PREFIX/lib's" >&2; exit 1 ;; esac
}
# The README: PKG_CONFIG_PATH=$PREFIX/lib/pkgconfig, and -Wl,-rpath,$PREFIX/lib.
${CC:-cc} -o "$dest/readme-pc" examples/readme.c \
    $(PKG_CONFIG_PATH=$PREFIX/lib/pkgconfig pkg-config --cflags --libs flux) -Wl,-rpath,"$PREFIX/lib"
expect "pkg-config with PREFIX=$PREFIX" "$dest/readme-pc"
if command -v cmake >/dev/null; then
    cmake -S examples/cmake -B "$dest/cmake" -DCMAKE_PREFIX_PATH="$PREFIX" >"$dest/cmake.log" 2>&1 \
        && cmake --build "$dest/cmake" >>"$dest/cmake.log" 2>&1 \
        || { cat "$dest/cmake.log" >&2; echo "check-install: the CMake example did not build" >&2; exit 1; }
    expect "CMake's find_package(libflux) with CMAKE_PREFIX_PATH=$PREFIX" "$dest/cmake/readme"
    # "find_package(libflux 0.2) accepts 0.2.x only": before 1.0 the minor
    # version is part of the ABI, so the minors beside this one are refused.
    major=$(sed -n 's/^#define FLUX_VERSION_MAJOR \([0-9]*\)$/\1/p' include/flux.h)
    minor=$(sed -n 's/^#define FLUX_VERSION_MINOR \([0-9]*\)$/\1/p' include/flux.h)
    finds() {  # finds VERSION: find_package(libflux VERSION CONFIG REQUIRED) succeeds
        mkdir -p "$dest/version" && rm -rf "$dest/version-build"
        printf 'cmake_minimum_required(VERSION 3.16)\nproject(version C)\nfind_package(libflux %s CONFIG REQUIRED)\n' \
            "$1" >"$dest/version/CMakeLists.txt"
        cmake -S "$dest/version" -B "$dest/version-build" -DCMAKE_PREFIX_PATH="$PREFIX" >/dev/null 2>&1
    }
    finds "$major.$minor" || { echo "check-install: find_package(libflux $major.$minor) refused libflux $major.$minor" >&2; exit 1; }
    refused=("$((major + 1)).0")
    if [ "$major" -eq 0 ]; then
        refused+=("0.$((minor + 1))")
        [ "$minor" -eq 0 ] || refused+=("0.$((minor - 1))")
    fi
    for version in "${refused[@]}"; do
        if finds "$version"; then echo "check-install: find_package(libflux $version) accepted libflux $major.$minor" >&2; exit 1; fi
    done
    echo "check-install: find_package(libflux $major.$minor) finds it; ${refused[*]} refused"
    echo "check-install: PREFIX=$PREFIX: pkg-config (PKG_CONFIG_PATH, rpath) and CMake (libflux::flux) builds run"
elif [ -n "${CI:-}" ]; then
    echo "check-install: cmake is missing (CI installs it)" >&2; exit 1
else
    echo "check-install: PREFIX=$PREFIX: pkg-config build runs; CMake not installed, its example skipped"
fi
