"""The SQLite feedback store: a file (in WAL mode) that every process and thread of one
machine opening it shares. Each answer is recorded in one transaction that takes the
file's write lock at once (``BEGIN IMMEDIATE``) and reads and writes the task's weights
together, so concurrent answers from several processes (the workers of ``specem serve``)
lose none, and what is recorded survives a restart. A store that stays locked past
:data:`BUSY_TIMEOUT` fails the call with :class:`~specem_chain.errors.FeedbackError`."""

from __future__ import annotations

import asyncio
import os
import sqlite3
import threading
import weakref
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from ..errors import FeedbackError
from .stored import StoreKind, StoreState, TaskState
from .update import DECAY, carried_over

BUSY_TIMEOUT = 30.0
"""Seconds a store's reader or writer waits for another one's transaction to end before
it fails (a transaction takes milliseconds)."""
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

_STORES: weakref.WeakValueDictionary[Path, SQLiteStore] = weakref.WeakValueDictionary()
_STORES_LOCK = threading.Lock()
_INHERITED: list[sqlite3.Connection] = []
"""Connections a forked process inherited: never used nor closed there (closing one could
undo the parent's locks on the file), only kept from being collected."""


def sqlite_store(path: Path) -> SQLiteStore:
    """The one :class:`SQLiteStore` of this process for the file at ``path``, checked: its
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
            store = _STORES[path] = SQLiteStore(path)
    with store.transaction(write=False):  # connects, and checks or makes the store
        pass
    return store


class SQLiteStore:
    """One feedback store's file: a connection per process, opened at its first use and
    shared by the process's threads (one transaction at a time)."""

    kind: StoreKind = "sqlite"

    def __init__(self, path: Path) -> None:
        self.path: Path | None = path
        self.location = self.where = str(path)
        self._connection: sqlite3.Connection | None = None
        self._lock = threading.Lock()

    def __del__(self) -> None:
        self.close()

    # -- the Store protocol ------------------------------------------------------------

    def open_task(self, task: str, decay: float | None) -> float:
        with self.transaction() as db:
            db.execute(
                "INSERT OR IGNORE INTO tasks (name, decay, answers) VALUES (?, ?, 0)",
                (task, DECAY if decay is None else decay),
            )
            (kept,) = db.execute("SELECT decay FROM tasks WHERE name = ?", (task,)).fetchone()
        return kept

    def read(self, task: str, *, last_read: bool = False) -> TaskState:
        """The task now (a file is always there to read: ``last_read`` changes nothing)."""
        with self.transaction(write=False) as db:
            row = db.execute("SELECT answers FROM tasks WHERE name = ?", (task,)).fetchone()
            rows = db.execute(
                "SELECT member, log_weight FROM weights WHERE task = ?", (task,)
            ).fetchall()
        return TaskState(row[0] if row else 0, dict(rows))

    async def aread(self, task: str, *, last_read: bool = False) -> TaskState:
        # in a thread: a transaction may wait for another process's
        return await asyncio.to_thread(self.read, task)

    def record(self, task: str, decay: float, final: Mapping[str, float]) -> None:
        with self.transaction() as db:
            db.execute(
                "INSERT OR IGNORE INTO tasks (name, decay, answers) VALUES (?, ?, 0)",
                (task, decay),
            )
            (kept,) = db.execute("SELECT decay FROM tasks WHERE name = ?", (task,)).fetchone()
            rows = db.execute(
                "SELECT member, log_weight FROM weights WHERE task = ?", (task,)
            ).fetchall()
            before = {m: w for m, w in rows if m in final}
            db.executemany(
                "INSERT INTO weights (task, member, log_weight) VALUES (?, ?, ?) "
                "ON CONFLICT (task, member) DO UPDATE SET log_weight = excluded.log_weight",
                [(task, m, log) for m, log in carried_over(before, final, kept).items()],
            )
            db.execute("UPDATE tasks SET answers = answers + 1 WHERE name = ?", (task,))

    async def arecord(self, task: str, decay: float, final: Mapping[str, float]) -> None:
        await asyncio.to_thread(self.record, task, decay, final)

    def state(self) -> StoreState:
        return StoreState(self.kind, self.where, up=True)

    async def probe(self) -> StoreState:
        """Whether the file can be read now."""
        try:
            await asyncio.to_thread(self._touch)
        except FeedbackError as error:
            return StoreState(self.kind, self.where, up=False, error=str(error))
        return self.state()

    def _touch(self) -> None:
        with self.transaction(write=False) as db:
            db.execute("SELECT count(*) FROM tasks").fetchone()

    def close(self) -> None:
        with self._lock:
            connection, self._connection = self._connection, None
            if connection is not None:
                connection.close()

    # -- the file ----------------------------------------------------------------------

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
                raise FeedbackError(f"feedback store {self.where!r}: {error}") from None

    def _connected(self) -> sqlite3.Connection:
        if self._connection is None:
            db = sqlite3.connect(
                self.where, timeout=BUSY_TIMEOUT, isolation_level=None, check_same_thread=False
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
                f"{self.where!r} is not a feedback store (not a SQLite database: {error})"
            ) from None
        (mode,) = db.execute("PRAGMA journal_mode = WAL").fetchone()
        if mode.lower() != "wal":
            raise FeedbackError(
                f"feedback store {self.where!r} cannot use WAL mode (it is in {mode!r} "
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
            raise FeedbackError(f"{self.where!r} is a SQLite database but not a feedback store")
        if version > SCHEMA_VERSION:
            raise FeedbackError(
                f"feedback store {self.where!r} has layout {version}, newer than this "
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
