"""The app: ``/v1/chat/completions`` (plain and SSE streaming), ``/v1/models``, ``/health``
(liveness), ``/ready`` (readiness: each member, and whether the server takes requests) and
``/metrics`` (Prometheus, :mod:`.metrics`).

A request passes the guard before any member runs: its key (:mod:`.keys`), the drain
(:mod:`.drain`), its body's size and a slot among the answers in progress
(:mod:`.admission`), then its fields and its prompt's length (:mod:`.limits`). Every chat
completion is then one :func:`specem_chain.open_request` with its own sessions and weights,
so concurrent requests run side by side on the server's event loop. With task-level
feedback, each starts from its task's weights and carries its own over.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import anyio
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from specem_chain import Feedback, Member, RequestSettings, Update, open_request
from specem_chain import Request as SpecEMRequest
from specem_chain.errors import FeedbackError
from specem_chain.members import ensemble_name, member_list
from specem_chain.request import merge_call, warm_up
from starlette.exceptions import HTTPException

from . import metrics
from .admission import Admission, Admit
from .drain import DRAIN_S, Drain, Draining
from .errors import ERROR_RESPONSES, APIError, api_error, bad_request, http_error, validation_error
from .from_openai import call_arguments, turns_from_openai
from .keys import ApiKeys, RequireKey
from .limits import Guard, Limits
from .readiness import readiness
from .schema import (
    ANSWER,
    ChatCompletion,
    ChatCompletionChunk,
    ChatCompletionRequest,
    Model,
    ModelList,
)
from .to_openai import Chunks, completion


def create_app(
    members: Sequence[Member | str] | Member | str,
    settings: RequestSettings | None = None,
    *,
    load: bool = False,
    feedback: Feedback | None = None,
    drain_s: float = DRAIN_S,
    limits: Limits | None = None,
    keys: ApiKeys | None = None,
    metrics_need_key: bool = False,
) -> FastAPI:
    """An OpenAI-compatible app serving the ensemble of ``members`` (``Member`` objects or
    member specs) with ``settings`` as every request's defaults; a request's
    ``max_tokens``, ``temperature``, ``repeat_penalty``, ``loop_penalty`` and ``seed``
    override theirs. Run it with uvicorn. With ``load``, it loads every member as it
    starts (and does not start where one cannot load); else each loads at its first
    request, and one that cannot makes that request a 503.

    ``limits`` are the guard's (:class:`~.limits.Limits`; None: every default). With
    ``keys`` that hold any key, every request under ``/v1/`` (and ``/metrics`` with
    ``metrics_need_key``) needs one of them.

    With ``feedback`` (task-level feedback, a :class:`~specem_chain.Feedback`), every
    answer starts from the task's weights and carries its own over; with a feedback store
    (``Feedback.open(path, task)``), a request may name another task of the store in
    ``metadata.task``.

    Run by uvicorn in its main thread, a SIGTERM drains it for at most ``drain_s`` seconds
    (:mod:`.drain`) before uvicorn stops it."""
    members = member_list(members)
    drain = Drain(drain_s)
    defaults = settings or RequestSettings()
    limits = limits or Limits()
    keys = keys or ApiKeys()
    guard = Guard.of(limits, members, defaults.max_tokens)
    name = ensemble_name(members)
    tasks: dict[str, Feedback] = {}

    async def task_feedback(body: ChatCompletionRequest) -> Feedback | None:
        """The feedback a request counts toward: the server's task, or the task of the
        server's feedback store that its ``metadata.task`` names."""
        task = (body.metadata or {}).get("task")
        if feedback is None or feedback.location is None or task is None or task == feedback.task:
            return feedback
        if task not in tasks:
            try:
                tasks[task] = await asyncio.to_thread(Feedback.open, feedback.location, task)
            except FeedbackError:
                raise
            except ValueError as error:
                raise bad_request(f"metadata.task: {error}", "metadata.task") from None
        return tasks[task]

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        if load:  # in this process: each worker of a server holds its own
            await warm_up(members)
        drain.install()
        keys.install_reload()
        try:
            yield
        finally:
            metrics.worker_exit()

    app = FastAPI(
        title="specem-chain",
        description="SpecEM behind the OpenAI chat API.",
        lifespan=lifespan,
    )
    # the outermost last: the key, then the drain, then the body and a slot
    admission = Admission(guard.max_concurrent_requests, guard.max_queue)
    app.add_middleware(Admit, admission=admission, path=CHAT, max_body_bytes=limits.max_body_bytes)
    app.add_middleware(Draining, drain=drain, refused=refused)
    app.add_middleware(RequireKey, keys=keys, metrics_need_key=metrics_need_key)
    started = int(time.time())

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, error: RequestValidationError) -> JSONResponse:
        if request.url.path == CHAT:
            metrics.finished("invalid")
        return validation_error(error).response()

    @app.exception_handler(HTTPException)
    async def _http(_: Request, error: HTTPException) -> JSONResponse:
        return http_error(error).response()

    @app.exception_handler(APIError)
    async def _api(_: Request, error: APIError) -> JSONResponse:
        return error.response()

    @app.get("/health")
    async def health() -> dict[str, Any]:
        return {"status": "ok", "model": name, "members": [m.label for m in members]}

    @app.get("/ready")
    async def ready() -> JSONResponse:
        status, body = await readiness(members, defaults.min_members, drain.draining)
        if feedback is not None and (store := await feedback.probe()) is not None:
            metrics.feedback_store(store)  # said, not waited for: answers do not need it
            body["feedback"] = store.to_json()
        return JSONResponse({"model": name} | body, status_code=status)

    @app.get("/metrics", response_class=PlainTextResponse)
    async def metrics_() -> Response:
        if feedback is not None:
            metrics.feedback_store(feedback.state())
        body, kind = await asyncio.to_thread(metrics.exposition)
        return Response(body, media_type=kind)

    @app.get("/v1/models", responses=ERROR_RESPONSES)
    async def models() -> ModelList:
        return ModelList(data=[Model(id=name, created=started)])

    @app.post(CHAT, response_model=None, responses={200: ANSWER, **ERROR_RESPONSES})
    async def chat_completions(body: ChatCompletionRequest) -> ChatCompletion | StreamingResponse:
        started = time.perf_counter()
        try:  # bad input fails here, before any member runs
            guard.check_fields(body)
            settings, options = merge_call(defaults, call_arguments(body))
            turns = turns_from_openai(body.messages)
            request = open_request(
                members, turns, settings, options, feedback=await task_feedback(body)
            )
            await guard.check_prompt(
                request.members, request.messages, request.format.tools, settings.max_tokens
            )
        except Exception as error:
            failure = api_error(error)
            await counted(failure, None, started)
            raise failure from error
        if body.stream:
            include_usage = bool(body.stream_options and body.stream_options.include_usage)
            return await stream(request, name, include_usage, drain, started)
        return await complete(request, name, drain, started)

    return app


