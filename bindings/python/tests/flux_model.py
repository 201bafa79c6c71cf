"""A small pure-Python reference model of the dispatcher, for the stateful test.

It is Facebook's Dispatcher.js algorithm (isPending / isHandled per dispatch)
with the rules of include/flux.h and DESIGN.md section 2 on top:

* the participants of a dispatch are fixed when it starts;
* ``wait_for`` checks every token before it runs any callback (unknown and
  circular tokens alike), and raises the dispatch's failure once a callback
  has failed;
* a failing callback aborts the dispatch: nothing else runs, ``wait_for``
  calls still unwinding raise the failure, and ``dispatch`` raises the
  exception that escaped a callback last (the failing callback's own, unless
  a waiter turned it into another one).

Callbacks are data: a tuple of :class:`Step`. The model and the real
dispatcher run the same steps, and both write a log of what happened
(``enter`` / ``error`` / ``fail`` / ``exit``); the test compares the logs and
the outcome of every operation.

Where the header does not pin a choice down, the model accepts every
reasonable answer: an error entry holds the *set* of acceptable error kinds
(e.g. which of two bad tokens in one ``wait_for`` is reported first). The few
choices that change what runs next are class attributes, set to the reading
of the header the library follows (see the notes on each).
"""

from __future__ import annotations

from dataclasses import dataclass, field

# Error kinds, as logged: the exception class, or the tag of a Boom.
UNKNOWN = "Unknown"
CIRCULAR = "Circular"
ALREADY = "AlreadyDispatching"
NOT_DISPATCHING = "NotDispatching"


@dataclass(frozen=True)
class Step:
    """One thing a callback does, in order.

    op:
      ``wait``        wait_for(tokens named by ``targets``)
      ``unregister``  unregister(the token named by ``targets[0]``)
      ``register``    register a new callback whose steps are ``behaviour``
      ``raise``       raise a fresh exception (never swallowed)
      ``dispatch``    dispatch again (AlreadyDispatchingError)
    ``targets`` index the list of every token issued so far; an index past
    its end names a token that was never issued. ``swallow``: catch an error
    from this step and go on; otherwise the error escapes the callback.
    """

    op: str
    targets: tuple[int, ...] = ()
    swallow: bool = False
    behaviour: tuple[Step, ...] = ()

    def __repr__(self) -> str:
        bits = [self.op]
        if self.targets:
            bits.append(repr(list(self.targets)))
        if self.swallow:
            bits.append("swallow")
        if self.behaviour:
            bits.append(repr(list(self.behaviour)))
        return "Step(" + " ".join(bits) + ")"


def boom_tag(name: str, step: int) -> str:
    return f"Boom:{name}:{step}"


@dataclass
class _Run:
    participants: set[int]
    started: set[int] = field(default_factory=set)
    finished: set[int] = field(default_factory=set)
    aborted: bool = False
    pending: frozenset[str] = frozenset()
    log: list[tuple[object, ...]] = field(default_factory=list)


