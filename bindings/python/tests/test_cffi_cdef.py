"""A host that is not this package: Python's cffi, given only libflux.so and
the declarations `make cdef` writes (build/include/flux_cdef.h, DESIGN.md
10), runs the flight-destination example -- three cffi callbacks and a
wait_for chain -- and reads an error's token and a cycle as values."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import flux

cffi = pytest.importorskip("cffi", reason="cffi is in support/requirements-dev.txt (make venv)")

REPO = Path(__file__).resolve().parents[3]
CDEF = REPO / "build" / "include" / "flux_cdef.h"


@pytest.fixture(scope="module")
def ffi_lib(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Any]:
    path = CDEF
    if not path.exists():  # not made by `make cdef`: make it the same way
        path = tmp_path_factory.mktemp("cdef") / "flux_cdef.h"
        subprocess.run(
            [
                sys.executable,
                str(REPO / "support" / "cdef.py"),
                str(REPO / "include" / "flux.h"),
                str(path),
            ],
            check=True,
        )
    ffi = cffi.FFI()
    ffi.cdef(path.read_text())  # verbatim: no directive, attribute or system header in it
    return ffi, ffi.dlopen(flux.library_path)


def test_the_declarations_carry_the_constants(ffi_lib: tuple[Any, Any]) -> None:
    _, lib = ffi_lib
    assert lib.FLUX_VERSION_NUMBER == lib.flux_version()
    assert lib.FLUX_OBSERVER_VERSION == 1
    assert lib.FLUX_ERR_CIRCULAR == flux.Status.ERR_CIRCULAR


def test_the_declarations_are_the_whole_header(ffi_lib: tuple[Any, Any]) -> None:
    # Every function, integer macro and status of flux.h, with the header's
    # values: a cdef that fell behind the header would fail a host here, not
    # in its own code.
    _, lib = ffi_lib
    header = (REPO / "include" / "flux.h").read_text()
    functions = re.findall(r"FLUX_API[^;(]*?\b(flux_\w+)\s*\(", header)
    assert len(functions) > 30, functions
    missing = [name for name in functions if not hasattr(lib, name)]
    assert missing == []
    constants = dict(re.findall(r"^#define (FLUX_\w+) (\d+)$", header, re.MULTILINE))
    constants.update(re.findall(r"^\s+(FLUX_\w+) = (\d+),?", header, re.MULTILINE))
    assert {"FLUX_VERSION_NUMBER", "FLUX_SIGNATURE_MAX_ARGS", "FLUX_OK", "FLUX_ERR_TOO_DEEP"} <= constants.keys()
    assert {name: getattr(lib, name, None) for name in constants} == {k: int(v) for k, v in constants.items()}


def test_flight_destination_through_cffi(ffi_lib: tuple[Any, Any]) -> None:
    ffi, lib = ffi_lib
    d = lib.flux_dispatcher_create()
    assert d != ffi.NULL
    tokens = {name: ffi.new("flux_token *") for name in ("price", "city", "country")}
    state: dict[str, Any] = {}
    log: list[str] = []

    def wait_for(name: str) -> None:
        status = lib.flux_wait_for(d, tokens[name], 1)
        assert status == lib.FLUX_OK, ffi.string(lib.flux_last_error())

    def country(context: Any, payload: Any) -> int:
        state["country"] = ffi.string(ffi.cast("const char *", payload)).decode()
        log.append("country")
        return 0

    def city(context: Any, payload: Any) -> int:
        wait_for("country")
        state["city"] = {"australia": "sydney", "france": "paris"}[state["country"]]
        log.append("city")
        return 0

    def price(context: Any, payload: Any) -> int:
        wait_for("city")
        state["price"] = {"sydney": 1320, "paris": 450}[state["city"]]
        log.append("price")
        return 0

    # Three native callbacks minted by cffi, kept alive for the test. Registered
    # in reverse: wait_for, not registration order, orders them.
    native = {
        name: ffi.callback("int(void *, const void *)", fn)
        for name, fn in (("price", price), ("city", city), ("country", country))
    }
    for name in ("price", "city", "country"):
        assert lib.flux_register(d, native[name], ffi.NULL, ffi.NULL, tokens[name]) == lib.FLUX_OK
    payload = ffi.new("char[]", b"australia")
    assert lib.flux_dispatch(d, payload) == lib.FLUX_OK
    assert log == ["country", "city", "price"]
    assert state == {"country": "australia", "city": "sydney", "price": 1320}
    assert lib.flux_dispatcher_destroy(d) == lib.FLUX_OK


def test_errors_as_values_through_cffi(ffi_lib: tuple[Any, Any]) -> None:
    ffi, lib = ffi_lib
    d = lib.flux_dispatcher_create()
    assert lib.flux_unregister(d, 4711) == lib.FLUX_ERR_UNKNOWN_TOKEN
    assert lib.flux_last_error_token() == 4711

    ring = [ffi.new("flux_token *") for _ in range(3)]
    seen: dict[str, Any] = {}

    def make(i: int) -> Any:
        def waits(context: Any, payload: Any) -> int:
            status = lib.flux_wait_for(d, ring[(i + 1) % 3], 1)
            if status == lib.FLUX_ERR_CIRCULAR:
                length = lib.flux_last_error_cycle(ffi.NULL, 0)
                cycle = ffi.new("flux_token[]", length)
                lib.flux_last_error_cycle(cycle, length)
                seen.update(token=lib.flux_last_error_token(), cycle=list(cycle))
            return 0

        return ffi.callback("int(void *, const void *)", waits)

    callbacks = [make(i) for i in range(3)]
    for i in range(3):
        assert lib.flux_register(d, callbacks[i], ffi.NULL, ffi.NULL, ring[i]) == lib.FLUX_OK
    assert lib.flux_dispatch(d, ffi.NULL) == lib.FLUX_OK
    a, b, c = (t[0] for t in ring)
    assert seen == {"token": a, "cycle": [c, a, b, c]}
    assert lib.flux_dispatcher_destroy(d) == lib.FLUX_OK


def test_the_cdef_tool_refuses_a_computed_integer_constant(tmp_path: Path) -> None:
    header = tmp_path / "computed.h"
    header.write_text("#define FLUX_A 1\n#define FLUX_B (FLUX_A + 1)\nint flux_f(void);\n")
    result = subprocess.run(
        [
            sys.executable,
            str(REPO / "support" / "cdef.py"),
            str(header),
            str(tmp_path / "out.h"),
        ],
        capture_output=True,
        text=True,
        check=False,
        env=dict(os.environ),
    )
    assert result.returncode == 1
    assert "FLUX_B" in result.stderr and "not an integer literal" in result.stderr
