"""Prometheus metrics, served at ``/metrics``: requests by outcome, latency, rounds, each
member's drafting and scoring time, tokens, segments won, dropped members, the
task-feedback weights and the feedback store's state, and the guard's work: answers in
progress, requests queued, their time in the queue, and requests refused before they were
answered.

The app calls :func:`finished` once per chat completion (whatever its end). With
``specem serve --workers N`` the workers are separate processes: the command sets
``PROMETHEUS_MULTIPROC_DIR`` to a directory of its own before they start, each worker
writes its values there, and ``/metrics`` on any worker reads them all
(:func:`exposition`), so one scrape adds up every worker's counts.
"""

from __future__ import annotations

import os
import threading
from typing import TYPE_CHECKING

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
    multiprocess,
)
from specem_chain.feedback import DEFAULT_TASK

if TYPE_CHECKING:
    from specem_chain import Answer, Feedback
    from specem_chain.feedback import StoreState

MULTIPROC_DIR = "PROMETHEUS_MULTIPROC_DIR"

OUTCOMES = (
    "ok", "invalid", "unavailable", "timeout", "draining", "cut", "error", "disconnected",
)  # fmt: skip
"""How a chat completion ended: answered; refused as the caller's fault (400); a member or
the feedback store failed (503); past its time (504); refused because the server drains
(503); cut at the drain's deadline; a server error (500); the client left mid-stream."""

REJECTIONS = ("invalid_api_key", "overloaded", "body_too_large")
"""Why the guard refused a request before the app saw it: no valid key (401), the queue
was full (429), the body was too large (413)."""

ANSWER_BUCKETS = (0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300, 600)
ROUND_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)

REQUESTS = Counter("specem_requests", "Chat completions by how they ended.", ["outcome"])
LATENCY = Histogram(
    "specem_request_seconds",
    "Time from a chat completion's start to its end (validation errors excluded).",
    buckets=ANSWER_BUCKETS,
)
FIRST_SEGMENT = Histogram(
    "specem_first_segment_seconds",
    "Time from a chat completion's start to its first accepted segment.",
    buckets=ANSWER_BUCKETS,
)
ROUNDS = Counter("specem_rounds", "Rounds run (one accepted segment each).")
DRAFT = Histogram(
    "specem_round_draft_seconds",
    "A round's drafting time (the drafters run side by side).",
    buckets=ROUND_BUCKETS,
)
VERIFY = Histogram(
    "specem_round_verify_seconds",
    "A round's verification time (0 when it needed none).",
    buckets=ROUND_BUCKETS,
)
MEMBER_DRAFT = Histogram(
    "specem_member_draft_seconds",
    "A member's drafting time in a round (over every drafting attempt).",
    ["member"],
    buckets=ROUND_BUCKETS,
)
MEMBER_SCORE = Histogram(
    "specem_member_score_seconds",
    "A member's time to score a round's candidates (rounds that needed verifying).",
    ["member"],
    buckets=ROUND_BUCKETS,
)
DRAFTED = Counter("specem_drafted_tokens", "Tokens each member drafted.", ["member"])
WON = Counter(
    "specem_segments_won", "Accepted segments, by the member that drafted each.", ["member"]
)
ANSWER_TOKENS = Counter(
    "specem_answer_tokens", "Tokens of the accepted answers (in each winner's tokenizer)."
)
DROPPED = Counter(
    "specem_members_dropped", "Members dropped from an answer (kept failing).", ["member"]
)
TASK_WEIGHT = Gauge(
    "specem_task_weight",
    "A member's task-feedback weight, as the latest answer of the task left it.",
    ["task", "member"],
    # the workers share one feedback store: the value set last is the store's latest
    multiprocess_mode="mostrecent",
)

REJECTED = Counter(
    "specem_rejected",
    "Requests the guard refused before the app saw them, by reason.",
    ["reason"],
)
IN_PROGRESS = Gauge(
    "specem_requests_in_progress",
    "Chat completions admitted and not yet ended (a stream until its last event).",
    multiprocess_mode="livesum",
)
QUEUED = Gauge(
    "specem_requests_queued",
    "Chat completions waiting for a slot (--max-concurrent-requests).",
    multiprocess_mode="livesum",
)
QUEUE_SECONDS = Histogram(
    "specem_queue_seconds",
    "Time a chat completion waited in the queue for a slot (those that waited).",
    buckets=ANSWER_BUCKETS,
)

