"""Running test code on threads of its own, for the tests that must not hang
the suite when what they test deadlocks."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import Any


def all_return(target: Callable[[Any], None], args: Iterable[Any], timeout: float = 1.5) -> bool:
    """Runs target(arg) for each arg on a thread of its own, all at once;
    whether every one returned within ``timeout`` (a stuck one is a daemon,
    left behind)."""
    threads = [threading.Thread(target=target, args=(arg,), daemon=True) for arg in args]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=timeout)
    return not any(thread.is_alive() for thread in threads)