class Model:
    # wait_for on a token unregistered during this dispatch whose callback
    # already finished: Facebook skips it (it only checks isPending); the
    # header lists "unregistered" under FLUX_ERR_UNKNOWN_TOKEN, and libflux
    # reports that. "unknown" or "skip".
    handled_unregistered = "unknown"
    # A token in a wait_for list that a callback run earlier by the same
    # wait_for unregistered: it passed the up-front check, and "a callback
    # unregistered during a dispatch is not called after that". "skip" or
    # "unknown".
    unregistered_midwait = "skip"

    def __init__(self) -> None:
        self.issued = 0  # tokens are 1..issued
        self.registered: dict[int, tuple[Step, ...]] = {}  # in registration order
        self.behaviour: dict[int, tuple[Step, ...]] = {}

    # -- tokens ------------------------------------------------------------

    @staticmethod
    def name(token: int) -> str:
        return f"cb{token - 1}"

    def resolve(self, index: int) -> int | None:
        """The token a target index names; None for a never-issued one."""
        return index + 1 if index < self.issued else None

    # -- operations outside a dispatch ---------------------------------------

    def register(self, behaviour: tuple[Step, ...]) -> int:
        self.issued += 1
        token = self.issued
        self.registered[token] = behaviour
        self.behaviour[token] = behaviour
        return token

    def unregister(self, index: int) -> str | None:
        token = self.resolve(index)
        if token is None or token not in self.registered:
            return UNKNOWN
        del self.registered[token]
        return None

    def wait_for_outside(self, targets: tuple[int, ...]) -> frozenset[str]:
        # Not dispatching; a bad token may be reported first (unspecified).
        kinds = {NOT_DISPATCHING}
        for index in targets:
            token = self.resolve(index)
            if token is None or token not in self.registered:
                kinds.add(UNKNOWN)
        return frozenset(kinds)

    def dispatch(self) -> tuple[list[tuple[object, ...]], frozenset[str] | None]:
        """Runs a dispatch; returns its log and the acceptable kinds of the
        exception dispatch raises (None when it succeeds)."""
        run = _Run(participants=set(self.registered))
        for token in list(self.registered):
            if run.aborted:
                break
            if token not in self.registered or token in run.started:
                continue
            self._invoke(run, token)
        return run.log, (run.pending if run.aborted else None)

    # -- inside a dispatch -----------------------------------------------------

    def _invoke(self, run: _Run, token: int) -> None:
        name = self.name(token)
        run.started.add(token)
        run.log.append(("enter", name))
        for i, step in enumerate(self.behaviour[token]):
            error = self._step(run, name, i, step)
            if error is None:
                continue
            run.log.append(("error", name, i, error))
            if step.op == "raise" or not step.swallow:
                run.log.append(("fail", name))
                run.aborted = True
                run.pending = error
                return
        run.log.append(("exit", name))
        run.finished.add(token)

    def _step(self, run: _Run, name: str, i: int, step: Step) -> frozenset[str] | None:
        if step.op == "wait":
            return self._wait(run, step.targets)
        if step.op == "unregister":
            kind = self.unregister(step.targets[0])
            return None if kind is None else frozenset({kind})
        if step.op == "register":
            self.register(step.behaviour)
            return None
        if step.op == "raise":
            return frozenset({boom_tag(name, i)})
        if step.op == "dispatch":
            return frozenset({ALREADY})
        raise AssertionError(step)

    def _token_errors(self, run: _Run, token: int | None) -> set[str]:
        """What the up-front check of wait_for says about one token."""
        if token is None:
            return {UNKNOWN}
        registered = token in self.registered
        if token in run.started and token not in run.finished:  # on the stack
            # unregistered and on the stack: either reading holds
            return {CIRCULAR} if registered else {CIRCULAR, UNKNOWN}
        if token in run.finished:
            if registered or self.handled_unregistered == "skip":
                return set()
            return {UNKNOWN}
        if not registered or token not in run.participants:
            return {UNKNOWN}  # unregistered, or joined during this dispatch
        return set()

    def _wait(self, run: _Run, targets: tuple[int, ...]) -> frozenset[str] | None:
        tokens = [self.resolve(index) for index in targets]
        errors: set[str] = set()
        for token in tokens:
            errors |= self._token_errors(run, token)
        if run.aborted:
            # The failure, or (order unspecified) a token error.
            return run.pending | errors
        if errors:
            return frozenset(errors)
        for token in tokens:
            assert token is not None
            if token in run.finished:
                continue
            if token not in self.registered:
                if self.unregistered_midwait == "skip":
                    continue
                return frozenset({UNKNOWN})
            self._invoke(run, token)
            if run.aborted:
                return run.pending
        return None


def log_matches(real: list[tuple[object, ...]], model: list[tuple[object, ...]]) -> bool:
    """Entry by entry; a model error entry holds the set of acceptable kinds."""
    if len(real) != len(model):
        return False
    for got, want in zip(real, model):
        if got[0] == "error" and want[0] == "error":
            if got[1:3] != want[1:3] or got[3] not in want[3]:  # type: ignore[operator]
                return False
        elif got != want:
            return False
    return True


