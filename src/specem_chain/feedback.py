"""Task-level feedback: the members' weights, kept across the requests of one task.

The paper resets every member's weight to uniform at the start of each request, so nothing
learnt about a task carries over to its next question. A :class:`Feedback` object, held by
the user and passed to every request of one task, carries it over:

- a request starts from the task's weights;
- when it ends, the task's log-weights become the answer's final ones (where the request's
  own feedback left them), pulled toward uniform by ``decay``;
- under a policy with a gate, a member whose weight is low enough stops drafting (it keeps
  verifying); as the decay pulls its weight back toward uniform over the next requests, it
  is re-admitted and judged again.

The same seed and the same starting weights give the same answer. Updates are made under a
lock, so concurrent requests may share one object; their order then decides the weights.

``Feedback()`` keeps the weights in memory (``save`` and ``load`` write and read them as
JSON). ``Feedback.open(path, task=...)`` keeps them in a **feedback store**: a SQLite file
(in WAL mode) that holds any number of named tasks and that every process and thread opening
it shares. Each answer is recorded in one transaction that reads and writes the task's
weights together, so concurrent answers from several processes (the workers of
``specem serve``) lose none, and what is recorded survives a restart. Both kinds update the
weights with the same pure functions (:func:`final_weights`, :func:`carried_over`,
:func:`task_weights`).
"""

from __future__ import annotations

import json
import math
import os
import sqlite3
import threading
import weakref
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from .engine.roster import normalised
from .errors import FeedbackError

DECAY = 0.2
"""How far each answer pulls the task's log-weights back toward uniform."""
DEFAULT_TASK = "default"
"""The task a feedback store's answers count toward when none is named."""
BUSY_TIMEOUT = 30.0
"""Seconds a store's reader or writer waits for another one's transaction to end before
it fails (a transaction takes milliseconds)."""
TASK_NAME_LIMIT = 200
"""The longest task name, in characters."""


# -- the update, as pure functions --------------------------------------------------------


def task_weights(log_weights: Mapping[str, float], members: Sequence[str]) -> dict[str, float]:
    """The weights of ``members`` given the task's log-weights (a member the task has not
    seen has log-weight 0, the uniform one)."""
    logs = [log_weights.get(m, 0.0) for m in members]
    if not logs:
        return {}
    top = max(logs)
    return dict(zip(members, normalised([math.exp(x - top) for x in logs])))


def final_weights(weights: Mapping[str, float], dropped: Iterable[str] = ()) -> dict[str, float]:
    """The final weights of an answer that carry over to its task: those of the members it
    kept, above zero. A member dropped from the answer (its server kept failing) keeps its
    task weight: an outage says nothing of its answers."""
    out = set(dropped)
    return {m: w for m, w in weights.items() if m not in out and w > 0}


def carried_over(
    log_weights: Mapping[str, float], final: Mapping[str, float], decay: float
) -> dict[str, float]:
    """The task's new log-weights of the members of ``final`` (an answer's
    :func:`final_weights`), from their log-weights before it: the answer's log-weights,
    centred on the kept members' mean task log-weight and pulled toward uniform by
    ``decay``. The other members' log-weights do not change."""
    if not final:
        return {}
    logs = {m: math.log(w) for m, w in final.items()}
    centre = math.fsum(logs.values()) / len(logs)
    # the kept members keep their mean task log-weight among them, so the weights of
    # members that were not in this answer (or dropped from it) keep their meaning
    before = math.fsum(log_weights.get(m, 0.0) for m in logs) / len(logs)
    return {m: (1.0 - decay) * (log - centre + before) for m, log in logs.items()}


def checked_decay(decay: float) -> float:
    if not 0.0 <= decay <= 1.0:
        raise ValueError(f"decay must be between 0 and 1, got {decay}")
    return decay


def checked_task(task: str) -> str:
    if not isinstance(task, str) or not task.strip() or len(task) > TASK_NAME_LIMIT:
        raise ValueError(
            f"a task is named by 1 to {TASK_NAME_LIMIT} characters, not all blank; got {task!r}"
        )
    return task


# -- in memory -----------------------------------------------------------------------------


