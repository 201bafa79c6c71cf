"""flux.Trampoline and flux.call: native callbacks and calls by run-time
signature (libflux's flux_closure_* and flux_call)."""

from __future__ import annotations

import copy
import ctypes
import gc
import pickle
import re
import sys
import threading
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import flux
from flux import trampoline as tr

LETTER_VALUES: dict[str, list[float]] = {
    "i": [-(2**31), -1, 0, 2**31 - 1],
    "I": [0, 1, 2**32 - 1],
    "l": [-(2**63), -5, 2**63 - 1],
    "L": [0, 2**64 - 1],
    "z": [0, 12345, 2**64 - 1],
    "f": [0.0, -1.5, 3.25],
    "d": [0.0, -1e300, 2.5e-300],
    "p": [0, 0xDEADBEEF, 2**64 - 1],
}


@pytest.mark.parametrize("letter", sorted(LETTER_VALUES))
def test_every_type_round_trips_as_argument_and_as_return(letter: str) -> None:
    seen: list[object] = []

    def handler(value: object) -> object:
        seen.append(value)
        return value

    with flux.Trampoline(f"{letter}({letter})", handler) as t:
        for value in LETTER_VALUES[letter]:
            assert flux.call(t.address, f"{letter}({letter})", value) == value
    assert seen == LETTER_VALUES[letter]


def test_mixed_signature_of_eight_arguments() -> None:
    def handler(i: int, f: float, d: float, l: int, p: int, z: int, I: int, L: int) -> float:
        return i + f + d + l + p + z + I + L

    sig = "d(ifdlpzIL)"
    with flux.Trampoline(sig, handler) as t:
        assert flux.call(t.address, sig, -1, 0.5, 0.25, -(2**40), 16, 32, 64, 2**40) == pytest.approx(
            -1 + 0.5 + 0.25 + 16 + 32 + 64
        )


def test_void_return_and_no_arguments() -> None:
    calls: list[str] = []
    with flux.Trampoline("v()", lambda: calls.append("called")) as t:
        assert flux.call(t.address, "v()") is None
        assert t() is None
    assert calls == ["called", "called"]


def test_calls_a_c_function_by_run_time_signature() -> None:
    libc = ctypes.CDLL(None)
    labs = ctypes.cast(libc.labs, ctypes.c_void_p).value
    strlen = ctypes.cast(libc.strlen, ctypes.c_void_p).value
    assert labs is not None and strlen is not None
    assert flux.call(labs, "l(l)", -42) == 42
    text = ctypes.create_string_buffer(b"flux dispatcher")
    assert flux.call(strlen, "z(p)", ctypes.addressof(text)) == 15


def test_call_releases_the_gil_and_a_handler_it_reaches_holds_it_again() -> None:
    # call()'s docstring: "The call releases the GIL". Asked of CPython itself:
    # PyGILState_Check() answers whether the calling thread holds the GIL,
    # so through call() it must answer 0 -- and a trampoline's handler it
    # calls runs as Python, holding it.
    check = ctypes.cast(ctypes.pythonapi.PyGILState_Check, ctypes.c_void_p).value
    assert check is not None and ctypes.pythonapi.PyGILState_Check() == 1
    assert flux.call(check, "i()") == 0
    held: list[int] = []
    with flux.Trampoline("v()", lambda: held.append(ctypes.pythonapi.PyGILState_Check())) as t:
        t()
    assert held == [1]


def test_many_trampolines_share_one_native_handler_each_with_its_own_callable() -> None:
    trampolines = [flux.Trampoline("i(i)", lambda x, k=k: x + k) for k in range(1000)]
    try:
        assert [flux.call(t.address, "i(i)", 1) for t in trampolines] == list(range(1, 1001))
        assert len({t.address for t in trampolines}) == 1000
    finally:
        for t in trampolines:
            t.close()


@pytest.mark.parametrize(
    "signature, position",
    [
        ("", "position 0"),
        ("i", "position 1"),
        ("x()", "position 0"),
        ("i(v)", "position 2"),
        ("i()x", "position 3"),
        ("ii()", "position 1"),
        ("i(p", "position 3"),
        ("i(px)", "position 3"),
    ],
)
def test_malformed_signatures_name_the_position(signature: str, position: str) -> None:
    before = tr.live_closures()
    with pytest.raises(flux.InvalidArgumentError, match=position):
        flux.Trampoline(signature, lambda *a: 0)
    with pytest.raises(flux.InvalidArgumentError, match=position):
        flux.call(1, signature)
    assert tr.live_closures() == before  # nothing left behind