CHAT = "/v1/chat/completions"


def refused(path: str) -> None:
    """Count a chat completion the drain refused."""
    if path == CHAT:
        metrics.finished("draining")


async def counted(
    outcome: str | APIError,
    request: SpecEMRequest | None,
    started: float,
    first_s: float | None = None,
) -> None:
    """Count a chat completion in the metrics (off the event loop: the task's weights are
    read from the feedback store)."""
    if isinstance(outcome, APIError):
        outcome = metrics.outcome_of(outcome.status, outcome.body.error.code)
    await asyncio.to_thread(
        metrics.finished,
        outcome,
        time.perf_counter() - started,
        request.answer if request else None,
        first_s,
        request.feedback if request else None,
    )


SERVED = "SPECEM_SERVE"
"""The environment variable through which ``specem serve --workers N`` gives each worker
its members, settings and feedback store (:func:`served`)."""


def serving(
    members: Sequence[Member],
    settings: RequestSettings,
    feedback: Feedback | None = None,
    drain_s: float = DRAIN_S,
    limits: Limits | None = None,
    keys: ApiKeys | None = None,
    metrics_need_key: bool = False,
) -> str:
    """What :data:`SERVED` holds: the members (their API keys included: it goes only to the
    server's own worker processes), the settings, the feedback store's path and task, the
    drain's seconds, the guard's limits and the server's keys (their digests and key
    file), as JSON."""
    if feedback is not None and feedback.location is None:
        raise ValueError("the workers of a server share task feedback in a feedback store")
    return json.dumps(
        {
            "members": [
                m.model_dump(mode="json")
                | ({"api_key": m.api_key.get_secret_value()} if m.api_key else {})
                for m in members
            ],
            "settings": settings.model_dump(mode="json"),
            "feedback": (
                {"location": feedback.location, "task": feedback.task} if feedback else None
            ),
            "drain_s": drain_s,
            "limits": (limits or Limits()).model_dump(),
            "keys": (keys or ApiKeys()).shared(),
            "metrics_need_key": metrics_need_key,
        }
    )


