"""Finding libflux: the search order, the version check, the ImportError."""

from __future__ import annotations

import ctypes.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import flux
from flux import _native

PACKAGE = Path(flux.__file__).resolve().parent
REPO_LIBRARY = Path(_native._BUILD_TREE_LIBRARY)
PROBE = "import flux; print(flux.library_path)"
#: The binding's version as flux_version() reports it.
BINDING_NUMBER = sum(int(part) * scale for part, scale in zip(flux.__version__.split("."), (10000, 100, 1)))


def run(code: str, pythonpath: Path, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if k not in ("FLUX_LIBRARY", "PYTHONPATH")}
    environ.update(env, PYTHONPATH=str(pythonpath))
    return subprocess.run(
        [sys.executable, "-c", code], env=environ, capture_output=True, text=True, timeout=60, check=False
    )


def copy_package(tmp_path: Path, with_library: Path | None = None) -> Path:
    """A copy of the package outside the repository (so no build tree)."""
    root = tmp_path / "site"
    shutil.copytree(PACKAGE, root / "flux", ignore=shutil.ignore_patterns("libflux.so*", "__pycache__"))
    if with_library is not None:
        shutil.copyfile(with_library, root / "flux" / "libflux.so")
    return root


@pytest.fixture(scope="module")
def fakes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Tiny shared libraries that are not a usable libflux."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler")
    out = tmp_path_factory.mktemp("fakes")
    sources = {
        "future": "unsigned flux_version(void) { return 10203; }",  # 1.2.3
        "older": "unsigned flux_version(void) { return 105; }",  # 0.1.5: another 0.x ABI
        "alien": "int something_else(void) { return 0; }",
        # The binding's own version, and no other function of libflux.
        "partial": f"unsigned flux_version(void) {{ return {BINDING_NUMBER}; }}",
    }
    libs = {}
    for name, source in sources.items():
        (out / f"{name}.c").write_text(source + "\n")
        lib = out / f"lib{name}.so"
        subprocess.run([cc, "-shared", "-fPIC", "-o", str(lib), str(out / f"{name}.c")], check=True)
        libs[name] = lib
    return libs


def test_the_library_is_libflux_of_the_same_abi() -> None:
    assert flux.library_version // 10000 == _native.BINDING_MAJOR
    major, minor, patch = (int(x) for x in flux.library_version_string.split("."))
    assert major * 10000 + minor * 100 + patch == flux.library_version
    assert flux.__version__.split(".")[0] == str(_native.BINDING_MAJOR)
    assert _native.abi(major, minor) == _native.BINDING_ABI


def test_from_the_source_tree_the_build_tree_is_used() -> None:
    if list(PACKAGE.glob("libflux.so*")):
        pytest.skip("a copy of the library sits inside the package")
    result = run(PROBE, PACKAGE.parent)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == str(REPO_LIBRARY)


def test_flux_library_comes_first() -> None:
    real = REPO_LIBRARY.resolve()
    result = run(PROBE, PACKAGE.parent, FLUX_LIBRARY=str(real))
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == str(real)


def test_a_bad_flux_library_is_an_import_error_not_a_fallback() -> None:
    result = run(PROBE, PACKAGE.parent, FLUX_LIBRARY="/nonexistent/libflux.so")
    assert result.returncode != 0
    assert "ImportError" in result.stderr
    assert "/nonexistent/libflux.so" in result.stderr
    assert "make lib" in result.stderr


def test_a_copy_inside_the_package_comes_before_the_build_tree(tmp_path: Path) -> None:
    root = copy_package(tmp_path, with_library=REPO_LIBRARY.resolve())
    result = run(PROBE, root)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == str(root / "flux" / "libflux.so")


def test_nothing_found_names_every_place_tried_and_how_to_build(tmp_path: Path) -> None:
    if ctypes.util.find_library("flux"):
        pytest.skip("a libflux is installed on this system")
    # A copy of the package as pip installs it: no checkout around it.
    root = copy_package(tmp_path)
    result = run(PROBE, root)
    assert result.returncode != 0
    message = result.stderr[result.stderr.index("ImportError") :]
    for place in ("$FLUX_LIBRARY", "inside the package", "find_library", "make lib"):
        assert place in message, message
    # In order.
    assert message.index("$FLUX_LIBRARY") < message.index("inside the package") < message.index("find_library")
    # No made-up path of a build tree that cannot exist around an installed
    # package; instead, what to set for a library under another prefix.
    assert "build tree" not in message, message
    assert "FLUX_LIBRARY=PREFIX/lib/libflux.so" in message, message
    assert "ld.so.conf.d" in message, message


