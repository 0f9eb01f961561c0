"""What only a PostgreSQL feedback store has, on a real PostgreSQL server the tests start
(tests/postgres_server.py): clear errors that never show the password, layouts that are not
this one's refused, a record written twice counted once, and outages: the server killed
mid-run and started again, every call answering meanwhile, the records made meanwhile kept
in memory (bounded, the oldest dropped and counted) and written in order once it is back,
the task then as the same records written with no outage."""

from __future__ import annotations

import asyncio
import threading
import time

import psycopg
import pytest

from specem_chain import Feedback
from specem_chain.errors import FeedbackError
from specem_chain.feedback import postgres
from specem_chain.feedback.postgres_sql import LAYOUT, TASKS, Pending, recording, run


@pytest.fixture
def quick(monkeypatch):
    """Outages seen and ended in a fraction of a second, not seconds."""
    monkeypatch.setattr(postgres, "WAIT_S", 0.5)
    monkeypatch.setattr(postgres, "RETRY_S", 0.2)


def answer(k: int) -> dict[str, float]:
    """The k-th answer's final weights: each a little different, so that their order shows."""
    share = 0.1 + 0.8 * ((7 * k) % 17) / 16
    return {"a": share, "b": (1 - share) / 2, "c": (1 - share) / 2}


def wait_until_up(feedback: Feedback, seconds: float = 30.0) -> None:
    deadline = time.monotonic() + seconds
    while not (state := feedback.state()).up or state.buffered:
        assert time.monotonic() < deadline, f"the store did not come back: {state}"
        time.sleep(0.05)


# -- errors ----------------------------------------------------------------------------------


def test_urls_logins_and_databases_that_cannot_be_a_store_get_clear_errors(postgres):
    wrong, port = "not-the-secret-91", postgres.port
    with psycopg.connect(postgres.url(), autocommit=True) as connection:
        connection.execute("SELECT 1")
    cases = [
        (postgres.url(password=wrong), "password authentication failed for user"),
        (postgres.url("no_such_db"), 'database "no_such_db" does not exist'),
        (
            f"postgresql://specem:{wrong}@127.0.0.1:{_closed_port()}/postgres",
            r"cannot reach feedback store postgresql://specem:\*\*\*@127\.0\.0\.1:\d+/postgres",
        ),
        (
            f"postgresql://specem:{wrong}@127.0.0.1:{port}/postgres?no_such_option=1",
            "is not a PostgreSQL URL libpq can read",
        ),
        (
            f"postgresql://specem@127.0.0.1:{port}/postgres?password={wrong}",
            "password authentication failed",
        ),
    ]
    for url, message in cases:
        with pytest.raises(FeedbackError, match=message) as raised:
            Feedback.open(url)
        said = str(raised.value)
        assert wrong not in said and postgres.password not in said
        assert "***" in said


def _closed_port() -> int:
    from postgres_server import free_port

    return free_port()  # nothing listens there


def tables(url: str) -> list[str]:
    with psycopg.connect(url) as connection:
        rows = connection.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY 1"
        ).fetchall()
    return [name for (name,) in rows]


def test_databases_whose_tables_are_not_this_stores_are_refused_and_left_as_they_were(postgres):
    cases = [
        (
            [f"CREATE TABLE {TASKS} (name text)"],
            r"is not a feedback store: it holds tables named as one's "
            r"\(\['specem_feedback_tasks'\]\)",
        ),
        (
            [f"CREATE TABLE {LAYOUT} (owner text)", f"INSERT INTO {LAYOUT} VALUES ('someone')"],
            f"is not a feedback store: its table {LAYOUT} is another application's",
        ),
        (
            [f"UPDATE {LAYOUT} SET version = 99"],
            r"has layout 99, newer than this specem-chain's \(1\): upgrade specem-chain",
        ),
        (
            [f"UPDATE {LAYOUT} SET version = 0"],
            r"has layout 0, older than this specem-chain's \(1\), which cannot read it",
        ),
    ]
    for statements, message in cases:
        url = postgres.new_database()
        if statements[0].startswith("UPDATE"):
            Feedback.open(url).close()  # a store, then made another layout's
        with psycopg.connect(url) as connection:
            for statement in statements:
                connection.execute(statement)
        before = tables(url)
        with pytest.raises(FeedbackError, match=message):
            Feedback.open(url.replace("postgresql://", "postgres://"))  # libpq's other name
        assert tables(url) == before


