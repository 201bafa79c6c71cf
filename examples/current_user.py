"""current_user.py -- JBFlux's own example: a CurrentUserStore refreshed by a
"current-user-refreshed" action that may carry an error, a MessagesStore
that waits for it, and a view bound to both for as long as it lives. Stores
are registered by class; nothing is unregistered by hand. The Swift twin is
examples/current-user/main.swift.

    make demo        (or: PYTHONPATH=bindings/python python3 examples/current_user.py)
"""

from __future__ import annotations

from typing import Any, NamedTuple

import flux


class User(NamedTuple):
    name: str
    unread: int


class RefreshFailed(Exception):
    def __str__(self) -> str:
        return "the server did not answer"


class CurrentUserStore(flux.ReduceStore["User | None"]):
    def get_initial_state(self) -> User | None:
        return None

    @flux.handles("current-user-refreshed")
    def on_refreshed(self, user: User | None, action: flux.Action) -> User | None:
        if action.error is not None:
            self.emit_change(error=action.error)  # listeners run, and see self.error
            return None
        fresh: User = action.payload
        return fresh


class MessagesStore(flux.ReduceStore[int]):
    def __init__(self, dispatcher: flux.Dispatcher[Any]) -> None:
        self.users = dispatcher.register_store(CurrentUserStore)  # a dependency, registered once
        super().__init__(dispatcher)

    def get_initial_state(self) -> int:
        return 0

    def are_equal(self, one: int, two: int) -> bool:
        return one == two

    @flux.handles("current-user-refreshed")
    def on_refreshed(self, count: int, action: flux.Action) -> int:
        self.dispatcher.wait_for([self.users])  # the user is up to date now
        user = self.users.state
        return user.unread if user is not None else 0

    @flux.handles("message-read")
    def on_read(self, count: int, action: flux.Action) -> int:
        return max(0, count - 1)


class ProfileView:
    """A view: bound to the stores for its life, no unregister anywhere."""

    def __init__(self, name: str, dispatcher: flux.Dispatcher[Any]) -> None:
        self.name = name
        self.users = dispatcher.store(CurrentUserStore)
        self.messages = dispatcher.store(MessagesStore)
        self.users.add_listener(self.show_user, owner=self)
        self.messages.add_listener(self.show_unread, owner=self)

    def show_user(self) -> None:
        if self.users.error is not None:
            print(f"  {self.name}: could not refresh: {self.users.error}")
        else:
            user = self.users.state
            print(f"  {self.name}: signed in as {user.name if user else 'nobody'}")

    def show_unread(self) -> None:
        print(f"  {self.name}: {self.messages.state} unread")

    def __del__(self) -> None:
        print(f"  {self.name} closed")


def main() -> None:
    dispatcher: flux.Dispatcher[flux.Action] = flux.Dispatcher()
    with dispatcher:  # closing it closes its stores
        dispatcher.register_store(CurrentUserStore)
        dispatcher.register_store(MessagesStore)

        view = ProfileView("profile view", dispatcher)
        print("current user refreshed:")
        dispatcher.dispatch(flux.Action("current-user-refreshed", User("ada", unread=3)))
        print("a message read:")
        dispatcher.dispatch(flux.Action("message-read"))
        print("refresh failed:")
        dispatcher.dispatch(flux.Action("current-user-refreshed", error=RefreshFailed()))
        del view  # its last reference: its listeners go with it
        print("after the view closed, refreshed again (no view prints):")
        dispatcher.dispatch(flux.Action("current-user-refreshed", User("ada", unread=1)))
        print(f"messages: {dispatcher.store(MessagesStore).state} unread")


if __name__ == "__main__":
    main()
