"""``/metrics`` of real ``specem serve`` processes: scraped before and after real requests,
every counter moves by exactly what the answers say; with ``--workers 2``, one scrape adds
up both workers' answers."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from openai_server_harness import serve
from prometheus_client.parser import text_string_to_metric_families
from specem_chain import Feedback, Member, RequestSettings
from test_ready_and_drain import LONG_ANSWER, events, specem_serve, tiny_serve_args
from test_serve_command import answering, free_port
from test_serve_command import specem_serve as specem_serve_workers

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]

OUTCOMES = ("ok", "invalid", "unavailable", "draining", "cut", "error", "disconnected")


def scrape(base: str) -> Samples:
    response = httpx.get(f"{base}/metrics", timeout=30)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain")
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(response.text)
        for sample in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def moved(before: Samples, after: Samples, name: str, **labels: str) -> float:
    return value(after, name, **labels) - value(before, name, **labels)


def ask(base: str, seed: int, stream: bool = False) -> dict[str, Any]:
    """An answer's ``specem`` provenance (a streamed one's: its segments from every chunk,
    the rest from the last round's)."""
    body = {
        "model": "specem",
        "messages": [{"role": "user", "content": "How many clips?"}],
        "max_tokens": 12,
        "seed": seed,
        "stream": stream,
    }
    url = f"{base}/v1/chat/completions"
    if not stream:
        response = httpx.post(url, json=body, timeout=120)
        assert response.status_code == 200, response.text
        return response.json()["specem"]
    with httpx.stream("POST", url, json=body, timeout=120) as response:
        assert response.status_code == 200
        chunks = list(events(response.iter_lines()))
    assert chunks[-1] == "[DONE]"
    specem = [s for s in (json.loads(c).get("specem") for c in chunks[:-1]) if s]
    return specem[-1] | {"segments": [s for part in specem for s in part["segments"]]}


def test_metrics_count_an_answer_a_streamed_answer_and_an_invalid_request(tiny_models, tmp_path):
    """One worker with a feedback store: a plain answer, a streamed one and a 400."""
    store = tmp_path / "tasks.db"
    args = tiny_serve_args(tiny_models, "--feedback", str(store), "--task", "clips")
    with specem_serve(args, tmp_path / "serve.log") as (base, _):
        before = scrape(base)
        for outcome in OUTCOMES:  # every outcome is there from the start
            assert ("specem_requests_total", (("outcome", outcome),)) in before
        answers = [ask(base, 0), ask(base, 1, stream=True)]
        invalid = httpx.post(f"{base}/v1/chat/completions", json={"model": "specem"})
        assert invalid.status_code == 400
        after = scrape(base)

    requests = {o: moved(before, after, "specem_requests_total", outcome=o) for o in OUTCOMES}
    assert requests == {o: {"ok": 2, "invalid": 1}.get(o, 0) for o in OUTCOMES}
    # the 400 was refused before any answer started: only the answers are timed
    assert moved(before, after, "specem_request_seconds_count") == 2
    assert moved(before, after, "specem_request_seconds_bucket", le="+Inf") == 2
    assert moved(before, after, "specem_request_seconds_sum") > 0
    assert moved(before, after, "specem_first_segment_seconds_count") == 2
    first = moved(before, after, "specem_first_segment_seconds_sum")
    assert 0 < first <= moved(before, after, "specem_request_seconds_sum")

    rounds = sum(len(a["segments"]) for a in answers)
    assert rounds >= 4
    assert moved(before, after, "specem_rounds_total") == rounds
    assert moved(before, after, "specem_round_draft_seconds_count") == rounds
    assert moved(before, after, "specem_round_verify_seconds_count") == rounds
    assert moved(before, after, "specem_round_draft_seconds_sum") > 0
    won = 0
    for member in ("llama", "qwen2"):
        # each member drafted and scored in every round: its own time is counted per round,
        # and no longer than the round's (members of a step run side by side)
        assert moved(before, after, "specem_member_draft_seconds_count", member=member) == rounds
        assert (
            0
            < moved(before, after, "specem_member_draft_seconds_sum", member=member)
            <= (moved(before, after, "specem_round_draft_seconds_sum"))
        )
        verified = moved(before, after, "specem_member_score_seconds_count", member=member)
        assert 0 < verified <= rounds
        assert (
            0
            < moved(before, after, "specem_member_score_seconds_sum", member=member)
            <= (moved(before, after, "specem_round_verify_seconds_sum"))
        )
        segments = [s for a in answers for s in a["segments"] if s["member"] == member]
        assert moved(before, after, "specem_segments_won_total", member=member) == len(segments)
        won += len(segments)
        drafted = sum(a["usage"][member]["output_tokens"] for a in answers)
        assert drafted > 0
        assert moved(before, after, "specem_drafted_tokens_total", member=member) == drafted
        assert moved(before, after, "specem_members_dropped_total", member=member) == 0
    assert won == rounds
    answer_tokens = sum(a["answer_tokens"] for a in answers)
    assert answer_tokens > 0
    assert moved(before, after, "specem_answer_tokens_total") == answer_tokens

    weights = Feedback.open(store, "clips").weights(["llama", "qwen2"])
    assert weights != {"llama": 0.5, "qwen2": 0.5}
    for member, weight in weights.items():
        assert value(after, "specem_task_weight", task="clips", member=member) == pytest.approx(
            weight
        )


