"""The PostgreSQL feedback store: tables in a database that every replica of a fleet
reaches, so that each task has one set of weights whichever replica answers.

- **Layout.** Four tables, made at the first use where there are none (under an advisory
  lock, so that replicas starting together make them once): ``specem_feedback_tasks``
  (name, decay, answers), ``specem_feedback_weights`` (task, member, log-weight),
  ``specem_feedback_records`` (the ids of the answers recorded in the last
  :data:`RECORD_IDS_KEPT`) and ``specem_feedback_layout`` (this application's name and the
  layout's version). A database whose tables are not a feedback store's, or whose layout is
  another version, is refused with an error that says so; a URL that cannot be read or a
  login the database refuses gets an error that names the store without its password.
- **Transactions.** An answer is recorded in one transaction that locks its task's row
  (``INSERT ... ON CONFLICT DO UPDATE``), reads the members' log-weights and writes the new
  ones, so concurrent answers from every replica lose none. Each record carries an id made
  when its answer ended; a record whose id is stored already was written (its first
  commit's answer was lost with the connection) and is not counted again.
- **Outages.** Answers never wait for the database to come back. Once a call fails to
  reach it, the store is *down*: answers start from the task's weights as last read, and
  their records wait in memory, at most :data:`BACKLOG` of them (past that the oldest are
  dropped, and counted). A thread of this process tries the database every
  :data:`RETRY_S` seconds and, once it answers, writes the waiting records in the order
  they were made, each in its own transaction as above; the store is *up* again when none
  waits. The task's state is then what the same records written with no outage make.
  Records that still wait when the process exits are written if the database answers
  then, else lost (a warning says how many).

The server's event loop calls the ``a``-methods, on a pool of asynchronous connections of
its own (one per event loop); the others use a pool of their own. Both are psycopg 3's
pools (psycopg_pool). The tables and transactions are :mod:`.postgres_sql`'s.
"""

from __future__ import annotations

import asyncio
import atexit
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Mapping
from typing import Any, TypeVar
from urllib.parse import unquote, urlsplit, urlunsplit

import psycopg
from psycopg.conninfo import conninfo_to_dict
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from ..errors import FeedbackError
from .postgres_sql import (
    Flow,
    Pending,
    arun,
    checking_layout,
    opening,
    reading,
    recording,
    run,
    selecting_one,
)
from .stored import StoreKind, StoreState, TaskState
from .update import DECAY

log = logging.getLogger(__name__)

T = TypeVar("T")

BACKLOG = 10_000
"""Records that may wait in memory for the database while it is down; past that the
oldest are dropped (and counted in :attr:`StoreState.dropped`)."""
RETRY_S = 2.0
"""Seconds between tries of a database that is down."""
CONNECT_S = 5
"""libpq's ``connect_timeout``, unless the URL sets its own."""
WAIT_S = 3.0
"""Seconds a call waits for a pooled connection before the store counts as down."""
CALL_S = 10.0
"""Seconds a call on an event loop may take before the store counts as down."""
PROBE_S = 1.0
"""Seconds ``/ready``'s look at the database may take."""
POOL_SIZE = 4
"""Connections each of a process's pools may hold open (one pool for calls off an event
loop, one per event loop)."""
PRUNE_S = 3600.0
"""Seconds between a process's deletions of record ids older than
:data:`~.postgres_sql.RECORD_IDS_KEPT`."""


# -- URLs and their secrets ----------------------------------------------------------------


def redacted(url: str) -> str:
    """``url`` without its password (in the user part or as ``password=``)."""
    parts = urlsplit(url)
    user, at, host = parts.netloc.rpartition("@")
    netloc = f"{user.partition(':')[0]}:***@{host}" if ":" in user else parts.netloc
    query = "&".join(
        "password=***" if pair.partition("=")[0].lower() == "password" else pair
        for pair in parts.query.split("&")
    )
    return urlunsplit((parts.scheme, netloc if at else parts.netloc, parts.path, query, ""))


