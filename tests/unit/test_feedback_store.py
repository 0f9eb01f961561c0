"""Feedback stores, one suite for both kinds (a SQLite file, and a real PostgreSQL database
that the tests start): a task's weights updated by the in-memory Feedback's own rule, kept
across reopening, several tasks to a store, a task's decay kept, the async calls the same
as the others, and answers recorded at once by several threads, tasks and processes, none
lost. Then what only a SQLite file has: clear errors for paths that cannot be one, and its
busy timeout. (PostgreSQL's own errors and outages: tests/integration/test_feedback_postgres.py.)"""

from __future__ import annotations

import asyncio
import copy
import math
import multiprocessing
import pickle
import sqlite3

import pytest

from specem_chain import Feedback
from specem_chain.errors import FeedbackError
from specem_chain.feedback import APPLICATION_ID, DECAY
from specem_chain.feedback import sqlite as sqlite_store

ANSWERS = [  # (final weights, dropped): a third member joining, and one dropped
    ({"a": 0.7, "b": 0.3}, ()),
    ({"a": 0.2, "b": 0.5, "c": 0.3}, ()),
    ({"a": 0.9, "b": 0.0, "c": 0.1}, ()),  # a weight of 0 does not carry over
    ({"a": 0.5, "b": 0.1, "c": 0.4}, ("c",)),
]


@pytest.fixture(params=["sqlite", "postgresql"])
def store(request: pytest.FixtureRequest, tmp_path) -> str:
    """Where a new feedback store is: a SQLite file's path, or a new PostgreSQL database's
    URL."""
    if request.param == "sqlite":
        return str(tmp_path / "tasks.db")
    return request.getfixturevalue("postgres_url")


def recorded(feedback: Feedback) -> Feedback:
    for weights, dropped in ANSWERS:
        feedback.record(weights, dropped)
    return feedback


def test_a_store_updates_the_weights_as_the_in_memory_feedback_does(store):
    stored = recorded(Feedback.open(store, decay=0.3))
    in_memory = recorded(Feedback(decay=0.3))
    assert stored.to_json() == in_memory.to_json()
    assert stored.weights(["a", "b", "c", "new"]) == in_memory.weights(["a", "b", "c", "new"])
    assert stored.answers == 4
    assert (stored.location, stored.task, stored.decay) == (store, "default", 0.3)


async def test_the_async_calls_read_and_write_as_the_others_do(store):
    stored = Feedback.open(store, task="maths", decay=0.3)
    in_memory = Feedback(decay=0.3)
    assert await stored.aweights(["a", "b"]) == {"a": 0.5, "b": 0.5}
    for weights, dropped in ANSWERS:
        await stored.arecord(weights, dropped)
        in_memory.record(weights, dropped)
        members = ["a", "b", "c", "new"]
        assert await stored.aweights(members) == in_memory.weights(members)
    assert stored.answers == 4
    assert (await stored.probe()).up and stored.state().up


def test_a_store_starts_uniform_and_keeps_its_weights_when_opened_again(store):
    feedback = Feedback.open(store, task="maths")
    assert feedback.weights(["a", "b"]) == {"a": 0.5, "b": 0.5}
    recorded(feedback)
    state = feedback.to_json()
    feedback.close()  # the next use connects again

    again = Feedback.open(store, task="maths")
    assert again.to_json() == state
    assert again.decay == DECAY  # the task's, when none is asked for
    assert again.weights(["a", "b"]) != {"a": 0.5, "b": 0.5}
    field = "path" if store.endswith(".db") else "url"
    assert repr(again).startswith(f"Feedback({field}={again.where!r}, task='maths', decay=0.2, ")
    assert "answers=4" in repr(again)


def test_a_store_holds_several_tasks_apart(store):
    maths = Feedback.open(store, task="maths", decay=0.5)
    code = Feedback.open(store, task="code")
    maths.record({"a": 0.9, "b": 0.1})
    code.record({"a": 0.2, "b": 0.8})
    code.record({"a": 0.2, "b": 0.8})
    assert (maths.answers, code.answers, maths.decay, code.decay) == (1, 2, 0.5, DECAY)
    assert maths.weights(["a", "b"])["a"] > 0.5 > code.weights(["a", "b"])["a"]
    assert Feedback.open(store, task="other").weights(["a", "b"]) == {"a": 0.5, "b": 0.5}


