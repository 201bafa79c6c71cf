#!/usr/bin/env bash
# api-functions.sh HEADER -- prints the names of HEADER's FLUX_API functions,
# one a line, sorted: the one list the ABI check (check-abi.sh) and the
# header check (make check-header) compare against.
#
# Declarations: "FLUX_API <type> name(", possibly across lines. The C
# preprocessor drops comments and directives and turns FLUX_API into a marker.
set -euo pipefail
${CC:-cc} -E -P -DFLUX_API=flux_api_marker_ -x c "$1" | tr '\n' ' ' |
    grep -o 'flux_api_marker_[^;{(]*(' | grep -o '[A-Za-z_][A-Za-z0-9_]*[[:space:]]*($' | tr -d '( ' | sort -u