@pytest.mark.parametrize("signature", ["i(p)\x00", "i(p)\x00junk", "\x00", "v()\x00v()"])
def test_an_embedded_nul_is_refused_and_nothing_leaks(monkeypatch: pytest.MonkeyPatch, signature: str) -> None:
    # libflux reads a C string and would accept the part before the NUL: the
    # binding refuses it, and no native closure is made (or, if one were,
    # it is destroyed): every closure created is destroyed.
    created: list[int | None] = []
    destroyed: list[int | None] = []

    # Both declarations of each: the checked one and the no-errcheck twin
    # Trampoline uses (_native.declare_raw).
    for suffix in ("", "_raw"):
        real_create = getattr(tr, "_closure_create" + suffix)
        real_destroy = getattr(tr, "_closure_destroy" + suffix)

        def create(text, handler, userdata, destroy, out, real_create=real_create):  # type: ignore[no-untyped-def]
            status = real_create(text, handler, userdata, destroy, out)
            created.append(ctypes.cast(out, ctypes.POINTER(ctypes.c_void_p)).contents.value)
            return status

        def destroy(closure, real_destroy=real_destroy):  # type: ignore[no-untyped-def]
            destroyed.append(closure)
            return real_destroy(closure)

        monkeypatch.setattr(tr, "_closure_create" + suffix, create)
        monkeypatch.setattr(tr, "_closure_destroy" + suffix, destroy)
    before = tr.live_closures()
    with pytest.raises(flux.InvalidArgumentError, match="embedded NUL at position"):
        flux.Trampoline(signature, lambda *a: 0)
    with pytest.raises(flux.InvalidArgumentError, match="embedded NUL at position"):
        flux.call(1, signature)
    assert tr.live_closures() == before
    assert set(created) <= set(destroyed)


@pytest.mark.parametrize(
    "signature, found, position",
    [("é()", "é", 0), ("i(pé)", "é", 3), ("i()\u200b", "\\u200B", 3), ("i(\U0001f600)", "\U0001f600", 2)],
)
def test_a_non_ascii_character_is_named_as_given_at_its_position(signature: str, found: str, position: int) -> None:
    # libflux sees bytes, and would name the first byte of the character's
    # UTF-8 encoding; the binding refuses it in libflux's words, as given.
    before = tr.live_closures()
    for function, make in (
        ("flux_closure_create", lambda: flux.Trampoline(signature, lambda *a: 0)),
        ("flux_call", lambda: flux.call(1, signature)),
    ):
        with pytest.raises(flux.InvalidArgumentError) as info:
            make()
        assert str(info.value).startswith(f'{function}: signature "')
        assert f"unexpected '{found}' at position {position} " in str(info.value)
        assert "?" not in str(info.value)
        assert info.value.status == flux.Status.ERR_INVALID_ARGUMENT
    assert tr.live_closures() == before


@pytest.mark.parametrize("signature", ["i(q)", "", "i(p", "ii()", "i()x"])
def test_a_malformed_signature_is_refused_in_the_words_of_the_function_called(signature: str) -> None:
    # flux.call goes through flux_call, a Trampoline through
    # flux_closure_create: each message is that function's own.
    with pytest.raises(flux.InvalidArgumentError) as info:
        flux.call(1, signature)
    assert str(info.value).startswith(f'flux_call: signature "{signature}": ')
    with pytest.raises(flux.InvalidArgumentError) as info:
        flux.Trampoline(signature, lambda *a: 0)
    assert str(info.value).startswith(f'flux_closure_create: signature "{signature}": ')
    # The signature is judged before the address, 0 included.
    with pytest.raises(flux.InvalidArgumentError, match="^flux_call: signature"):
        flux.call(0, signature)


def test_more_than_sixteen_arguments_is_refused() -> None:
    before = tr.live_closures()
    with pytest.raises(flux.InvalidArgumentError, match="too many arguments"):
        flux.Trampoline("v(" + "i" * 17 + ")", lambda *a: None)
    with pytest.raises(flux.InvalidArgumentError, match="too many arguments"):
        flux.call(1, "v(" + "i" * 17 + ")", *range(17))
    assert tr.live_closures() == before


