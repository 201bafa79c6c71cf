#!/usr/bin/env bash
# check-abi.sh LIBRARY HEADER SONAME
#
# The ABI of libflux.so is exactly what include/flux.h declares:
#   - the dynamic symbols it defines are exactly the header's FLUX_API
#     functions (the list is read from the header, so new API needs no edit here);
#   - its SONAME is the one given (libflux.so.MAJOR, or libflux.so.0.MINOR
#     while MAJOR is 0: flux.h, "Versioning");
#   - it carries no RPATH/RUNPATH (an installed system library must not);
#   - at run time it needs only what the README's Install section names:
#     glibc 2.34 or later (libc, libm, the dynamic loader), libstdc++,
#     libgcc_s and libffi 8 -- the Swift runtime is linked in.
set -euo pipefail
lib=$1 header=$2 soname=$3
fail=0

declared=$("$(dirname "$0")/api-functions.sh" "$header")
[ -n "$declared" ] || { echo "check-abi: no FLUX_API declarations found in $header" >&2; exit 1; }

# Defined dynamic symbols (functions and data alike: anything exported counts).
exported=$(nm -D --defined-only "$lib" | awk '{print $3}' | sed 's/@.*//' | sort -u)

extra=$(comm -13 <(echo "$declared") <(echo "$exported"))
missing=$(comm -23 <(echo "$declared") <(echo "$exported"))
if [ -n "$extra" ]; then echo "check-abi: exported but not declared in $header:" $extra >&2; fail=1; fi
if [ -n "$missing" ]; then echo "check-abi: declared in $header but not exported:" $missing >&2; fail=1; fi

dynamic=$(readelf -d "$lib")
actual_soname=$(sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p' <<<"$dynamic")
if [ "$actual_soname" != "$soname" ]; then
    echo "check-abi: SONAME is '$actual_soname', expected '$soname'" >&2; fail=1
fi
if grep -qE '\((RPATH|RUNPATH)\)' <<<"$dynamic"; then
    echo "check-abi: carries $(grep -E '\((RPATH|RUNPATH)\)' <<<"$dynamic" | sed 's/^ *//')" >&2; fail=1
fi

needed=$(sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' <<<"$dynamic")
others=$(grep -vxE 'libc\.so\.6|libm\.so\.6|ld-linux[-a-z0-9_.]*\.so\.[0-9]+|libstdc\+\+\.so\.6|libgcc_s\.so\.1|libffi\.so\.8' \
    <<<"$needed" || true)
if [ -n "$others" ]; then echo "check-abi: needs more than glibc, libstdc++, libgcc_s and libffi 8:" $others >&2; fail=1; fi
glibc=$(objdump -T "$lib" | grep -o 'GLIBC_[0-9][0-9.]*' | sed 's/GLIBC_//' | sort -uV | tail -1)
if [ "$(printf '%s\n' 2.34 "$glibc" | sort -V | tail -1)" != 2.34 ]; then
    echo "check-abi: needs glibc $glibc; the README promises 2.34 or later will do" >&2; fail=1
fi

[ $fail -eq 0 ] || exit 1
echo "check-abi: $(wc -l <<<"$declared") functions, exactly the header's FLUX_API declarations; SONAME $soname; no RPATH/RUNPATH;"
echo "  needs only" $needed "(glibc $glibc symbols at most)"