def test_a_new_database_gets_the_stores_tables_once_when_replicas_start_together(postgres):
    url = postgres.new_database()
    opened: list[object] = []

    def start(task: str) -> None:
        # a URL written differently is a store of its own in this process, as in another one
        opened.append(Feedback.open(f"{url}?application_name={task}", task=task))

    threads = [threading.Thread(target=start, args=(f"replica-{i}",)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(opened) == 4
    assert tables(url) == sorted(
        [
            "specem_feedback_layout",
            "specem_feedback_records",
            "specem_feedback_tasks",
            "specem_feedback_weights",
        ]
    )


def test_a_record_written_twice_counts_once(postgres_url):
    """The case of a commit whose answer was lost with the connection: the record is
    written again when the database is back, and its id tells it was written already."""
    feedback = Feedback.open(postgres_url, task="t")
    pending = Pending.of("t", 0.2, {"a": 0.7, "b": 0.3})
    with psycopg.connect(postgres_url, autocommit=True) as connection:
        for expected in (True, False):
            with connection.transaction():
                assert run(connection, recording(pending)) is expected
    alone = Feedback()
    alone.record({"a": 0.7, "b": 0.3})
    assert feedback.to_json() == alone.to_json()


# -- outages ---------------------------------------------------------------------------------


def test_the_database_killed_and_started_again_loses_no_record_and_fails_no_call(
    own_postgres, quick
):
    """Answers are recorded one after another from a thread while the server is killed
    (every process, SIGKILL) and started again: no call fails, the weights read meanwhile
    are those last read, and the task ends as the same answers recorded with no outage,
    each once, in the order they were made."""
    url = own_postgres.new_database()
    feedback = Feedback.open(url, task="outage")
    alone = Feedback()
    for k in range(5):
        feedback.record(answer(k))
        alone.record(answer(k))
    before = feedback.weights(["a", "b", "c"])
    done, errors = threading.Event(), []

    def answers() -> None:
        try:
            for k in range(5, 65):
                feedback.weights(["a", "b", "c"])
                feedback.record(answer(k))
                time.sleep(0.01)
        except Exception as error:  # what the test is about: no call may fail
            errors.append(error)
        finally:
            done.set()

    recorder = threading.Thread(target=answers)
    recorder.start()
    time.sleep(0.15)
    own_postgres.kill()
    time.sleep(0.3)
    while feedback.state().up:  # the store finds the database gone at its next call
        time.sleep(0.02)
    down = feedback.state()
    assert down.buffered >= 1 and down.error
    assert own_postgres.password not in down.error
    with pytest.raises(FeedbackError, match=r"feedback store .* is down \(.*\); \d+ records wait"):
        feedback.to_json()
    time.sleep(0.5)
    own_postgres.start()
    assert done.wait(60)
    recorder.join()
    assert errors == []
    wait_until_up(feedback)
    assert before != feedback.weights(["a", "b", "c"])

    for k in range(5, 65):
        alone.record(answer(k))
    stored = feedback.to_json()
    assert stored["answers"] == 65 == alone.answers
    assert stored["log_weights"] == pytest.approx(alone.to_json()["log_weights"], rel=1e-12)


async def test_while_the_database_is_down_answers_start_from_the_weights_last_read(
    own_postgres, quick
):
    """The async calls, as the server makes them: reads answer at once with the weights
    last read, records wait (a task opened meanwhile too), ``probe`` says the store is down
    without failing, and all is written when it is back."""
    url = own_postgres.new_database()
    feedback = Feedback.open(url, task="read")
    await feedback.arecord({"a": 0.8, "b": 0.2})
    last_read = await feedback.aweights(["a", "b"])
    own_postgres.kill()

    assert await feedback.aweights(["a", "b"]) == last_read  # found down, answered anyway
    state = await feedback.probe()
    assert not state.up and state.to_json()["state"] == "down"
    await feedback.arecord({"a": 0.1, "b": 0.9})
    assert await feedback.aweights(["a", "b"]) == last_read  # not the record just made
    later = Feedback.open(url, task="opened-while-down")  # the store was checked before
    await later.arecord({"a": 0.3, "b": 0.7})
    assert feedback.state().buffered == 2

    own_postgres.start()
    await asyncio.to_thread(wait_until_up, feedback)
    assert (await feedback.probe()).up
    expected = Feedback()
    expected.record({"a": 0.8, "b": 0.2})
    expected.record({"a": 0.1, "b": 0.9})
    assert feedback.to_json() == expected.to_json()
    assert later.answers == 1 and later.decay == 0.2


def test_past_the_bound_the_oldest_records_are_dropped_and_counted(
    own_postgres, quick, monkeypatch
):
    monkeypatch.setattr(postgres, "BACKLOG", 3)
    url = own_postgres.new_database()
    feedback = Feedback.open(url, task="bound")
    feedback.record(answer(0))
    own_postgres.kill()
    for k in range(1, 7):
        feedback.record(answer(k))  # never fails
    state = feedback.state()
    assert (state.buffered, state.dropped) == (3, 3)
    own_postgres.start()
    wait_until_up(feedback)
    assert feedback.state().dropped == 3

    expected = Feedback()
    for k in (0, 4, 5, 6):  # 1, 2 and 3 were the oldest that waited
        expected.record(answer(k))
    assert feedback.to_json() == expected.to_json()


def test_a_database_down_at_the_first_use_is_a_clear_error(own_postgres):
    url = own_postgres.new_database()
    own_postgres.kill()
    with pytest.raises(FeedbackError, match=r"cannot reach feedback store .*: connection"):
        Feedback.open(url)
