"""Bundles libflux.so into the wheel when one is at hand.

All metadata is in pyproject.toml; this file only adds one build step. When
``pip install ./bindings/python`` (or ``pip wheel``) runs after ``make lib``,
the library at ``$FLUX_LIBRARY`` or else ``../../build/lib/libflux.so`` is
copied into the package as ``flux/libflux.so`` -- the second place the loader
looks -- and the wheel is tagged for this platform. Set ``FLUX_NO_BUNDLE=1``
to build a pure wheel that uses the system's libflux (``make install``).
"""

from __future__ import annotations

import os
import shutil
import sys

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

HERE = os.path.dirname(os.path.abspath(__file__))


def library_to_bundle() -> str | None:
    if os.environ.get("FLUX_NO_BUNDLE"):
        return None
    explicit = os.environ.get("FLUX_LIBRARY")
    if explicit:
        return explicit
    built = os.path.join(HERE, os.pardir, os.pardir, "build", "lib", "libflux.so")
    return built if os.path.exists(built) else None


LIBRARY = library_to_bundle()


class BuildPy(build_py):
    def run(self) -> None:
        super().run()
        if LIBRARY is None:
            sys.stderr.write(
                "flux: no libflux.so to bundle (run `make lib` first, or set FLUX_LIBRARY); "
                "the installed package will use $FLUX_LIBRARY or the system's libflux\n"
            )
            return
        target = os.path.join(self.build_lib, "flux", "libflux.so")
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copyfile(os.path.realpath(LIBRARY), target)
        os.chmod(target, 0o755)


class BinaryDistribution(Distribution):
    """A wheel that carries libflux.so is platform-specific."""

    def has_ext_modules(self) -> bool:
        return LIBRARY is not None


cmdclass: dict[str, type] = {"build_py": BuildPy}

try:
    try:
        from setuptools.command.bdist_wheel import bdist_wheel
    except ImportError:
        from wheel.bdist_wheel import bdist_wheel  # type: ignore[no-redef]

    class BdistWheel(bdist_wheel):  # type: ignore[misc, valid-type]
        def get_tag(self) -> tuple[str, str, str]:
            python, abi, plat = super().get_tag()
            # ctypes only: any CPython 3 will do, but the library is native.
            return ("py3", "none", plat) if LIBRARY is not None else (python, abi, plat)

    cmdclass["bdist_wheel"] = BdistWheel
except ImportError:
    pass

setup(cmdclass=cmdclass, distclass=BinaryDistribution)
