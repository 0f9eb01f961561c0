"""What the PostgreSQL feedback store says to its database: the tables (their layout,
checked or made at the first use) and the transactions, each written once as a flow of
statements that :func:`run` drives on a connection and :func:`arun` on an asynchronous
one."""

from __future__ import annotations

import uuid
from collections.abc import Generator, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import psycopg

from ..errors import FeedbackError
from .stored import TaskState
from .update import carried_over

RECORD_IDS_KEPT = "1 day"
"""How long the ids of recorded answers are kept, to tell a record written already from
one to write when it is written again after an outage."""
MIN_SERVER = 130000
"""The oldest PostgreSQL this store runs on (13: ``gen_random_uuid`` and friends)."""

APPLICATION = "specem-chain feedback"
"""What marks a database's tables as a feedback store's (in ``specem_feedback_layout``)."""
LAYOUT_VERSION = 1
"""The tables' layout; another one is refused."""
LAYOUT, TASKS, WEIGHTS, RECORDS = (
    "specem_feedback_layout",
    "specem_feedback_tasks",
    "specem_feedback_weights",
    "specem_feedback_records",
)
LAYOUT_LOCK = 0x5370454D
"""The advisory lock under which a process checks the layout, or makes the tables."""
SCHEMA = (
    f"CREATE TABLE {LAYOUT} (application text PRIMARY KEY, version integer NOT NULL)",
    f"CREATE TABLE {TASKS} (name text PRIMARY KEY, decay double precision NOT NULL, "
    "answers bigint NOT NULL DEFAULT 0)",
    f"CREATE TABLE {WEIGHTS} (task text NOT NULL REFERENCES {TASKS} (name), "
    "member text NOT NULL, log_weight double precision NOT NULL, PRIMARY KEY (task, member))",
    f"CREATE TABLE {RECORDS} (id uuid PRIMARY KEY, recorded_at timestamptz NOT NULL DEFAULT now())",
    f"CREATE INDEX {RECORDS}_recorded_at ON {RECORDS} (recorded_at)",
    f"INSERT INTO {LAYOUT} (application, version) VALUES ('{APPLICATION}', {LAYOUT_VERSION})",
)

T = TypeVar("T")
Rows = list[tuple[Any, ...]]
Statement = tuple[str, tuple[Any, ...]]
Flow = Generator[Statement, Rows, T]
"""A transaction's statements, each sent the rows of the one before: written once, run by
:func:`run` (a connection) and :func:`arun` (an asynchronous one)."""


@dataclass(frozen=True)
class Pending:
    """An answer's record, with the id that makes writing it twice count once."""

    task: str
    decay: float
    final: dict[str, float]
    id: uuid.UUID

    @classmethod
    def of(cls, task: str, decay: float, final: Mapping[str, float]) -> Pending:
        return cls(task, decay, dict(final), uuid.uuid4())


# -- the transactions ----------------------------------------------------------------------


def checking_layout(where: str) -> Flow[None]:
    """Check that the database's tables are a feedback store of this layout, or make them
    where there are none."""
    yield ("SELECT pg_advisory_xact_lock(%s)", (LAYOUT_LOCK,))
    [(server,)] = yield ("SELECT current_setting('server_version_num')::int", ())
    if server < MIN_SERVER:
        raise FeedbackError(
            f"feedback store {where} runs PostgreSQL {server // 10000}; it needs "
            f"{MIN_SERVER // 10000} or newer"
        )
    names = (LAYOUT, TASKS, WEIGHTS, RECORDS)
    [found] = yield ("SELECT " + ", ".join(["to_regclass(%s) IS NOT NULL"] * 4), names)
    if not found[0]:
        if any(found):
            taken = [n for n, there in zip(names, found) if there]
            raise FeedbackError(
                f"{where} is not a feedback store: it holds tables named as one's ({taken}) "
                f"but no {LAYOUT}; give another database, or another schema "
                "(?options=-csearch_path%3DNAME in the URL)"
            )
        for statement in SCHEMA:
            yield (statement, ())
        return
    rows = yield (f"SELECT to_jsonb(t) FROM {LAYOUT} t", ())
    versions = [row.get("version") for (row,) in rows if row.get("application") == APPLICATION]
    if len(versions) != 1 or not isinstance(versions[0], int):
        raise FeedbackError(
            f"{where} is not a feedback store: its table {LAYOUT} is another application's; "
            "give another database, or another schema (?options=-csearch_path%3DNAME in "
            "the URL)"
        )
    [version] = versions
    if version > LAYOUT_VERSION:
        raise FeedbackError(
            f"feedback store {where} has layout {version}, newer than this specem-chain's "
            f"({LAYOUT_VERSION}): upgrade specem-chain to use it"
        )
    if version < LAYOUT_VERSION:
        raise FeedbackError(
            f"feedback store {where} has layout {version}, older than this specem-chain's "
            f"({LAYOUT_VERSION}), which cannot read it: keep the specem-chain that made it, "
            "or start a new store"
        )