def multiproc_dir(pid: int) -> Path:
    environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    (found,) = [e for e in environ if e.startswith(b"PROMETHEUS_MULTIPROC_DIR=")]
    return Path(found.split(b"=", 1)[1].decode())


def test_one_scrape_adds_up_the_answers_of_every_worker(tiny_models, tmp_path):
    """``--workers 2``: each worker answers two requests (the other one stopped meanwhile);
    a scrape, whichever worker takes it, counts all four. The command's metrics directory
    goes with the server."""
    args = tiny_serve_args(tiny_models)
    with specem_serve_workers(args, tmp_path / "serve.log", workers=2) as (base, workers):
        assert len(workers) == 2
        shared = multiproc_dir(workers[0])
        assert shared == multiproc_dir(workers[1]) and shared.is_dir()
        with answering(workers[0], workers):
            before = scrape(base)
        answers = []
        for seed, worker in enumerate(workers * 2):
            with answering(worker, workers):
                answers.append(ask(base, seed))
        for worker in workers:  # either worker's scrape sees every answer
            with answering(worker, workers):
                after = scrape(base)
            assert moved(before, after, "specem_requests_total", outcome="ok") == 4
            assert moved(before, after, "specem_request_seconds_count") == 4
            assert moved(before, after, "specem_first_segment_seconds_count") == 4
            rounds = sum(len(a["segments"]) for a in answers)
            assert moved(before, after, "specem_rounds_total") == rounds
            assert moved(before, after, "specem_round_draft_seconds_count") == rounds
            drafted = sum(a["usage"]["llama"]["output_tokens"] for a in answers)
            assert moved(before, after, "specem_drafted_tokens_total", member="llama") == drafted
    assert not shared.exists()


def test_a_client_that_leaves_a_stream_is_counted_disconnected_with_the_rounds_it_got(
    tiny_models, tmp_path
):
    """The client closes a long stream after its first chunk: the server stops the answer
    when it next writes and counts it ``disconnected``, timed, with the rounds run so far."""
    with specem_serve(tiny_serve_args(tiny_models), tmp_path / "serve.log") as (base, _):
        before = scrape(base)
        url = f"{base}/v1/chat/completions"
        with httpx.stream("POST", url, json=LONG_ANSWER, timeout=120) as response:
            assert response.status_code == 200
            next(events(response.iter_lines()))
        deadline = time.monotonic() + 60
        while True:
            after = scrape(base)
            if moved(before, after, "specem_requests_total", outcome="disconnected"):
                break
            assert time.monotonic() < deadline, {
                o: moved(before, after, "specem_requests_total", outcome=o) for o in OUTCOMES
            }
            time.sleep(0.1)
    requests = {o: moved(before, after, "specem_requests_total", outcome=o) for o in OUTCOMES}
    assert requests == {o: float(o == "disconnected") for o in OUTCOMES}
    assert moved(before, after, "specem_request_seconds_count") == 1
    assert moved(before, after, "specem_first_segment_seconds_count") == 1
    # it stopped well before its 180 rounds, after at least the one the client read
    assert 1 <= moved(before, after, "specem_rounds_total") < 180


def test_an_answer_its_members_cannot_serve_is_counted_unavailable(tiny_models):
    """Two members needed, one on a server that is down: a 503, counted ``unavailable``."""
    down = Member.tgi(f"http://127.0.0.1:{free_port()}", name="remote", retries=0)
    members = [down, Member(source=str(tiny_models["llama"]))]
    with serve(members, RequestSettings(min_members=2, max_tokens=16)) as base:
        before = scrape(base)
        body = {"model": "specem", "messages": [{"role": "user", "content": "Hi"}]}
        response = httpx.post(f"{base}/v1/chat/completions", json=body, timeout=60)
        assert response.status_code == 503, response.text
        after = scrape(base)
    requests = {o: moved(before, after, "specem_requests_total", outcome=o) for o in OUTCOMES}
    assert requests == {o: float(o == "unavailable") for o in OUTCOMES}
    assert moved(before, after, "specem_request_seconds_count") == 1
    assert moved(before, after, "specem_first_segment_seconds_count") == 0