class Feedback:
    """Members' weights kept across the requests of one task (see the module), in memory;
    :meth:`open` keeps them in a feedback store instead."""

    path: Path | None = None
    """The feedback store holding the weights (None: in memory)."""
    task: str | None = None
    """The task's name in the feedback store (None: in memory)."""

    def __init__(self, decay: float = DECAY, log_weights: Mapping[str, float] | None = None):
        self.decay = checked_decay(decay)
        self._log_weights = dict(log_weights or {})
        self._answers = 0
        self._lock = threading.Lock()

    @classmethod
    def open(
        cls, path: str | Path, task: str = DEFAULT_TASK, decay: float | None = None
    ) -> Feedback:
        """The feedback of ``task`` kept in the feedback store at ``path``: a SQLite file
        (made where there is none yet, in a folder that exists) that holds any number of
        named tasks, shared by every thread and process that opens it and kept across
        restarts.

        A task's ``decay`` is set when it is first opened (None: :data:`DECAY`) and stays:
        opening it again with another one is an error (None keeps it). A folder that does
        not exist, a file that is not a feedback store, a blank task name and a decay out
        of range raise ValueError (:class:`~specem_chain.errors.FeedbackError` for the
        store's own problems) naming the problem."""
        if decay is not None:
            checked_decay(decay)
        task = checked_task(task)
        store = _store(Path(path))
        with store.transaction() as db:
            db.execute(
                "INSERT OR IGNORE INTO tasks (name, decay, answers) VALUES (?, ?, 0)",
                (task, DECAY if decay is None else decay),
            )
            (kept,) = db.execute("SELECT decay FROM tasks WHERE name = ?", (task,)).fetchone()
        if decay is not None and decay != kept:
            raise ValueError(
                f"task {task!r} in {store.path} has decay {kept}, not {decay}: a task keeps "
                "the decay it was started with (open it with decay=None to go on with it, "
                "or name another task)"
            )
        return StoredFeedback(store, task, kept)

    def __repr__(self) -> str:
        try:
            state = self.to_json()
        except ValueError as error:
            return f"Feedback({self._where()}cannot be read: {error})"
        logs = state["log_weights"]
        shown = ", ".join(f"{m}: {w:.3f}" for m, w in task_weights(logs, list(logs)).items())
        return (
            f"Feedback({self._where()}decay={state['decay']}, answers={state['answers']}, "
            f"weights={{{shown}}})"
        )

    def _where(self) -> str:
        return ""

    @property
    def answers(self) -> int:
        """Answers recorded so far."""
        return self._answers

    def weights(self, members: Sequence[str]) -> dict[str, float]:
        """The task's weights of ``members`` (uniform for members it has not seen)."""
        with self._lock:
            logs = {m: self._log_weights[m] for m in members if m in self._log_weights}
        return task_weights(logs, members)

    def record(self, weights: Mapping[str, float], dropped: Iterable[str] = ()) -> None:
        """Carry an answer's final weights over to the task (:func:`carried_over`). A member
        dropped from the answer (its server kept failing) keeps its task weight: an outage
        says nothing of its answers."""
        final = final_weights(weights, dropped)
        if not final:
            return
        with self._lock:
            self._log_weights.update(carried_over(self._log_weights, final, self.decay))
            self._answers += 1

    def close(self) -> None:
        """Let go of the files this object holds open (none in memory)."""

    # -- saving and loading ---------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        """The weights as they are now: decay, answers and log-weights."""
        with self._lock:
            return {
                "decay": self.decay,
                "answers": self._answers,
                "log_weights": dict(self._log_weights),
            }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Feedback:
        try:
            feedback = Feedback(
                float(data["decay"]), {str(m): float(w) for m, w in data["log_weights"].items()}
            )
            feedback._answers = int(data.get("answers", 0))
        except (KeyError, TypeError, ValueError, AttributeError) as error:
            raise ValueError(f"not a saved Feedback: {error}") from None
        return feedback

    def save(self, path: str | Path) -> None:
        """Write the weights as JSON to ``path``, replacing it whole: a save cut short
        leaves the file as it was."""
        path = Path(path)
        text = json.dumps(self.to_json(), indent=2) + "\n"
        # a name of its own, so that saves from two threads cannot write one partial file
        partial = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.partial")
        try:
            partial.write_text(text, encoding="utf-8")
            partial.replace(path)
        finally:
            partial.unlink(missing_ok=True)

    @classmethod
    def load(cls, path: str | Path) -> Feedback:
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, ValueError) as error:
            raise ValueError(f"cannot read feedback from {path}: {error}") from None
        return cls.from_json(data)


# -- in a feedback store -------------------------------------------------------------------