def reading(task: str) -> Flow[TaskState | None]:
    """The task as stored (None: there is no such task), in one statement."""
    rows = yield (
        f"SELECT t.answers, w.member, w.log_weight FROM {TASKS} t "
        f"LEFT JOIN {WEIGHTS} w ON w.task = t.name WHERE t.name = %s",
        (task,),
    )
    if not rows:
        return None
    return TaskState(rows[0][0], {m: w for _, m, w in rows if m is not None})


def opening(task: str, decay: float) -> Flow[tuple[float, TaskState]]:
    """Make the task where it is new; its decay and state."""
    yield (
        f"INSERT INTO {TASKS} (name, decay, answers) VALUES (%s, %s, 0) "
        "ON CONFLICT (name) DO NOTHING",
        (task, decay),
    )
    [(kept,)] = yield (f"SELECT decay FROM {TASKS} WHERE name = %s", (task,))
    state = yield from reading(task)
    return kept, state or TaskState()


def recording(pending: Pending, prune: bool = False) -> Flow[bool]:
    """Write an answer's record: its id, then the task's row locked and counted, and the
    members' new log-weights. False where its id was there already (written before)."""
    if prune:
        yield (
            f"DELETE FROM {RECORDS} WHERE recorded_at < now() - %s::interval",
            (RECORD_IDS_KEPT,),
        )
    new = yield (
        f"INSERT INTO {RECORDS} (id) VALUES (%s) ON CONFLICT (id) DO NOTHING RETURNING id",
        (pending.id,),
    )
    if not new:
        return False
    [(decay,)] = yield (
        f"INSERT INTO {TASKS} (name, decay, answers) VALUES (%s, %s, 1) "
        f"ON CONFLICT (name) DO UPDATE SET answers = {TASKS}.answers + 1 RETURNING decay",
        (pending.task, pending.decay),
    )
    members = list(pending.final)
    rows = yield (
        f"SELECT member, log_weight FROM {WEIGHTS} WHERE task = %s AND member = ANY(%s)",
        (pending.task, members),
    )
    logs = carried_over(dict(rows), pending.final, decay)
    yield (
        f"INSERT INTO {WEIGHTS} (task, member, log_weight) "
        "SELECT %s, member, log_weight FROM unnest(%s::text[], %s::float8[]) AS "
        "new (member, log_weight) "
        "ON CONFLICT (task, member) DO UPDATE SET log_weight = excluded.log_weight",
        (pending.task, list(logs), list(logs.values())),
    )
    return True


def selecting_one() -> Flow[None]:
    yield ("SELECT 1", ())


def run(connection: psycopg.Connection[Any], flow: Flow[T]) -> T:
    """A transaction's statements on ``connection`` (the caller commits)."""
    rows: Rows | None = None
    try:
        while True:
            sql, parameters = flow.send(rows)  # type: ignore[arg-type]
            cursor = connection.execute(sql, parameters)  # type: ignore[arg-type]
            rows = cursor.fetchall() if cursor.description else []
    except StopIteration as done:
        return done.value


async def arun(connection: psycopg.AsyncConnection[Any], flow: Flow[T]) -> T:
    """:func:`run` on an asynchronous connection."""
    rows: Rows | None = None
    try:
        while True:
            sql, parameters = flow.send(rows)  # type: ignore[arg-type]
            cursor = await connection.execute(sql, parameters)  # type: ignore[arg-type]
            rows = await cursor.fetchall() if cursor.description else []
    except StopIteration as done:
        return done.value