def test_a_task_keeps_the_decay_it_was_started_with(store):
    Feedback.open(store, task="maths", decay=0.5)
    assert Feedback.open(store, task="maths").decay == 0.5
    assert Feedback.open(store, task="maths", decay=0.5).decay == 0.5
    with pytest.raises(ValueError, match=r"task 'maths' in .* has decay 0.5, not 0.2"):
        Feedback.open(store, task="maths", decay=0.2)


def test_a_stored_task_saves_as_json_and_pickles_as_the_same_task(store, tmp_path):
    stored = recorded(Feedback.open(store, task="maths"))
    stored.save(tmp_path / "maths.json")
    assert Feedback.load(tmp_path / "maths.json").to_json() == stored.to_json()
    for twin in (pickle.loads(pickle.dumps(stored)), copy.deepcopy(stored)):
        assert (twin.location, twin.task) == (stored.location, "maths")
        twin.record({"a": 0.6, "b": 0.4})
        assert stored.answers == twin.answers  # one task, shared
    assert stored.answers == 6


def test_bad_settings_are_refused_before_the_store_is_touched(store):
    with pytest.raises(ValueError, match=r"decay must be between 0 and 1, got 1\.5"):
        Feedback.open(store, decay=1.5)
    for task in ("", "   ", "x" * 201):
        with pytest.raises(ValueError, match="a task is named by 1 to 200 characters"):
            Feedback.open(store, task=task)


async def test_concurrent_records_from_threads_and_tasks_all_land(store):
    feedback = Feedback.open(store, decay=0.0)

    async def record(share: float) -> None:
        await asyncio.to_thread(feedback.record, {"a": share, "b": 1 - share})

    async def arecord(share: float) -> None:
        await feedback.arecord({"a": share, "b": 1 - share})

    await asyncio.gather(*(record(0.5 + i / 100) for i in range(10)))
    await asyncio.gather(*(arecord(0.5 + i / 100) for i in range(10)))
    assert feedback.answers == 20


# -- several processes -----------------------------------------------------------------------

PROCESSES, RECORDS = 4, 25
SHARED = {"x": 0.6, "y": 0.4}
"""Every process's answers on the shared members: the same weights each time, so that the
task's weights after them do not depend on the order in which the processes' answers land,
only on how many did (each pulls the members' mean log-weight toward 0 by the decay)."""


def answers_of(process: int) -> list[dict[str, float]]:
    """A process's answers: on its own two members (weights of its own, which only its own
    answers change), and on the shared ones."""
    own = [0.1 + 0.8 * ((7 * process + 3 * k) % 17) / 16 for k in range(RECORDS)]
    return [
        {f"p{process}": share, f"q{process}": 1 - share} if k % 2 == 0 else SHARED
        for k, share in enumerate(own)
    ]


def record_answers(feedback: Feedback, process: int, start) -> None:
    start.wait()  # every process at once
    for weights in answers_of(process):
        feedback.record(weights)