class StoredFeedback(Feedback):
    """A task's feedback kept in a feedback store (:meth:`Feedback.open`): every call reads
    or writes the store, so every object, thread and process with the task open sees every
    answer recorded. ``save`` and ``to_json`` give the task's weights as they are now."""

    def __init__(self, store: _Store, task: str, decay: float) -> None:
        self._store = store
        self.path = store.path
        self.task = task
        self.decay = decay

    def __reduce__(self) -> tuple[Any, ...]:
        # pickled (for a process of its own, say) as the task it opens there
        return (Feedback.open, (self.path, self.task, self.decay))

    def _where(self) -> str:
        return f"path={str(self.path)!r}, task={self.task!r}, "

    @property
    def answers(self) -> int:
        """Answers recorded so far, by every process sharing the task."""
        with self._store.transaction(write=False) as db:
            row = db.execute("SELECT answers FROM tasks WHERE name = ?", (self.task,)).fetchone()
        return row[0] if row else 0

    def weights(self, members: Sequence[str]) -> dict[str, float]:
        """The task's weights of ``members`` (uniform for members it has not seen)."""
        with self._store.transaction(write=False) as db:
            logs = self._log_weights_of(db, members)
        return task_weights(logs, members)

    def record(self, weights: Mapping[str, float], dropped: Iterable[str] = ()) -> None:
        """Carry an answer's final weights over to the task (:func:`carried_over`), in one
        transaction that reads the task's weights and writes them back: answers recorded
        at the same time by other threads or processes wait for it, and none is lost."""
        final = final_weights(weights, dropped)
        if not final:
            return
        with self._store.transaction() as db:
            logs = carried_over(self._log_weights_of(db, list(final)), final, self.decay)
            db.executemany(
                "INSERT INTO weights (task, member, log_weight) VALUES (?, ?, ?) "
                "ON CONFLICT (task, member) DO UPDATE SET log_weight = excluded.log_weight",
                [(self.task, m, log) for m, log in logs.items()],
            )
            db.execute(
                "INSERT INTO tasks (name, decay, answers) VALUES (?, ?, 1) "
                "ON CONFLICT (name) DO UPDATE SET answers = answers + 1",
                (self.task, self.decay),
            )

    def _log_weights_of(self, db: sqlite3.Connection, members: Sequence[str]) -> dict[str, float]:
        wanted = set(members)
        rows = db.execute(
            "SELECT member, log_weight FROM weights WHERE task = ?", (self.task,)
        ).fetchall()
        return {m: w for m, w in rows if m in wanted}

    def close(self) -> None:
        """Close this process's connection to the store (every task of the store shares
        it); it opens again when next used."""
        self._store.close()

    def to_json(self) -> dict[str, Any]:
        """The task's weights as they are now: decay, answers and log-weights."""
        with self._store.transaction(write=False) as db:
            row = db.execute("SELECT answers FROM tasks WHERE name = ?", (self.task,)).fetchone()
            rows = db.execute(
                "SELECT member, log_weight FROM weights WHERE task = ?", (self.task,)
            ).fetchall()
        return {"decay": self.decay, "answers": row[0] if row else 0, "log_weights": dict(rows)}


APPLICATION_ID = 0x5370454D
"""What marks a SQLite file as a feedback store (``PRAGMA application_id``, "SpEM")."""
SCHEMA_VERSION = 1
"""The store's layout (``PRAGMA user_version``); a newer one is refused."""
SCHEMA = (
    "CREATE TABLE tasks (name TEXT PRIMARY KEY, decay REAL NOT NULL, "
    "answers INTEGER NOT NULL DEFAULT 0)",
    "CREATE TABLE weights (task TEXT NOT NULL REFERENCES tasks (name), member TEXT NOT NULL, "
    "log_weight REAL NOT NULL, PRIMARY KEY (task, member)) WITHOUT ROWID",
    f"PRAGMA application_id = {APPLICATION_ID}",
    f"PRAGMA user_version = {SCHEMA_VERSION}",
)

_STORES: weakref.WeakValueDictionary[Path, _Store] = weakref.WeakValueDictionary()
_STORES_LOCK = threading.Lock()
_INHERITED: list[sqlite3.Connection] = []
"""Connections a forked process inherited: never used nor closed there (closing one could
undo the parent's locks on the file), only kept from being collected."""