def served() -> FastAPI:
    """The app of one of ``specem serve --workers N``'s workers (a uvicorn factory): every
    worker opens the one feedback store."""
    data = json.loads(os.environ[SERVED])
    store = data.get("feedback")
    return create_app(
        [Member.model_validate(m) for m in data["members"]],
        RequestSettings.model_validate(data["settings"]),
        load=True,
        feedback=Feedback.open(store["location"], store["task"]) if store else None,
        drain_s=data["drain_s"],
        limits=Limits.model_validate(data["limits"]),
        keys=ApiKeys.from_shared(data["keys"]),
        metrics_need_key=data["metrics_need_key"],
    )


async def complete(
    request: SpecEMRequest, name: str, drain: Drain, started: float
) -> ChatCompletion:
    first: list[float] = []

    async def answer() -> str:
        texts = []
        async with request as run:
            async for update in run:
                if not first:
                    first.append(time.perf_counter() - started)
                texts.append(update.text)
        return "".join(texts)

    try:
        text = await drain.before_cut(answer())
    except Exception as error:
        failure = api_error(error)
        await counted(failure, request, started, first[0] if first else None)
        raise failure from error
    await counted("ok", request, started, first[0] if first else None)
    return completion(name, request.answer, text)


async def stream(
    request: SpecEMRequest, name: str, include_usage: bool, drain: Drain, started: float
) -> StreamingResponse:
    """Server-sent events, one per round. The first round is awaited before the response
    starts, so errors that come before any text get their HTTP status; an error after it
    (a drain's deadline among them) is the stream's last event."""
    rounds = request.updates()
    try:
        first = await drain.before_cut(anext(rounds))
    except Exception as error:
        await rounds.aclose()
        failure = api_error(error)
        await counted(failure, request, started)
        raise failure from error
    first_s = time.perf_counter() - started
    return StreamingResponse(
        events(Chunks(name), request, first, rounds, include_usage, drain, (started, first_s)),
        media_type="text/event-stream",
    )


async def events(
    chunks: Chunks,
    request: SpecEMRequest,
    first: Update,
    rest: AsyncGenerator[Update, None],
    include_usage: bool,
    drain: Drain,
    times: tuple[float, float],
) -> AsyncIterator[str]:
    """The stream's events; ``times``: when the request started, and its first segment's
    seconds (for the metrics, counted before the last event)."""
    answer, (started, first_s) = request.answer, times
    done = False
    try:
        yield sse(chunks.round(first, answer, first=True))
        while True:
            try:
                update = await drain.before_cut(anext(rest))
            except StopAsyncIteration:
                break
            yield sse(chunks.round(update, answer))
        await rest.aclose()
        done = True
        await counted("ok", request, started, first_s)
        yield sse(chunks.finish(answer))
        if include_usage:
            yield sse(chunks.usage(answer))
        yield "data: [DONE]\n\n"
    except Exception as error:  # the status line is sent: report the error in the stream
        failure = api_error(error)
        if not done:
            done = True
            await counted(failure, request, started, first_s)
        yield "data: " + failure.body.model_dump_json() + "\n\n"
    finally:
        if not done:  # the client went away: the stream is cancelled
            seconds = time.perf_counter() - started
            metrics.finished("disconnected", seconds, answer, first_s)
        with anyio.CancelScope(shield=True):  # the members' sessions close all the same
            await rest.aclose()


def sse(chunk: ChatCompletionChunk) -> str:
    return f"data: {chunk.model_dump_json()}\n\n"
