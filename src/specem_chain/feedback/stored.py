"""A task of a feedback store: :class:`StoredFeedback`, which reads and writes its task
through a :class:`Store` (a SQLite file, :mod:`.sqlite`, or a PostgreSQL database,
:mod:`.postgres`) and updates it with the same pure functions as the in-memory feedback."""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

from ..errors import FeedbackError
from .memory import Feedback
from .update import DECAY, checked_decay, checked_task, final_weights, task_weights

StoreKind = Literal["sqlite", "postgresql"]

URL = re.compile(r"^(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*)://")
DATABASE_SCHEMES = ("postgresql", "postgres")
"""The URL schemes of a PostgreSQL feedback store (libpq takes both)."""


@dataclass(frozen=True)
class TaskState:
    """A task as a store holds it: its answers and its members' log-weights."""

    answers: int = 0
    log_weights: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class StoreState:
    """A feedback store as this process sees it: whether it answers (``up``), the records
    that wait in memory to be written to it (``buffered``), those dropped from that wait
    because it was full (``dropped``, since the process started), and why it is down."""

    store: StoreKind
    where: str
    up: bool
    buffered: int = 0
    dropped: int = 0
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        """As ``/ready`` shows it."""
        shown = {
            "store": self.store,
            "where": self.where,
            "state": "up" if self.up else "down",
            "buffered": self.buffered,
            "dropped": self.dropped,
        }
        return shown | ({"error": self.error} if self.error else {})


class Store(Protocol):
    """One feedback store as a process reaches it; every task of the store shares it."""

    kind: StoreKind
    location: str
    """As :meth:`Feedback.open` takes it (a URL may hold a password)."""
    where: str
    """As messages show it (never a password)."""
    path: Path | None

    def open_task(self, task: str, decay: float | None) -> float:
        """Make the task where it is new (with ``decay``, None: :data:`DECAY`); its decay."""
        ...

    def read(self, task: str, *, last_read: bool = False) -> TaskState:
        """The task as the store holds it now; with ``last_read``, as last read where the
        store cannot be read now (a store that fails raises FeedbackError)."""
        ...

    async def aread(self, task: str, *, last_read: bool = False) -> TaskState: ...

    def record(self, task: str, decay: float, final: Mapping[str, float]) -> None:
        """Carry an answer's final weights over to the task, in one transaction with the
        task's row locked (made with ``decay`` where it is new)."""
        ...

    async def arecord(self, task: str, decay: float, final: Mapping[str, float]) -> None: ...

    def state(self) -> StoreState: ...

    async def probe(self) -> StoreState: ...

    def close(self) -> None: ...


def is_url(location: str | Path) -> bool:
    """Whether ``location`` is a URL (``scheme://...``), not a path."""
    return URL.match(os.fspath(location)) is not None


def store_at(location: str | Path) -> Store:
    """The store at ``location``: a PostgreSQL database for a ``postgresql://`` URL, else
    a SQLite file."""
    text = os.fspath(location)
    url = URL.match(text)
    if url is None:
        from .sqlite import sqlite_store

        return sqlite_store(Path(text))
    if url["scheme"].lower() not in DATABASE_SCHEMES:
        raise FeedbackError(
            f"a feedback store is a SQLite file's path or a postgresql:// URL, not a "
            f"{url['scheme']}:// URL"
        )
    try:
        from .postgres import postgres_store
    except ImportError as error:
        raise FeedbackError(
            f"a PostgreSQL feedback store needs the postgres extra ({error}): pip install "
            "'specem-chain[postgres]'"
        ) from None
    return postgres_store(text)


def open_stored(location: str | Path, task: str, decay: float | None) -> StoredFeedback:
    """:meth:`Feedback.open`."""
    if decay is not None:
        checked_decay(decay)
    task = checked_task(task)
    store = store_at(location)
    kept = store.open_task(task, decay)
    if decay is not None and decay != kept:
        raise ValueError(
            f"task {task!r} in {store.where} has decay {kept}, not {decay}: a task keeps "
            "the decay it was started with (open it with decay=None to go on with it, "
            "or name another task)"
        )
    return StoredFeedback(store, task, kept)


class StoredFeedback(Feedback):
    """A task's feedback kept in a feedback store (:meth:`Feedback.open`): every call reads
    or writes the store, so every object, thread and process with the task open sees every
    answer recorded. ``save`` and ``to_json`` give the task's weights as they are now."""

    task: str

    def __init__(self, store: Store, task: str, decay: float = DECAY) -> None:
        self._store = store
        self.location = store.location
        self.path = store.path
        self.task = task
        self.decay = decay

    def __reduce__(self) -> tuple[Any, ...]:
        # pickled (for a process of its own, say) as the task it opens there
        return (Feedback.open, (self.location, self.task, self.decay))

    def _where(self) -> str:
        return f"{'path' if self.path else 'url'}={self.where!r}, task={self.task!r}, "

    @property
    def where(self) -> str:
        return self._store.where

    @property
    def answers(self) -> int:
        """Answers recorded so far, by every process sharing the task."""
        return self._store.read(self.task).answers

    def weights(self, members: Sequence[str]) -> dict[str, float]:
        """The task's weights of ``members`` (uniform for members it has not seen); where
        the store cannot be read now (a PostgreSQL store that is down), as last read."""
        return _weights(self._store.read(self.task, last_read=True), members)

    async def aweights(self, members: Sequence[str]) -> dict[str, float]:
        return _weights(await self._store.aread(self.task, last_read=True), members)

    def record(self, weights: Mapping[str, float], dropped: Iterable[str] = ()) -> None:
        """Carry an answer's final weights over to the task (:func:`carried_over`), in one
        transaction that reads the task's weights and writes them back: answers recorded
        at the same time by other threads or processes wait for it, and none is lost."""
        final = final_weights(weights, dropped)
        if final:
            self._store.record(self.task, self.decay, final)

    async def arecord(self, weights: Mapping[str, float], dropped: Iterable[str] = ()) -> None:
        final = final_weights(weights, dropped)
        if final:
            await self._store.arecord(self.task, self.decay, final)

    def state(self) -> StoreState:
        return self._store.state()

    async def probe(self) -> StoreState:
        return await self._store.probe()

    def close(self) -> None:
        """Close this process's connections to the store (every task of the store shares
        them); they open again when next used."""
        self._store.close()

    def to_json(self) -> dict[str, Any]:
        """The task's weights as they are now: decay, answers and log-weights."""
        state = self._store.read(self.task)
        return {"decay": self.decay, "answers": state.answers, "log_weights": state.log_weights}


def _weights(state: TaskState, members: Sequence[str]) -> dict[str, float]:
    logs = state.log_weights
    return task_weights({m: logs[m] for m in members if m in logs}, members)