def _store(path: Path) -> _Store:
    """The one :class:`_Store` of this process for the file at ``path``, checked: its
    folder exists and it is a feedback store (or is made one)."""
    path = path.expanduser()
    if not path.parent.is_dir():
        raise FeedbackError(f"folder {str(path.parent)!r} does not exist")
    if path.is_dir():
        raise FeedbackError(f"{str(path)!r} is a folder, not a feedback store")
    path = path.resolve()
    with _STORES_LOCK:
        store = _STORES.get(path)
        if store is None:
            store = _STORES[path] = _Store(path)
    with store.transaction(write=False):  # connects, and checks or makes the store
        pass
    return store


class _Store:
    """One feedback store's file: a connection per process, opened at its first use and
    shared by the process's threads (one transaction at a time)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._connection: sqlite3.Connection | None = None
        self._lock = threading.Lock()

    def __del__(self) -> None:
        self.close()

    def close(self) -> None:
        with self._lock:
            connection, self._connection = self._connection, None
            if connection is not None:
                connection.close()

    def forked(self) -> None:
        """In a forked child: the parent's connection and lock are the parent's."""
        self._lock = threading.Lock()
        if self._connection is not None:
            _INHERITED.append(self._connection)
            self._connection = None

    @contextmanager
    def transaction(self, write: bool = True) -> Iterator[sqlite3.Connection]:
        """A transaction on the store: a write one takes the store's write lock at once
        (``BEGIN IMMEDIATE``), so that it reads and writes with no other writer between;
        a store that stays locked past :data:`BUSY_TIMEOUT` raises FeedbackError."""
        with self._lock:
            try:
                db = self._connected()
                db.execute("BEGIN IMMEDIATE" if write else "BEGIN")
                try:
                    yield db
                    db.execute("COMMIT")
                except BaseException:
                    if db.in_transaction:
                        db.execute("ROLLBACK")
                    raise
            except sqlite3.Error as error:
                raise FeedbackError(f"feedback store {str(self.path)!r}: {error}") from None

    def _connected(self) -> sqlite3.Connection:
        if self._connection is None:
            db = sqlite3.connect(
                self.path, timeout=BUSY_TIMEOUT, isolation_level=None, check_same_thread=False
            )
            try:
                self._prepare(db)
            except BaseException:
                db.close()
                raise
            self._connection = db
        return self._connection

    def _prepare(self, db: sqlite3.Connection) -> None:
        """Check that the file is a feedback store, or a new or empty file, before writing
        anything to it; then WAL mode, durable commits, and the store's tables in a new
        file."""
        try:
            fresh = self._layout(db)
        except sqlite3.OperationalError:
            raise  # locked, or cannot be opened: said by transaction()
        except sqlite3.DatabaseError as error:
            raise FeedbackError(
                f"{str(self.path)!r} is not a feedback store (not a SQLite database: {error})"
            ) from None
        (mode,) = db.execute("PRAGMA journal_mode = WAL").fetchone()
        if mode.lower() != "wal":
            raise FeedbackError(
                f"feedback store {str(self.path)!r} cannot use WAL mode (it is in {mode!r} "
                "mode): put it on a local file system, in a folder this user can write"
            )
        db.execute("PRAGMA synchronous = FULL")  # a recorded answer survives a power cut
        if fresh:
            db.execute("BEGIN IMMEDIATE")
            try:
                if self._layout(db):  # no other process made it meanwhile
                    for statement in SCHEMA:
                        db.execute(statement)
                db.execute("COMMIT")
            except BaseException:
                if db.in_transaction:
                    db.execute("ROLLBACK")
                raise

    def _layout(self, db: sqlite3.Connection) -> bool:
        """Whether the file is new or empty (True) or a feedback store this specem-chain
        can read (False); any other file raises FeedbackError."""
        (application,) = db.execute("PRAGMA application_id").fetchone()
        (version,) = db.execute("PRAGMA user_version").fetchone()
        (objects,) = db.execute("SELECT count(*) FROM sqlite_master").fetchone()
        if application == 0 and version == 0 and objects == 0:
            return True
        if application != APPLICATION_ID:
            raise FeedbackError(f"{str(self.path)!r} is a SQLite database but not a feedback store")
        if version > SCHEMA_VERSION:
            raise FeedbackError(
                f"feedback store {str(self.path)!r} has layout {version}, newer than this "
                f"specem-chain's ({SCHEMA_VERSION}): upgrade specem-chain to use it"
            )
        return False


def _after_fork() -> None:
    global _STORES_LOCK
    _STORES_LOCK = threading.Lock()
    for store in list(_STORES.values()):
        store.forked()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)