FEEDBACK_UP = Gauge(
    "specem_feedback_store_up",
    "1 while every worker reaches the feedback store, 0 while one finds it down.",
    multiprocess_mode="livemin",
)
FEEDBACK_BUFFERED = Gauge(
    "specem_feedback_buffered_records",
    "Answers' task-feedback records waiting in memory for the feedback store (it is down).",
    multiprocess_mode="livesum",
)
FEEDBACK_DROPPED = Counter(
    "specem_feedback_dropped_records",
    "Answers' task-feedback records dropped because too many waited for the feedback store.",
)
_dropped = 0
"""The records this worker had dropped when last counted."""
_dropped_lock = threading.Lock()

for outcome in OUTCOMES:  # every outcome and reason shows, at 0 until it happens
    REQUESTS.labels(outcome)
for reason in REJECTIONS:
    REJECTED.labels(reason)


def rejected(reason: str) -> None:
    """Count a request the guard refused (one of :data:`REJECTIONS`)."""
    REJECTED.labels(reason).inc()


def finished(
    outcome: str,
    seconds: float | None = None,
    answer: Answer | None = None,
    first_s: float | None = None,
    feedback: Feedback | None = None,
) -> None:
    """Count one chat completion: its ``outcome`` (one of :data:`OUTCOMES`), its time
    (None where it never started an answer), the rounds of its ``answer`` (however far it
    got), the time to its first segment, and, with ``feedback``, the task's weights now
    (a feedback store is read: call it off the event loop)."""
    REQUESTS.labels(outcome).inc()
    if seconds is not None:
        LATENCY.observe(seconds)
    if first_s is not None:
        FIRST_SEGMENT.observe(first_s)
    if answer is None:
        return
    for event in answer.rounds:
        ROUNDS.inc()
        DRAFT.observe(event.timing.draft_s)
        VERIFY.observe(event.timing.verify_s)
        for member, seconds in event.timing.drafting.items():
            MEMBER_DRAFT.labels(member).observe(seconds)
        for member, seconds in event.timing.scoring.items():
            MEMBER_SCORE.labels(member).observe(seconds)
        WON.labels(event.winner).inc()
        for member, tokens in event.drafted_tokens.items():
            DRAFTED.labels(member).inc(tokens)
        for member in event.dropped:
            DROPPED.labels(member).inc()
    for member in answer.unavailable:
        DROPPED.labels(member).inc()
    if answer.rounds:
        ANSWER_TOKENS.inc(answer.rounds[-1].answer_tokens)
        if feedback is not None and answer.rounds[-1].finished:
            task = feedback.task or DEFAULT_TASK
            for member, weight in feedback.weights(answer.members).items():
                TASK_WEIGHT.labels(task, member).set(weight)
            feedback_store(feedback.state())


def feedback_store(state: StoreState | None) -> None:
    """Set the feedback store's metrics from its state as this worker sees it (None: in
    memory, no store)."""
    global _dropped
    if state is None:
        return
    FEEDBACK_UP.set(1 if state.up else 0)
    FEEDBACK_BUFFERED.set(state.buffered)
    with _dropped_lock:
        if state.dropped > _dropped:
            FEEDBACK_DROPPED.inc(state.dropped - _dropped)
            _dropped = state.dropped


def outcome_of(status: int, code: str | None) -> str:
    """The outcome of a chat completion that ended with an error answer (see
    ``errors.api_error``): an answer cut by the drain is the only error with the code
    ``server_shutting_down`` that reaches the app (the drain refuses the others before)."""
    if status == 400:
        return "invalid"
    if code == "server_shutting_down":
        return "cut"
    if status == 504:
        return "timeout"
    return "unavailable" if status == 503 else "error"


def exposition() -> tuple[bytes, str]:
    """The metrics in Prometheus' text format, and its content type: every worker's
    (read from :data:`MULTIPROC_DIR`) where it is set, else this process's."""
    if os.environ.get(MULTIPROC_DIR):
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
        return generate_latest(registry), CONTENT_TYPE_LATEST
    return generate_latest(REGISTRY), CONTENT_TYPE_LATEST


def worker_exit() -> None:
    """At a worker's clean exit: mark its files dead (its counts stay in the sums)."""
    if os.environ.get(MULTIPROC_DIR):
        multiprocess.mark_process_dead(os.getpid())
