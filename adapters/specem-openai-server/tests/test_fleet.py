"""``specem serve`` past one machine, on a real PostgreSQL server the tests start: replicas
that share nothing but the feedback database learn one set of weights per task (a replica
started later starts from them); the database killed and started again fails no answer,
``/ready`` and ``/metrics`` say it is down and how many records wait, and every record lands
once it is back; a URL that cannot be opened is a one-line error without its password."""

from __future__ import annotations

import time
from typing import Any

import httpx
import pytest
from openai_server_harness import serve
from specem_chain import Feedback, RequestSettings
from specem_chain.cli import app
from specem_chain.feedback import postgres as postgres_store
from test_serve_command import ask, specem_serve
from typer.testing import CliRunner

NAMES = ["llama", "qwen2"]


def test_a_feedback_url_that_cannot_be_opened_is_a_one_line_error(postgres):
    wrong = "not-the-password-47"
    url = postgres.url(password=wrong)
    result = CliRunner().invoke(app, ["serve", "-m", "/no/such/model", "--feedback", url])
    assert result.exit_code == 2
    said = " ".join(result.stderr.split())
    assert "error: --feedback: cannot reach feedback store postgresql://specem:***@" in said
    assert "password authentication failed" in said
    assert wrong not in said and postgres.password not in said


def metric(base: str, name: str) -> float:
    for line in httpx.get(f"{base}/metrics").text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name} is not in /metrics")


def answered(base: str, seed: int) -> dict[str, Any]:
    body = {
        "model": "specem",
        "messages": [{"role": "user", "content": "How many clips?"}],
        "max_tokens": 8,
        "seed": seed,
    }
    response = httpx.post(f"{base}/v1/chat/completions", json=body, timeout=120)
    assert response.status_code == 200, response.text  # never failed by the store
    return response.json()["specem"]


def test_answers_go_on_while_the_feedback_database_is_down_and_every_record_lands(
    own_postgres, tiny_models, monkeypatch
):
    monkeypatch.setattr(postgres_store, "WAIT_S", 0.5)
    monkeypatch.setattr(postgres_store, "RETRY_S", 0.2)
    url = own_postgres.new_database()
    members = [str(tiny_models[name]) for name in NAMES]
    expected = Feedback()  # the same answers' records, written with no outage
    feedback = Feedback.open(url, task="support")
    with serve(members, RequestSettings(max_tokens=8), feedback=feedback) as base:
        for seed in (0, 1):
            answer = answered(base, seed)
            assert answer["start_weights"] == pytest.approx(expected.weights(NAMES))
            expected.record(answer["weights"], answer["dropped"])
        ready = httpx.get(f"{base}/ready")
        assert ready.status_code == 200
        assert ready.json()["feedback"] == {
            "store": "postgresql",
            "where": feedback.where,
            "state": "up",
            "buffered": 0,
            "dropped": 0,
        }
        # the weights as the server last read them (after each answer, for /metrics)
        last_read = expected.weights(NAMES)

        own_postgres.kill()
        for seed in (2, 3, 4, 5):
            answer = answered(base, seed)
            assert answer["start_weights"] == pytest.approx(last_read)
            expected.record(answer["weights"], answer["dropped"])
        ready = httpx.get(f"{base}/ready")
        assert ready.status_code == 200  # answers do not need the store
        store = ready.json()["feedback"]
        assert (store["state"], store["buffered"], store["dropped"]) == ("down", 4, 0)
        assert own_postgres.password not in ready.text
        assert metric(base, "specem_feedback_buffered_records") == 4
        assert metric(base, "specem_feedback_store_up") == 0

        own_postgres.start()
        deadline = time.monotonic() + 60
        while (store := httpx.get(f"{base}/ready").json()["feedback"])["state"] != "up":
            assert time.monotonic() < deadline, f"the store did not come back: {store}"
            time.sleep(0.1)
        assert store["buffered"] == 0
        assert metric(base, "specem_feedback_buffered_records") == 0
        assert metric(base, "specem_feedback_store_up") == 1
        answer = answered(base, 6)  # from every record, those of the outage too
        assert answer["start_weights"] == pytest.approx(expected.weights(NAMES))
        expected.record(answer["weights"], answer["dropped"])

    stored = Feedback.open(url, task="support").to_json()
    assert stored["answers"] == 7
    assert stored["log_weights"] == pytest.approx(expected.to_json()["log_weights"], rel=1e-9)


@pytest.mark.heavy
def test_replicas_that_share_only_the_database_learn_one_set_of_weights(
    postgres, tiny_models, tmp_path, monkeypatch
):
    """Two ``specem serve`` processes, each with its own port and folder, answer in turn:
    each answer starts from the weights every answer before it left, whichever replica made
    it; a third replica started later starts from them. The password reaches them as
    PGPASSWORD, not in the URL (as from a Secret)."""
    database = postgres.new_database().rsplit("/", 1)[1]
    url = f"postgresql://specem@127.0.0.1:{postgres.port}/{database}"
    monkeypatch.setenv("PGPASSWORD", postgres.password)
    args = [*(a for name in NAMES for a in ("-m", str(tiny_models[name])))]
    args += ["--feedback", url, "--task", "clips"]
    folders = [tmp_path / name for name in ("one", "two", "three")]
    for folder in folders:
        folder.mkdir()
    expected = Feedback()
    with (
        specem_serve(args, folders[0] / "serve.log", workers=1) as (one, _),
        specem_serve(args, folders[1] / "serve.log", workers=1) as (two, _),
    ):
        for seed, base in enumerate([one, two, two, one]):
            answer = ask(base, seed)
            assert answer["start_weights"] == pytest.approx(expected.weights(NAMES))
            expected.record(answer["weights"], answer["dropped"])
    stored = Feedback.open(url, task="clips").to_json()
    assert stored["answers"] == 4
    assert stored["log_weights"] == pytest.approx(expected.to_json()["log_weights"], rel=1e-9)

    with specem_serve(args, folders[2] / "serve.log", workers=1) as (three, _):
        answer = ask(three, 4)
    assert answer["start_weights"] == pytest.approx(expected.weights(NAMES))
    assert answer["start_weights"] != pytest.approx({"llama": 0.5, "qwen2": 0.5})
    said = " ".join((folders[2] / "serve.log").read_text().split())
    assert f"feedback: {url}, task clips (4 answers)" in said