def secrets_of(url: str) -> list[str]:
    """The password a URL holds, as written and decoded."""
    parts = urlsplit(url)
    found = []
    user = parts.netloc.rpartition("@")[0]
    if ":" in user:
        found.append(user.partition(":")[2])
    for pair in parts.query.split("&"):
        key, _, value = pair.partition("=")
        if key.lower() == "password":
            found.append(value)
    return [s for secret in found for s in {secret, unquote(secret)} if s]


class Unavailable(Exception):
    """The database cannot be reached now (the store goes down)."""


# -- the store -----------------------------------------------------------------------------

_STORES: dict[str, PostgresStore] = {}
_STORES_LOCK = threading.Lock()
_INHERITED: list[Any] = []
"""Pools a forked process inherited: never used nor closed there (closing one would end
the parent's connections), only kept from being collected."""


def postgres_store(url: str) -> PostgresStore:
    """The one :class:`PostgresStore` of this process for ``url``, its layout checked (or
    its tables made) at its first use."""
    with _STORES_LOCK:
        store = _STORES.get(url)
        if store is None:
            store = _STORES[url] = PostgresStore(url)
    store.check()
    return store


class PostgresStore:
    """One database as this process reaches it: its pools, the tasks as last read, and
    the records that wait for it while it is down (see the module)."""

    kind: StoreKind = "postgresql"
    path = None

    def __init__(self, url: str) -> None:
        self.location = url
        self.where = redacted(url)
        self._secrets = secrets_of(url)
        try:
            given = conninfo_to_dict(url)
        except psycopg.Error as error:
            raise FeedbackError(
                f"{self.where} is not a PostgreSQL URL libpq can read: {self._said(error)}"
            ) from None
        defaults = {"connect_timeout": CONNECT_S, "application_name": "specem-chain"}
        self._options = {k: v for k, v in defaults.items() if k not in given}
        self._lock = threading.Lock()
        self._checked = False
        self._pool: ConnectionPool[psycopg.Connection[Any]] | None = None
        self._pools: dict[asyncio.AbstractEventLoop, AsyncConnectionPool[Any]] = {}
        self._cache: dict[str, TaskState] = {}
        self._down: str | None = None
        self._backlog: deque[Pending] = deque()
        self._dropped = 0
        self._retrying: threading.Thread | None = None
        self._pruned = time.monotonic()

    def _said(self, error: BaseException) -> str:
        """An error's message on one line, without the URL's password."""
        text = " ".join(str(error).split()) or type(error).__name__
        for secret in self._secrets:
            text = text.replace(secret, "***")
        return text

    def check(self) -> None:
        """At the first use: connect, and check the layout or make the tables."""
        if self._checked:
            return
        try:
            with self._connect() as connection, connection.transaction():
                run(connection, checking_layout(self.where))
        except psycopg.errors.InsufficientPrivilege as error:
            raise FeedbackError(
                f"cannot make the feedback store's tables in {self.where}: "
                f"{self._said(error)}; grant this user CREATE on the schema, or make them "
                "once as a user who may"
            ) from None
        except psycopg.OperationalError as error:
            raise FeedbackError(
                f"cannot reach feedback store {self.where}: {self._said(error)}"
            ) from None
        except psycopg.Error as error:
            raise FeedbackError(f"feedback store {self.where}: {self._said(error)}") from None
        self._checked = True

    def _connect(self) -> psycopg.Connection[Any]:
        return psycopg.connect(self.location, autocommit=True, **self._options)

    # -- pools ---------------------------------------------------------------------------

    def _pool_settings(self) -> dict[str, Any]:
        """What the thread's pool and each event loop's share: the database, its options,
        the pool's size and how long a caller waits for a connection, opened on first use."""
        return {
            "conninfo": self.location,
            "kwargs": self._options,
            "max_size": POOL_SIZE,
            "open": False,
            "timeout": WAIT_S,
            "reconnect_timeout": WAIT_S,
            "name": "specem-feedback",
        }

    def _sync_pool(self) -> ConnectionPool[psycopg.Connection[Any]]:
        with self._lock:
            if self._pool is None:
                self._pool = ConnectionPool(
                    **self._pool_settings(), min_size=0, check=ConnectionPool.check_connection
                )
                self._pool.open()
            return self._pool

    async def _async_pool(self) -> AsyncConnectionPool[Any]:
        loop = asyncio.get_running_loop()
        with self._lock:
            for stale in [key for key in self._pools if key.is_closed()]:
                del self._pools[stale]
            pool = self._pools.get(loop)
            if pool is None:
                pool = self._pools[loop] = AsyncConnectionPool(
                    **self._pool_settings(), min_size=1, check=AsyncConnectionPool.check_connection
                )
        await pool.open()  # once; again is a no-op
        return pool

    def _call(self, flow: Flow[T]) -> T:
        """A transaction on the pool; Unavailable where the database cannot be reached."""
        try:
            with self._sync_pool().connection() as connection:
                return run(connection, flow)
        except psycopg.OperationalError as error:
            raise Unavailable(self._said(error)) from None
        except psycopg.Error as error:
            raise FeedbackError(f"feedback store {self.where}: {self._said(error)}") from None

    async def _acall(self, flow: Flow[T], seconds: float = CALL_S) -> T:
        async def call() -> T:
            async with (await self._async_pool()).connection() as connection:
                return await arun(connection, flow)

        try:
            return await asyncio.wait_for(call(), seconds)
        except (asyncio.TimeoutError, TimeoutError):
            raise Unavailable(f"no answer in {seconds:g} s") from None
        except psycopg.OperationalError as error:
            raise Unavailable(self._said(error)) from None
        except psycopg.Error as error:
            raise FeedbackError(f"feedback store {self.where}: {self._said(error)}") from None

    # -- the Store protocol --------------------------------------------------------------

    def open_task(self, task: str, decay: float | None) -> float:
        """The task's decay, the task made where it is new; while the database is down, the
        decay asked for (the task is made with it when its first record is written)."""
        decay = DECAY if decay is None else decay
        if self._down is None:
            try:
                kept, state = self._call(opening(task, decay))
            except Unavailable as error:
                self._went_down(str(error))
            else:
                self._cache[task] = state
                return kept
        return decay

    def read(self, task: str, *, last_read: bool = False) -> TaskState:
        if self._down is None:
            try:
                return self._read(task, self._call(reading(task)))
            except Unavailable as error:
                self._went_down(str(error))
        return self._last_read(task, last_read)

    async def aread(self, task: str, *, last_read: bool = False) -> TaskState:
        if self._down is None:
            try:
                return self._read(task, await self._acall(reading(task)))
            except Unavailable as error:
                self._went_down(str(error))
        return self._last_read(task, last_read)

    def _read(self, task: str, state: TaskState | None) -> TaskState:
        self._cache[task] = state = state or TaskState()
        return state

    def _last_read(self, task: str, last_read: bool) -> TaskState:
        if last_read:
            return self._cache.get(task, TaskState())
        with self._lock:
            down, waiting = self._down, len(self._backlog)
        raise FeedbackError(
            f"feedback store {self.where} is down ({down}); {waiting} records wait in "
            "memory to be written when it is back"
        )

    def record(self, task: str, decay: float, final: Mapping[str, float]) -> None:
        pending = Pending.of(task, decay, final)
        if self._waits(pending):
            return
        try:
            self._call(recording(pending, self._prune()))
        except Unavailable as error:
            self._went_down(str(error), pending)

    async def arecord(self, task: str, decay: float, final: Mapping[str, float]) -> None:
        pending = Pending.of(task, decay, final)
        if self._waits(pending):
            return
        try:
            await self._acall(recording(pending, self._prune()))
        except Unavailable as error:
            self._went_down(str(error), pending)

    def _prune(self) -> bool:
        """Whether this record's transaction deletes the old record ids (once in
        :data:`PRUNE_S` per process)."""
        now = time.monotonic()
        if now - self._pruned < PRUNE_S:
            return False
        self._pruned = now
        return True

    def state(self) -> StoreState:
        with self._lock:
            return StoreState(
                self.kind,
                self.where,
                up=self._down is None,
                buffered=len(self._backlog),
                dropped=self._dropped,
                error=self._down,
            )

    async def probe(self) -> StoreState:
        """The state, the database asked first where it is up (a down one is being tried
        every :data:`RETRY_S` seconds already)."""
        if self._down is None:
            try:
                await self._acall(selecting_one(), PROBE_S)
            except Unavailable as error:
                self._went_down(str(error))
        return self.state()

    def close(self) -> None:
        """Close the pools (they open again when next used); records that wait go on
        waiting."""
        with self._lock:
            pool, self._pool = self._pool, None
            pools, self._pools = self._pools, {}
        if pool is not None:
            pool.close()
        for loop, apool in pools.items():
            if not loop.is_closed():
                loop.call_soon_threadsafe(closing, loop, apool)

    # -- outages -------------------------------------------------------------------------

    def _waits(self, pending: Pending) -> bool:
        """Put the record behind those that wait, if any wait or the database is down."""
        with self._lock:
            if self._down is None and not self._backlog:
                return False
            self._keep(pending)
            return True

    def _keep(self, pending: Pending) -> None:
        if len(self._backlog) >= BACKLOG:
            self._backlog.popleft()
            self._dropped += 1
            if self._dropped == 1 or self._dropped % BACKLOG == 0:
                log.warning(
                    "feedback store %s: %d records waited for it already, so the oldest "
                    "are dropped (%d so far)",
                    self.where,
                    BACKLOG,
                    self._dropped,
                )
        self._backlog.append(pending)

    def _went_down(self, why: str, pending: Pending | None = None) -> None:
        """The database could not be reached: keep ``pending`` for it, and try it every
        :data:`RETRY_S` seconds until every waiting record is written."""
        with self._lock:
            if pending is not None:
                self._keep(pending)
            if self._down is None:
                log.warning(
                    "feedback store %s is down (%s): answers start from the weights last "
                    "read, and their records wait in memory until it is back",
                    self.where,
                    why,
                )
            self._down = why
            if self._retrying is None:
                self._retrying = threading.Thread(
                    target=self._retry, name="specem-feedback-retry", daemon=True
                )
                self._retrying.start()

    def _retry(self) -> None:
        while True:
            time.sleep(RETRY_S)
            if self._write_waiting():
                return

    def _write_waiting(self) -> bool:
        """Write the records that wait, oldest first, on a connection of its own; True
        once none waits (the store is up), False where the database failed again."""
        written = 0
        try:
            with self._connect() as connection:
                while True:
                    with self._lock:
                        if not self._backlog:
                            self._down, self._retrying = None, None
                            break
                        pending = self._backlog[0]
                    with connection.transaction():
                        run(connection, recording(pending))
                    with self._lock:
                        if self._backlog and self._backlog[0] is pending:
                            self._backlog.popleft()
                    written += 1
        except psycopg.Error as error:
            with self._lock:
                self._down = self._said(error)
            return False
        log.warning("feedback store %s is back: %d waiting records written", self.where, written)
        return True

    def forked(self) -> None:
        """In a forked child: the parent's pools and waiting records are the parent's."""
        _INHERITED.extend([self._pool, *self._pools.values()])
        self._lock = threading.Lock()
        self._pool, self._pools = None, {}
        self._down, self._retrying = None, None
        self._backlog = deque()
        self._dropped = 0

    def at_exit(self) -> None:
        """At the process's exit: write what waits if the database answers, else say how
        many records are lost."""
        with self._lock:
            waiting = len(self._backlog)
        if waiting and not self._write_waiting():
            log.warning(
                "feedback store %s is down (%s): %d records could not be written and are lost",
                self.where,
                self._down,
                len(self._backlog),
            )
        with self._lock:
            pool = self._pool
        if pool is not None:
            pool.close()


def closing(loop: asyncio.AbstractEventLoop, pool: AsyncConnectionPool[Any]) -> None:
    """Close an asynchronous pool on its own loop (called there)."""
    loop.create_task(pool.close())


def _at_exit() -> None:
    for store in list(_STORES.values()):
        store.at_exit()


def _after_fork() -> None:
    global _STORES_LOCK
    _STORES_LOCK = threading.Lock()
    for store in list(_STORES.values()):
        store.forked()


atexit.register(_at_exit)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)