# ---------------------------------------------------------------------------
# Stores (DESIGN.md section 6): reduce stores, listeners, groups
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class ListenerStep:
    """One thing a store listener does: ``remove`` (the listener of the same
    store whose id is ``arg``), ``add`` (a new, quiet listener), ``raise``, or
    ``dispatch`` (refused: AlreadyDispatchingError, swallowed)."""

    op: str
    arg: int = 0


@dataclass
class StoreSpec:
    """A counter store: payload p fails its reduce when p is in ``fails``;
    leaves the state alone when p % ``keep_mod`` == 0; otherwise adds p."""

    fails: frozenset[int]
    keep_mod: int


@dataclass
class _Store:
    spec: StoreSpec
    token: int
    value: int = 0
    next_id: int = 1
    # listener id -> its steps, in the order they were added
    listeners: dict[int, tuple[ListenerStep, ...]] = field(default_factory=dict)
    groups: int = 0


class StoreModel:
    """Facebook's FluxReduceStore/FluxStoreGroup semantics, for the stateful
    test: participants run in token order (a group's stores always precede it)."""

    def __init__(self) -> None:
        self.issued = 0
        self.stores: dict[int, _Store] = {}  # store index -> store
        self.groups: dict[int, tuple[int, tuple[int, ...], bool]] = {}  # index -> (token, stores, raises)
        self.store_count = 0
        self.group_count = 0
        self.skipped = 0  # listeners skipped because an earlier one removed them

    def add_store(self, spec: StoreSpec) -> int:
        self.issued += 1
        index = self.store_count
        self.store_count += 1
        self.stores[index] = _Store(spec, self.issued)
        return index

    def add_listener(self, store: int, steps: tuple[ListenerStep, ...]) -> int:
        s = self.stores[store]
        lid = s.next_id
        s.next_id += 1
        s.listeners[lid] = steps
        return lid

    def remove_listener(self, store: int, lid: int) -> bool:
        return self.stores[store].listeners.pop(lid, None) is not None

    def add_group(self, stores: tuple[int, ...], raises: bool) -> int:
        self.issued += 1
        index = self.group_count
        self.group_count += 1
        self.groups[index] = (self.issued, stores, raises)
        for s in stores:
            self.stores[s].groups += 1
        return index

    def release_group(self, index: int) -> None:
        _, stores, _ = self.groups.pop(index)
        for s in stores:
            self.stores[s].groups -= 1

    def close_store(self, index: int) -> bool:
        """False when refused (the store is in a live group)."""
        if self.stores[index].groups:
            return False
        del self.stores[index]
        return True

    def live_objects(self) -> int:
        return len(self.stores) + sum(len(s.listeners) for s in self.stores.values()) + len(self.groups)

    def dispatch(self, p: int) -> tuple[list[tuple[object, ...]], str | None]:
        """The log of a dispatch of payload p and what it raises (a tag), or None."""
        log: list[tuple[object, ...]] = []
        order = sorted(
            [(s.token, "store", i) for i, s in self.stores.items()]
            + [(g[0], "group", i) for i, g in self.groups.items()]
        )
        for _, kind, index in order:
            if kind == "group":
                log.append(("group", index))
                if self.groups[index][2]:
                    return log, f"group:{index}"
                continue
            s = self.stores[index]
            if p in s.spec.fails:
                log.append(("reduce-failed", index))
                return log, f"reduce:{index}"
            if p % s.spec.keep_mod == 0:
                continue
            s.value += p
            failure = self._emit(index, s, log)
            if failure is not None:
                return log, failure
        return log, None

    def _emit(self, index: int, s: _Store, log: list[tuple[object, ...]]) -> str | None:
        for lid in list(s.listeners):
            if lid not in s.listeners:  # removed by an earlier listener
                self.skipped += 1
                continue
            log.append(("listener", index, lid))
            for step in s.listeners[lid]:
                if step.op == "remove":
                    s.listeners.pop(step.arg, None)
                elif step.op == "add":
                    self.add_listener(index, ())
                elif step.op == "dispatch":
                    log.append(("refused", index, lid))
                elif step.op == "raise":
                    return f"listener:{index}:{lid}"
        return None
