"""The build step pyproject.toml cannot state: libflux.so goes inside the wheel.

A wheel of this package always carries the library, or says how it finds one:

* ``$FLUX_LIBRARY`` set: that file is bundled.
* Otherwise, from a libflux checkout (``pip install ./bindings/python``):
  ``make lib`` runs at the checkout's root (a no-op when the library is up to
  date; otherwise it needs the Swift toolchain, see the top-level README) and
  ``build/lib/libflux.so`` is bundled. If it cannot be built, the install
  fails and says why: never a package that fails at import.
* ``FLUX_NO_BUNDLE=1``: a pure wheel (``py3-none-any``) that uses the
  system's libflux (``make install``); the build fails unless the system
  loader finds one now.

A wheel with the library is tagged ``py3-none-<platform>`` (``linux_x86_64``):
any CPython 3 will do (ctypes only), but the library is native code for
this platform, and it needs glibc and libffi 8 (see README.md).
"""

from __future__ import annotations

import ctypes.util
import os
import shutil
import subprocess
from typing import Any

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, os.pardir, os.pardir))
NO_BUNDLE = bool(os.environ.get("FLUX_NO_BUNDLE"))


def fail(message: str) -> None:
    raise SystemExit(f"libflux: {message}")


def is_checkout(root: str) -> bool:
    return all(os.path.exists(os.path.join(root, name)) for name in ("Makefile", "Package.swift", "include/flux.h"))


def library_to_bundle() -> str:
    explicit = os.environ.get("FLUX_LIBRARY")
    if explicit:
        if not os.path.isfile(explicit):
            fail(f"FLUX_LIBRARY={explicit!r} is not a file")
        return explicit
    if not is_checkout(ROOT):
        fail(
            f"{ROOT} is not a libflux checkout, so there is no library to bundle: set FLUX_LIBRARY to a "
            "built libflux.so, or FLUX_NO_BUNDLE=1 to use the system's libflux (make install)"
        )
    # Up to date in a second when it is; a release build otherwise.
    result = subprocess.run(["make", "-C", ROOT, "lib"], check=False)
    built = os.path.join(ROOT, "build", "lib", "libflux.so")
    if result.returncode != 0 or not os.path.exists(built):
        fail(
            f"`make lib` in {ROOT} failed (exit {result.returncode}), so there is no libflux.so to bundle. "
            "It needs the Swift toolchain on PATH, make, a C compiler and libffi-dev (see README.md); "
            "or set FLUX_LIBRARY to a built libflux.so"
        )
    return built


class BuildPy(build_py):
    def run(self) -> None:
        super().run()
        if NO_BUNDLE:
            if not ctypes.util.find_library("flux"):
                fail("FLUX_NO_BUNDLE=1, but the system loader finds no libflux (run `make install` first)")
            return
        target = os.path.join(self.build_lib, "flux", "libflux.so")
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copyfile(os.path.realpath(library_to_bundle()), target)
        os.chmod(target, 0o755)


class BinaryDistribution(Distribution):
    """A wheel that carries libflux.so is platform-specific."""

    def has_ext_modules(self) -> bool:
        return not NO_BUNDLE


cmdclass: dict[str, Any] = {"build_py": BuildPy}

try:
    try:
        from setuptools.command.bdist_wheel import bdist_wheel
    except ImportError:
        from wheel.bdist_wheel import bdist_wheel

    class BdistWheel(bdist_wheel):  # type: ignore[misc]
        def get_tag(self) -> tuple[str, str, str]:
            python, abi, plat = super().get_tag()
            # ctypes only: any CPython 3, no CPython ABI; the platform is the library's.
            return (python, abi, plat) if NO_BUNDLE else ("py3", "none", plat)

    cmdclass["bdist_wheel"] = BdistWheel
except ImportError:
    pass

setup(cmdclass=cmdclass, distclass=BinaryDistribution)