def test_too_many_arguments_is_the_librarys_refusal_whatever_the_arguments_given() -> None:
    # The limit is part of a signature's shape: flux_call refuses it before
    # the arguments are counted, showing what libflux shows of a signature
    # (64 characters), however long it is.
    for letters in (17, 10**6):
        signature = "v(" + "p" * letters + ")"
        for count in (0, 3):
            with pytest.raises(flux.InvalidArgumentError) as info:
                flux.call(1, signature, *range(count))
            shown = signature if letters == 17 else signature[:64] + "..."
            assert str(info.value).startswith(
                f'flux_call: signature "{shown}": too many arguments: argument 17 at position 18; at most 16'
            )
            assert len(str(info.value)) < 300


@pytest.mark.parametrize(
    "signature, position",
    [
        ("q(\u00e9)", 0),  # the return letter is wrong before the 'é'
        ("x(p\x00)", 0),
        ("i)\u00e9", 1),
        ("v(v\x00)", 2),
        ("i(p)x\u00e9", 4),  # after the closing ')'
        ("v(" + "i" * 17 + "\x00)", 18),  # too many arguments
    ],
)
def test_the_first_error_is_named_when_a_nul_or_non_ascii_character_comes_after_it(
    signature: str, position: int
) -> None:
    # libflux's parser names the first error: one before the character it
    # cannot see is named in its words, as if any ASCII character stood there.
    bad = next(char for char in signature if char == "\x00" or not char.isascii())
    for function, make in (
        ("flux_closure_create", lambda s: flux.Trampoline(s, lambda *a: 0)),
        ("flux_call", lambda s: flux.call(1, s)),
    ):
        with pytest.raises(flux.InvalidArgumentError) as info:
            make(signature)
        with pytest.raises(flux.InvalidArgumentError) as ascii_info:
            make(signature.replace(bad, "#"))  # libflux sees all of this one
        problem = str(ascii_info.value).split('": ', 1)[1]
        assert f" at position {position}" in problem
        assert str(info.value) == f'{function}: signature "{tr._shown(signature)}": {problem}'


def test_a_character_beyond_the_64_shown_is_not_shown() -> None:
    # libflux shows 64 characters of a signature: an error before a
    # non-ASCII character at position 64 reads as libflux's own message.
    signature = "v(" + "i" * 17 + "#" * 45 + "\u00e9"
    assert len(signature) == 65
    for make in (lambda s: flux.Trampoline(s, lambda *a: 0), lambda s: flux.call(1, s)):
        with pytest.raises(flux.InvalidArgumentError) as info:
            make(signature)
        with pytest.raises(flux.InvalidArgumentError) as ascii_info:
            make(signature[:64] + "#")
        assert str(info.value) == str(ascii_info.value)
        assert '#..."' in str(info.value)


def test_bad_arguments_are_refused_before_reaching_c() -> None:
    with pytest.raises(TypeError):
        flux.Trampoline("i()", 42)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        flux.Trampoline(b"i()", lambda: 0)  # type: ignore[arg-type]
    with flux.Trampoline("i(i)", lambda x: x) as t:
        with pytest.raises(TypeError, match="takes 1 arguments, got 2"):
            flux.call(t.address, "i(i)", 1, 2)
        # Too few too: C would read an argument past the array.
        with pytest.raises(TypeError, match="takes 1 arguments, got 0"):
            flux.call(t.address, "i(i)")
        with pytest.raises(OverflowError):
            flux.call(t.address, "i(i)", 2**31)
        with pytest.raises(TypeError):
            flux.call(t.address, "i(i)", "1")
        with pytest.raises(TypeError):
            flux.call(str(t.address), "i(i)", 1)  # type: ignore[arg-type]
    with pytest.raises(flux.InvalidArgumentError, match="function is NULL"):
        flux.call(0, "i()")


def test_an_address_that_is_no_pointer_is_refused_before_reaching_c() -> None:
    # ctypes would wrap it: 2**64 read as NULL ("function is NULL"), 2**64 + a
    # as a (a call of it), -1 as the top of the address space (a crash).
    with flux.Trampoline("i(i)", lambda x: x) as t:
        with pytest.raises(OverflowError, match="address"):
            flux.call(2**64, "i()")
        with pytest.raises(OverflowError, match="address"):
            flux.call(2**64 + t.address, "i(i)", 1)
        with pytest.raises(OverflowError, match="address"):
            flux.call(-1, "i()")
        with pytest.raises(TypeError, match="address"):
            flux.call(True, "i(i)", 1)
        with pytest.raises(TypeError, match="address"):
            flux.call(None, "i()")  # type: ignore[arg-type]
        assert flux.call(t.address, "i(i)", 5) == 5


