"""Errors in exactly the header's order (flux_wait_for, flux_unregister): a
closed dispatcher, then not dispatching, then an aborting dispatch, then the
first bad token in the list -- a token of another dispatcher included."""

from __future__ import annotations

from typing import Any

import pytest

import flux


class Boom(Exception):
    pass


@pytest.fixture
def other() -> Any:
    o: flux.Dispatcher[Any] = flux.Dispatcher()
    yield o
    o.close()


def test_foreign_token_outside_a_dispatch_is_not_dispatching(d: flux.Dispatcher[Any], other: Any) -> None:
    foreign = other.register(lambda p: None)
    with pytest.raises(flux.NotDispatchingError):
        d.wait_for([foreign])
    with pytest.raises(flux.NotDispatchingError):
        d.wait_for([foreign, foreign])


def test_foreign_token_after_an_abort_raises_the_callbacks_exception(d: flux.Dispatcher[Any], other: Any) -> None:
    foreign = other.register(lambda p: None)
    boom = Boom()
    seen: list[BaseException] = []

    def fails(p: object) -> None:
        raise boom

    tokens: list[flux.Token] = []

    def waits(p: object) -> None:
        a, gone = tokens
        try:
            d.wait_for([a])
        except Boom:
            pass
        for bad in ([foreign], [foreign, a], [gone], [gone, foreign]):
            try:
                d.wait_for(bad)
            except BaseException as exc:  # noqa: BLE001 - recording what is raised
                seen.append(exc)

    d.register(waits)  # first: it runs a, which aborts the dispatch
    tokens.append(d.register(fails))
    tokens.append(d.register(lambda p: None))
    d.unregister(tokens[1])
    with pytest.raises(Boom) as info:
        d.dispatch(None)
    assert info.value is boom
    assert seen == [boom, boom, boom, boom]
    assert all(exc is boom for exc in seen)
    assert not d.is_dispatching


def test_closed_comes_before_a_foreign_token(d: flux.Dispatcher[Any], other: Any) -> None:
    foreign = other.register(lambda p: None)
    d.close()
    with pytest.raises(flux.InvalidArgumentError):
        d.wait_for([foreign])
    with pytest.raises(flux.InvalidArgumentError):
        d.wait_for([foreign, foreign])
    with pytest.raises(flux.InvalidArgumentError):
        d.unregister(foreign)


def test_first_bad_token_in_the_list_is_reported(d: flux.Dispatcher[Any], other: Any) -> None:
    foreign = other.register(lambda p: None)
    errors: list[type[BaseException]] = []
    ran: list[str] = []
    later = d.register(lambda p: ran.append("later"))
    me: list[flux.Token] = []

    def waits(p: object) -> None:
        for tokens in ([me[0], foreign], [foreign, me[0]], [later, foreign], [foreign, later]):
            try:
                d.wait_for(tokens)
            except flux.FluxError as exc:
                errors.append(type(exc))

    me.append(d.register(waits))
    d.dispatch(None)
    assert errors == [
        flux.CircularDependencyError,
        flux.UnknownTokenError,
        flux.UnknownTokenError,
        flux.UnknownTokenError,
    ]
    # Every token is checked before any callback runs: "later" ran once, by
    # the dispatch loop, never by a wait that failed.
    assert ran == ["later"]


def test_foreign_token_message_names_both_dispatchers(d: flux.Dispatcher[Any], other: Any) -> None:
    foreign = other.register(lambda p: None)
    messages: list[str] = []

    def waits(p: object) -> None:
        with pytest.raises(flux.UnknownTokenError) as info:
            d.wait_for([foreign])
        messages.append(str(info.value))

    d.register(waits)
    d.dispatch(None)
    assert "issued by dispatcher" in messages[0]


def test_not_a_token_is_a_type_error(d: flux.Dispatcher[Any]) -> None:
    with pytest.raises(TypeError):
        d.wait_for([1])  # type: ignore[list-item]
    with pytest.raises(TypeError):
        d.unregister(1)  # type: ignore[arg-type]