def test_in_a_checkout_the_build_tree_is_named_when_nothing_is_found(tmp_path: Path) -> None:
    if ctypes.util.find_library("flux"):
        pytest.skip("a libflux is installed on this system")
    # A checkout with no library built: include/flux.h, bindings/python/flux.
    checkout = tmp_path / "libflux"
    (checkout / "include").mkdir(parents=True)
    shutil.copyfile(PACKAGE.parents[2] / "include" / "flux.h", checkout / "include" / "flux.h")
    root = copy_package(tmp_path)
    (checkout / "bindings").mkdir()
    shutil.move(str(root), str(checkout / "bindings" / "python"))
    result = run(PROBE, checkout / "bindings" / "python")
    assert result.returncode != 0
    message = result.stderr[result.stderr.index("ImportError") :]
    assert f"the build tree, {checkout / 'build' / 'lib' / 'libflux.so'}: does not exist" in message, message
    assert message.index("inside the package") < message.index("build tree") < message.index("find_library")


def test_a_different_major_version_is_refused(fakes: dict[str, Path]) -> None:
    result = run(PROBE, PACKAGE.parent, FLUX_LIBRARY=str(fakes["future"]))
    assert result.returncode != 0
    assert "ImportError" in result.stderr and "1.2.3" in result.stderr
    assert f"ABI version {_native.BINDING_ABI}" in result.stderr


def test_another_minor_version_while_major_is_0_is_refused(fakes: dict[str, Path]) -> None:
    # flux.h, "Versioning": while the major number is 0, 0.1 and 0.2 differ
    # in ABI (flux_enqueue's done gained a context in 0.2).
    assert _native.BINDING_ABI != "0.1"
    result = run(PROBE, PACKAGE.parent, FLUX_LIBRARY=str(fakes["older"]))
    assert result.returncode != 0
    assert "ImportError" in result.stderr and "0.1.5" in result.stderr
    assert f"ABI version {_native.BINDING_ABI}" in result.stderr


def test_a_library_that_is_not_libflux_is_refused(fakes: dict[str, Path]) -> None:
    result = run(PROBE, PACKAGE.parent, FLUX_LIBRARY=str(fakes["alien"]))
    assert result.returncode != 0
    assert "not libflux" in result.stderr


def test_an_unusable_package_copy_is_skipped_for_the_next_place(tmp_path: Path, fakes: dict[str, Path]) -> None:
    root = copy_package(tmp_path, with_library=fakes["future"])
    result = run(PROBE, root)
    if result.returncode == 0:  # found further down (a system libflux)
        assert result.stdout.strip() != str(root / "flux" / "libflux.so")
    else:
        # Refused for its version; the search went on to the next place.
        assert "1.2.3" in result.stderr and 'find_library("flux")' in result.stderr


def test_a_library_missing_a_function_is_an_import_error(fakes: dict[str, Path]) -> None:
    # flux_version() says the right ABI, but the rest is missing: an
    # ImportError naming what is missing, not an AttributeError from deep
    # in the declarations.
    result = run(PROBE, PACKAGE.parent, FLUX_LIBRARY=str(fakes["partial"]))
    assert result.returncode != 0
    assert "AttributeError" not in result.stderr, result.stderr
    assert "ImportError" in result.stderr and "flux_last_error" in result.stderr, result.stderr
    assert "make lib" in result.stderr


def test_a_package_copy_missing_a_function_is_skipped_for_the_next_place(
    tmp_path: Path, fakes: dict[str, Path]
) -> None:
    root = copy_package(tmp_path, with_library=fakes["partial"])
    result = run(PROBE, root)
    assert "AttributeError" not in result.stderr, result.stderr
    if result.returncode == 0:  # found further down (a system libflux)
        assert result.stdout.strip() != str(root / "flux" / "libflux.so")
    else:
        assert "flux_last_error" in result.stderr and 'find_library("flux")' in result.stderr, result.stderr
