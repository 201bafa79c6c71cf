from __future__ import annotations

import gc
import signal
from collections.abc import Iterator
from typing import Any

import pytest

import flux
from flux import _native
from flux.dispatcher import live_callbacks


def pytest_configure(config: pytest.Config) -> None:
    """Undoes what the parent may have left that the tests rely on not being
    there (an ignored disposition and the signal mask survive exec): with
    SIGCHLD ignored every child "exits 0" (subprocess reads a child it
    cannot wait for as a success), with SIGALRM or SIGINT blocked or ignored
    the signal tests see nothing. Children the tests start inherit this.
    SIGPIPE and SIGXFSZ stay ignored, as Python itself leaves them."""
    signal.pthread_sigmask(signal.SIG_SETMASK, ())
    for sig in signal.valid_signals():
        if sig in (signal.SIGPIPE, signal.SIGXFSZ) or signal.getsignal(sig) != signal.SIG_IGN:
            continue
        signal.signal(sig, signal.default_int_handler if sig == signal.SIGINT else signal.SIG_DFL)


@pytest.fixture
def d() -> Iterator[flux.Dispatcher[Any]]:
    """A fresh dispatcher, closed after the test; all its callbacks released."""
    dispatcher: flux.Dispatcher[Any] = flux.Dispatcher()
    yield dispatcher
    dispatcher.close()
    assert live_callbacks(dispatcher) == 0


@pytest.fixture(autouse=True)
def library_kept_its_contract() -> Iterator[None]:
    """No trampoline was ever called with a context it does not know: libflux
    called no callback after its destroy, and no destroy twice."""
    yield
    gc.collect()
    assert _native.stray == {"callback": 0, "destroy": 0}


@pytest.fixture
def native_destroys(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Every native dispatcher destroyed from now on, by its handle."""
    from flux import dispatcher as dispatcher_module

    destroyed: list[int] = []
    real = _native.flux_dispatcher_destroy_raw

    def destroy(handle: int) -> int:
        destroyed.append(handle)
        return int(real(handle))

    monkeypatch.setattr(dispatcher_module, "_flux_dispatcher_destroy_raw", destroy)
    return destroyed
