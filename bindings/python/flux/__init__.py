"""flux: Facebook's Flux dispatcher, backed by libflux through ctypes.

::

    import flux

    with flux.Dispatcher() as d:
        countries = d.register(lambda action: ...)
        d.register(lambda action: d.wait_for([countries]))
        d.dispatch({"type": "country-update", "country": "australia"})

Every payload goes to every registered callback, in registration order; a
callback can first let other callbacks run with ``wait_for``. See
:class:`Dispatcher` for the rules, and ``include/flux.h`` in the libflux
repository for the C semantics underneath.

The package loads ``libflux.so`` at import, from the first of: the path in
``$FLUX_LIBRARY``; a copy inside this package; the repository's
``build/lib/libflux.so`` (when run from the source tree); the system loader.
"""

from __future__ import annotations

from . import _native
from .dispatcher import Dispatcher, Token
from .trampoline import Trampoline, call
from .errors import (
    AlreadyDispatchingError,
    CallbackFailedError,
    CircularDependencyError,
    FluxError,
    InvalidArgumentError,
    NoMemoryError,
    NotDispatchingError,
    Status,
    TooDeepError,
    UnknownTokenError,
)

__all__ = [
    "Dispatcher",
    "Token",
    "Trampoline",
    "call",
    "Status",
    "FluxError",
    "InvalidArgumentError",
    "UnknownTokenError",
    "AlreadyDispatchingError",
    "NotDispatchingError",
    "CircularDependencyError",
    "CallbackFailedError",
    "NoMemoryError",
    "TooDeepError",
    "library_path",
    "library_version",
    "library_version_string",
    "__version__",
]

#: The version of this binding; its major number is the libflux major it needs.
__version__ = "0.1.0"

#: Where libflux was loaded from.
library_path: str = _native.library_path


def library_version() -> int:
    """libflux's ``flux_version()``: MAJOR*10000 + MINOR*100 + PATCH."""
    return int(_native.flux_version())


def library_version_string() -> str:
    """libflux's ``flux_version_string()``, e.g. ``"0.1.0"``."""
    raw = _native.flux_version_string()
    return raw.decode("ascii", "replace") if raw else ""