def test_an_exception_in_a_handler_is_unraisable_and_c_gets_zero(monkeypatch: pytest.MonkeyPatch) -> None:
    reported: list[Any] = []
    monkeypatch.setattr(sys, "unraisablehook", reported.append)

    def handler(x: int) -> float:
        raise ValueError(f"bad {x}")

    with flux.Trampoline("d(i)", handler) as t:
        assert flux.call(t.address, "d(i)", 7) == 0.0
    assert len(reported) == 1
    assert isinstance(reported[0].exc_value, ValueError)
    assert str(reported[0].exc_value) == "bad 7"
    assert any(repr(handler) in note for note in reported[0].exc_value.__notes__)


class ReprFails:
    """A handler whose repr raises, as a callable object's may."""

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc

    def __call__(self) -> int:
        raise self.exc

    def __repr__(self) -> str:
        raise RuntimeError("no repr")


def test_a_handler_whose_repr_raises_still_reports_its_own_exception(monkeypatch: pytest.MonkeyPatch) -> None:
    # The note naming the handler is cosmetic: a repr that raised replaced
    # the handler's exception in the report.
    reported: list[Any] = []
    monkeypatch.setattr(sys, "unraisablehook", reported.append)
    handler = ReprFails(ValueError("the handler's"))
    with flux.Trampoline("i()", handler) as t:
        assert flux.call(t.address, "i()") == 0
    assert len(reported) == 1 and reported[0].exc_value is handler.exc
    assert reported[0].exc_value.__notes__ == ["in the handler of a flux.Trampoline: <ReprFails object>"]


def test_an_interrupt_in_a_handler_whose_repr_raises_is_raised_by_the_call(monkeypatch: pytest.MonkeyPatch) -> None:
    # The repr's exception took the interrupt's place: printed as
    # unraisable, and call() returned 0 as if nothing had happened.
    monkeypatch.setattr(sys, "unraisablehook", flux._native._unraisable_hook)  # not pytest's
    interrupt = KeyboardInterrupt("the handler's")
    with flux.Trampoline("i()", ReprFails(interrupt)) as t, pytest.raises(KeyboardInterrupt) as raised:
        flux.call(t.address, "i()")
    assert raised.value is interrupt


def test_a_handler_s_exception_is_noted_where_exceptions_have_no_add_note(monkeypatch: pytest.MonkeyPatch) -> None:
    # As Python 3.10 makes exceptions (the package supports it):
    # the note naming the handler was dropped there; it goes on __notes__.
    class NoteLess(Exception):
        @property
        def add_note(self) -> Any:
            raise AttributeError("add_note")

    reported: list[Any] = []
    monkeypatch.setattr(sys, "unraisablehook", reported.append)

    def handler() -> int:
        raise NoteLess

    with flux.Trampoline("i()", handler) as t:
        assert flux.call(t.address, "i()") == 0
    assert len(reported) == 1 and isinstance(reported[0].exc_value, NoteLess)
    assert reported[0].exc_value.__notes__ == [f"in the handler of a flux.Trampoline: {handler!r}"]


def test_a_result_that_does_not_fit_is_reported_and_c_gets_zero(monkeypatch: pytest.MonkeyPatch) -> None:
    reported: list[Any] = []
    monkeypatch.setattr(sys, "unraisablehook", reported.append)
    with flux.Trampoline("i()", lambda: 2**40) as t:
        assert flux.call(t.address, "i()") == 0
    with flux.Trampoline("i()", lambda: None) as t:
        assert flux.call(t.address, "i()") == 0
    assert [type(r.exc_value) for r in reported] == [OverflowError, TypeError]


def test_none_is_a_null_pointer_as_argument_and_as_result(monkeypatch: pytest.MonkeyPatch) -> None:
    # As ctypes takes None for a c_void_p: NULL, and nothing reported.
    reported: list[Any] = []
    monkeypatch.setattr(sys, "unraisablehook", reported.append)
    seen: list[int] = []
    with flux.Trampoline("p(p)", lambda p: seen.append(p)) as t:
        assert flux.call(t.address, "p(p)", None) == 0
    assert seen == [0]
    assert reported == []