def test_answers_recorded_at_once_by_several_processes_are_all_kept(store):
    """4 processes record 25 answers each into one task at the same moment; the store ends
    as the same 100 answers recorded in one process, one after another: a read-modify-write
    that lost an update would leave a decay step out of the shared members' weights."""
    feedback = Feedback.open(store, task="shared", decay=0.01)
    first = {"x": 0.9, "z": 0.1}  # x's and y's mean log-weight away from 0: 0.99 * log(3)
    feedback.record(first)  # the parent uses the store before it forks: its children reopen it
    fork = multiprocessing.get_context("fork")
    start = fork.Barrier(PROCESSES)
    processes = [
        fork.Process(target=record_answers, args=(feedback, i, start)) for i in range(PROCESSES)
    ]
    for process in processes:
        process.start()
    for process in processes:
        process.join(timeout=120)
    assert [p.exitcode for p in processes] == [0] * PROCESSES
    feedback.record({"x": 0.5, "y": 0.5})  # the parent's connections still work

    alone = Feedback(decay=0.01)
    alone.record(first)
    for i in range(PROCESSES):
        for weights in answers_of(i):
            alone.record(weights)
    alone.record({"x": 0.5, "y": 0.5})
    stored = feedback.to_json()
    assert stored["answers"] == 2 + PROCESSES * RECORDS
    assert stored["log_weights"] == pytest.approx(alone.to_json()["log_weights"], rel=1e-9)
    # each shared answer pulled x's and y's mean log-weight toward 0 by the decay
    x, y = stored["log_weights"]["x"], stored["log_weights"]["y"]
    shared = PROCESSES * (RECORDS // 2) + 1
    assert (x + y) / 2 == pytest.approx(0.99 ** (1 + shared) * math.log(3) / 2, rel=1e-9)


def test_the_shared_members_weights_do_not_depend_on_the_order_of_the_answers():
    """What the test above relies on: any order of the same answers gives the same task."""
    orders = [
        [w for i in range(PROCESSES) for w in answers_of(i)],
        [w for i in reversed(range(PROCESSES)) for w in answers_of(i)],
        [answers_of(i)[k] for k in range(RECORDS) for i in range(PROCESSES)],
    ]
    results = []
    for order in orders:
        feedback = Feedback(decay=0.01)
        feedback.record({"x": 0.9, "z": 0.1})
        for weights in order:
            feedback.record(weights)
        results.append(feedback.to_json()["log_weights"])
    assert results[1] == pytest.approx(results[0], rel=1e-12)
    assert results[2] == pytest.approx(results[0], rel=1e-12)


# -- a SQLite file's own ---------------------------------------------------------------------


def test_paths_that_cannot_make_a_store_get_clear_errors(tmp_path):
    text = tmp_path / "notes.txt"
    text.write_text("some notes that are not a database, and long enough to tell\n")
    saved = tmp_path / "task.json"
    Feedback().save(saved)
    other = tmp_path / "other.db"
    with sqlite3.connect(other) as db:
        db.execute("CREATE TABLE t (x)")
    newer = tmp_path / "newer.db"
    Feedback.open(newer)
    with sqlite3.connect(newer) as db:
        db.execute("PRAGMA user_version = 99")

    cases = [
        (tmp_path / "missing" / "tasks.db", "folder .*missing' does not exist"),
        (tmp_path, "is a folder, not a feedback store"),
        (text, r"notes.txt' is not a feedback store \(not a SQLite database"),
        (saved, r"task.json' is not a feedback store \(not a SQLite database"),
        (other, "other.db' is a SQLite database but not a feedback store"),
        (newer, "has layout 99, newer than this specem-chain's"),
        ("mysql://host/db", "a SQLite file's path or a postgresql:// URL, not a mysql:// URL"),
    ]
    for path, message in cases:
        with pytest.raises(FeedbackError, match=message):
            Feedback.open(path)
    # and each is left as it was
    assert text.read_text().startswith("some notes")
    assert Feedback.load(saved).answers == 0
    with sqlite3.connect(other) as db:
        assert db.execute("PRAGMA application_id").fetchone() == (0,)
        assert db.execute("SELECT name FROM sqlite_master").fetchall() == [("t",)]
        assert db.execute("PRAGMA journal_mode").fetchone() == ("delete",)
    with sqlite3.connect(newer) as db:
        assert db.execute("PRAGMA journal_mode").fetchone() == ("wal",)  # as it was
    assert not (tmp_path / "missing").exists()

    Feedback.open(tmp_path / "path.db", task="maths")  # a Path as well as text
    with pytest.raises(ValueError, match="decay must be between 0 and 1"):
        Feedback.open(tmp_path / "tasks.db", decay=1.5)
    assert not (tmp_path / "tasks.db").exists()  # refused before the file is made


def test_an_empty_file_becomes_a_store(tmp_path):
    path = tmp_path / "tasks.db"
    path.touch()
    Feedback.open(path).record({"a": 0.6, "b": 0.4})
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA application_id").fetchone() == (APPLICATION_ID,)
        assert db.execute("PRAGMA journal_mode").fetchone() == ("wal",)


def test_a_store_locked_past_the_busy_timeout_fails_clearly_and_loses_nothing(
    tmp_path, monkeypatch
):
    monkeypatch.setattr(sqlite_store, "BUSY_TIMEOUT", 0.2)
    path = tmp_path / "tasks.db"
    feedback = Feedback.open(path)
    feedback.record({"a": 0.7, "b": 0.3})
    before = feedback.to_json()
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # another writer, holding the store
    try:
        with pytest.raises(FeedbackError, match=r"feedback store '.*tasks.db': database is locked"):
            feedback.record({"a": 0.1, "b": 0.9})
        assert feedback.weights(["a", "b"]) == Feedback.from_json(before).weights(["a", "b"])
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert feedback.to_json() == before  # the failed answer left nothing half-written
    feedback.record({"a": 0.1, "b": 0.9})
    assert feedback.answers == 2
