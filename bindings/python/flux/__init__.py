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
from ._version import __version__
from .dispatcher import Dispatcher, Token
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
    UnknownStoreError,
    UnknownTokenError,
)
from .stores import Action, ReduceStore, Store, StoreGroup, Subscription, handles
from .trace import Trace, TraceEvent
from .trampoline import Trampoline, call

__all__ = [
    "Action",
    "AlreadyDispatchingError",
    "CallbackFailedError",
    "CircularDependencyError",
    "Dispatcher",
    "FluxError",
    "InvalidArgumentError",
    "NoMemoryError",
    "NotDispatchingError",
    "ReduceStore",
    "Status",
    "Store",
    "StoreGroup",
    "Subscription",
    "Token",
    "TooDeepError",
    "Trace",
    "TraceEvent",
    "Trampoline",
    "UnknownStoreError",
    "UnknownTokenError",
    "__version__",
    "call",
    "handles",
    "library_path",
    "library_version",
    "library_version_string",
]

#: Where the libflux this process loaded is.
library_path: str = _native.library_path
#: Its ``flux_version()``: MAJOR*10000 + MINOR*100 + PATCH.
library_version: int = _native.library_version
#: Its ``flux_version_string()``: ``"MAJOR.MINOR.PATCH"``, as the header's FLUX_VERSION_STRING.
library_version_string: str = _native.library_version_string