def test_a_float_too_large_for_f_is_refused_and_as_a_result_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    # ctypes makes it an infinity; 'f' is C's float, and a finite value
    # beyond it does not fit, as 2**40 does not fit 'i'.
    reported: list[Any] = []
    monkeypatch.setattr(sys, "unraisablehook", reported.append)
    with flux.Trampoline("f(f)", lambda x: x) as t:
        with pytest.raises(OverflowError, match="argument 1"):
            flux.call(t.address, "f(f)", 1e300)
        assert flux.call(t.address, "f(f)", 3.4e38) == pytest.approx(3.4e38, rel=1e-6)
        assert flux.call(t.address, "f(f)", float("inf")) == float("inf")
    assert reported == []
    with flux.Trampoline("f()", lambda: -1e300) as t:
        assert flux.call(t.address, "f()") == 0.0
    assert [type(r.exc_value) for r in reported] == [OverflowError]


def test_an_interrupt_parked_by_a_thread_that_ended_is_not_raised_on_another(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A SystemExit leaving a handler that foreign C code called (no libflux
    # call around it) is parked for the thread's next libflux call. The
    # thread ended without one: the entry stayed, and a later thread given
    # the same ident (pthread_t values are reused) raised it from flux.call.
    monkeypatch.setattr(sys, "unraisablehook", flux._native._unraisable_hook)  # not pytest's
    foreign_call = ctypes.CFUNCTYPE(ctypes.c_int)
    idents: list[int] = []

    def from_c(address: int) -> None:
        idents.append(threading.get_ident())
        assert foreign_call(address)() == 0

    def later() -> None:
        idents.append(threading.get_ident())
        assert flux.call(t.address, "i()") == 0  # no SystemExit from another thread

    with flux.Trampoline("i()", lambda: sys.exit(3)) as t:
        worker = threading.Thread(target=from_c, args=(t.address,))
        worker.start()
        worker.join()
        assert idents[0] not in flux._native.escaped
        # A thread C made: Python knows it only during each call from C.
        libc = ctypes.CDLL(None)
        libc.pthread_create.argtypes = (ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)
        libc.pthread_join.argtypes = (ctypes.c_ulong, ctypes.c_void_p)
        with flux.Trampoline("p(p)", lambda arg: from_c(t.address)) as start:
            thread = ctypes.c_ulong()
            assert libc.pthread_create(ctypes.byref(thread), None, start.address, None) == 0
            assert libc.pthread_join(thread.value, None) == 0
        assert idents[1] not in flux._native.escaped
    with flux.Trampoline("i()", lambda: 0) as t:
        for _ in range(20):  # until an ident is reused, most likely at once
            worker = threading.Thread(target=later)
            worker.start()
            worker.join()
            if idents[-1] in idents[:2]:
                break
    assert not flux._native.left_over.up


def test_close_is_idempotent_and_releases_the_handler() -> None:
    before = tr.live_closures()
    t = flux.Trampoline("i()", lambda: 1)
    assert tr.live_closures() == before + 1
    t.close()
    t.close()
    assert t.closed
    assert tr.live_closures() == before
    with pytest.raises(ValueError, match="closed"):
        _ = t.address


def test_initializing_an_open_trampoline_again_is_refused_and_changes_nothing() -> None:
    # It made a second closure and kept the first, out of close()'s reach,
    # until the object was collected: one more per call.
    before = tr.live_closures()
    t = flux.Trampoline("i()", lambda: 1)
    with pytest.raises(RuntimeError, match="already made"):
        t.__init__("i()", lambda: 2)
    assert t() == 1
    assert tr.live_closures() == before + 1
    t.close()
    assert tr.live_closures() == before
    t.__init__("i()", lambda: 2)  # closed: it may be made anew
    assert t() == 2
    t.close()
    assert tr.live_closures() == before


@pytest.mark.parametrize("duplicate", [copy.copy, copy.deepcopy, pickle.dumps])
def test_a_trampoline_cannot_be_copied_or_pickled(duplicate: Callable[[Any], Any]) -> None:
    # A copy held the same closure: closing both destroyed it twice (a
    # deep copy or an unpickled one, with its own handle), and a shallow
    # copy's address outlived the closure its original closed.
    before = tr.live_closures()
    with flux.Trampoline("i()", lambda: 1) as t:
        with pytest.raises(TypeError, match="cannot be copied or pickled"):
            duplicate(t)
        assert t() == 1
    assert tr.live_closures() == before


def test_an_unclosed_trampoline_is_freed_when_collected() -> None:
    before = tr.live_closures()
    flux.Trampoline("i()", lambda: 1)
    gc.collect()
    assert tr.live_closures() == before


def test_handlers_run_on_the_calling_thread_from_many_threads_at_once() -> None:
    ran_on: dict[int, int] = {}

    def handler(x: int) -> int:
        ran_on[x] = threading.get_ident()
        return x * 2

    callers: dict[int, int] = {}
    results: list[int] = []

    def worker(w: int) -> None:
        callers[w] = threading.get_ident()
        results.extend(flux.call(t.address, "l(l)", w * 1000 + k) for k in range(100))

    with flux.Trampoline("l(l)", handler) as t:
        workers = [threading.Thread(target=worker, args=(w,)) for w in range(4)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
    assert sorted(results) == sorted(2 * (w * 1000 + k) for w in range(4) for k in range(100))
    assert all(ran_on[x] == callers[x // 1000] for x in ran_on)
    assert len(ran_on) == 400


def test_an_i_pp_trampoline_is_a_dispatcher_callback() -> None:
    # A host with no context of its own: the trampoline's own data carries it.
    # A separate CDLL object, so that these declarations do not touch the
    # package's own (which take Python callbacks).
    lib = ctypes.CDLL(flux.library_path)
    lib.flux_dispatcher_create.restype = ctypes.c_void_p
    lib.flux_dispatcher_destroy.argtypes = (ctypes.c_void_p,)
    lib.flux_register.argtypes = (
        ctypes.c_void_p,
        ctypes.c_void_p,
        ctypes.c_void_p,
        ctypes.c_void_p,
        ctypes.POINTER(ctypes.c_uint64),
    )
    lib.flux_dispatch.argtypes = (ctypes.c_void_p, ctypes.c_void_p)
    lib.flux_last_error.restype = ctypes.c_char_p
    order: list[tuple[int, int]] = []

    def record(ctx: int, payload: int) -> int:
        order.append((ctx, payload))
        return 0

    d = lib.flux_dispatcher_create()
    try:
        with flux.Trampoline("i(pp)", record) as a, flux.Trampoline("i(pp)", lambda ctx, payload: 7) as failing:
            token = ctypes.c_uint64()
            assert lib.flux_register(d, a.address, None, None, ctypes.byref(token)) == 0
            assert lib.flux_dispatch(d, 1234) == 0
            assert order == [(0, 1234)]
            assert lib.flux_register(d, failing.address, None, None, ctypes.byref(token)) == 0
            assert lib.flux_dispatch(d, None) == flux.Status.ERR_CALLBACK_FAILED
            assert b"returned 7" in lib.flux_last_error()
            assert order == [(0, 1234), (0, 0)]
            assert lib.flux_dispatcher_destroy(d) == 0
            d = None
    finally:
        if d is not None:
            lib.flux_dispatcher_destroy(d)


# Any bytes at all, as flux_closure_create's signature, straight through the C
# ABI: libflux either accepts them -- exactly when they are well formed -- or
# refuses with INVALID_ARGUMENT; it never traps (which would kill this
# process) and leaves nothing behind.
_WELL_FORMED_BYTES = re.compile(rb"[vilLIzfdp]\([ilLIzfdp]{0,16}\)")
_raw_create = flux._native.lib["flux_closure_create"]
_raw_create.argtypes = (ctypes.c_char_p, tr._HANDLER, ctypes.c_void_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p))
_raw_create.restype = ctypes.c_int
_raw_destroy = flux._native.lib["flux_closure_destroy"]
_raw_destroy.argtypes = (ctypes.c_void_p,)
_raw_destroy.restype = ctypes.c_int
_NOOP_HANDLER = tr._HANDLER(lambda userdata, ret, args: None)


@given(
    st.one_of(
        st.binary(max_size=40).filter(lambda b: b"\0" not in b),
        # Near misses of the grammar are where a parser breaks.
        st.text(alphabet="vilLIzfdp()x", max_size=24).map(str.encode),
    )
)
@example(b"v(" + b"i" * 16 + b")")  # the most arguments there may be
@example(b"v(" + b"i" * 17 + b")")  # one too many
@example(b"\xff(")
@settings(max_examples=3000, deadline=None)
def test_any_signature_bytes_are_accepted_exactly_when_well_formed(signature: bytes) -> None:
    out = ctypes.c_void_p()
    status = _raw_create(signature, _NOOP_HANDLER, None, None, ctypes.byref(out))
    if _WELL_FORMED_BYTES.fullmatch(signature):
        assert status == flux.Status.OK, flux._native.last_error()
        assert out.value
        assert _raw_destroy(out.value) == flux.Status.OK
    else:
        assert status == flux.Status.ERR_INVALID_ARGUMENT, signature
        assert not out.value
        assert flux._native.last_error().startswith("flux_closure_create: ")
