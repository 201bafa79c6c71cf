"""The binding against include/flux.h, the one source of truth: Python's
Status and version are copies, so these tests read the header itself."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import flux
from flux import _native
from flux import trampoline as tr
from flux.errors import error_for_status

HEADER = Path(__file__).resolve().parents[3] / "include" / "flux.h"

pytestmark = pytest.mark.skipif(not HEADER.exists(), reason="not run from a libflux checkout")


def header_text() -> str:
    return HEADER.read_text()


def header_statuses() -> dict[str, int]:
    """FLUX_* = N inside `typedef enum flux_status { ... }`."""
    block = re.search(r"typedef enum flux_status \{(.*?)\} flux_status;", header_text(), re.DOTALL)
    assert block is not None, "no flux_status enum in flux.h"
    body = re.sub(r"/\*.*?\*/", "", block.group(1), flags=re.DOTALL)
    pairs = re.findall(r"\b(FLUX_\w+)\s*=\s*(\d+)", body)
    assert pairs, "no enumerators found"
    return {name: int(value) for name, value in pairs}


def header_version() -> tuple[int, int, int]:
    def field(name: str) -> int:
        match = re.search(rf"^#define FLUX_VERSION_{name} (\d+)$", header_text(), re.MULTILINE)
        assert match is not None, f"no FLUX_VERSION_{name} in flux.h"
        return int(match.group(1))

    return field("MAJOR"), field("MINOR"), field("PATCH")


def test_status_is_exactly_the_headers_enum() -> None:
    assert {status.c_name: int(status) for status in flux.Status} == header_statuses()


def test_the_library_names_every_status_of_the_header() -> None:
    # flux_status_name's table (Sources/CFlux/cflux.h) must list every code.
    for name, value in header_statuses().items():
        raw = _native.flux_status_name(value)
        assert raw is not None and raw.decode() == name
    assert _native.flux_status_name(max(header_statuses().values()) + 1) == b"FLUX_ERR_UNKNOWN"


def test_every_error_status_has_its_own_exception_class() -> None:
    for name, value in header_statuses().items():
        if value == 0:
            continue
        error = error_for_status(value, "m")
        assert type(error) is not flux.FluxError, name
        assert error.status == value and error.status_name == name


def test_the_binding_version_is_the_headers() -> None:
    major, minor, patch = header_version()
    assert flux.__version__ == f"{major}.{minor}.{patch}"
    assert _native.BINDING_MAJOR == major
    assert _native.BINDING_ABI == (f"0.{minor}" if major == 0 else str(major))


def test_the_library_version_is_the_headers() -> None:
    major, minor, patch = header_version()
    assert flux.library_version == major * 10000 + minor * 100 + patch
    assert flux.library_version_string == f"{major}.{minor}.{patch}"


def test_the_package_quotes_no_other_version() -> None:
    # A version written in the package's source or comments (an example, say)
    # is the header's: none is left behind by a release.
    version = ".".join(str(part) for part in header_version())
    package = Path(flux.__file__).parent
    quoted = {
        (path.name, found)
        for path in sorted(package.glob("*.py"))
        for found in re.findall(r"\b\d+\.\d+\.\d+\b", path.read_text(encoding="utf-8"))
    }
    assert {found for _, found in quoted} <= {version}, sorted(quoted)


def test_the_version_string_is_a_literal() -> None:
    # Importers that read macros but do not expand them (Swift's, ctypesgen,
    # which warns on a stringized one) see FLUX_VERSION_STRING only as a
    # plain string literal; it must still say the header's version.
    match = re.search(r'^#define FLUX_VERSION_STRING "([^"]*)"$', header_text(), re.MULTILINE)
    assert match is not None, "FLUX_VERSION_STRING in flux.h is not a string literal"
    assert match.group(1) == ".".join(str(part) for part in header_version())


def test_every_constant_of_the_header_is_a_literal() -> None:
    # The README promises it: object-like FLUX_ macros are integer or string
    # literals (function-like ones are helpers, not constants), so importers
    # that do not expand macros see every constant.
    defines = re.findall(r"^#define (FLUX_\w+)(\(?)(.*?)$", header_text(), re.MULTILINE)
    constants = {name: value.strip() for name, paren, value in defines if not paren and value.strip()}
    assert "FLUX_VERSION_NUMBER" in constants and "FLUX_CLOSURE_RET_SIZE" in constants
    computed = {name: value for name, value in constants.items() if not re.fullmatch(r'\d+|"[^"]*"', value)}
    assert computed == {}, computed


def test_library_facts_are_plain_values_like_library_path() -> None:
    assert isinstance(flux.library_path, str)
    assert type(flux.library_version) is int
    assert type(flux.library_version_string) is str


def test_the_signature_argument_limit_is_the_headers() -> None:
    match = re.search(r"^#define FLUX_SIGNATURE_MAX_ARGS (\d+)$", header_text(), re.MULTILINE)
    assert match is not None, "no FLUX_SIGNATURE_MAX_ARGS in flux.h"
    assert tr._MAX_ARGS == int(match.group(1))
