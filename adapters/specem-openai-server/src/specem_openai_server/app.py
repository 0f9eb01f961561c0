"""The app: ``/v1/chat/completions`` (plain and SSE streaming), ``/v1/models``, ``/health``.

A thin shell over :class:`~specem_chain.SpecEMChatModel`: every request is one
``ainvoke``/``astream`` call, so concurrent requests run concurrently with their own sessions.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any, cast

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, StreamingResponse
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from starlette.exceptions import HTTPException

from specem_chain.chat_model import SpecEMChatModel
from specem_chain.errors import AnswerFormatError, PromptTooLongError, SpecEMError
from .schema import (
    AssistantMessage,
    ChatCompletion,
    ChatCompletionChunk,
    ChatCompletionRequest,
    ChatMessage,
    Choice,
    ChunkChoice,
    Delta,
    DeltaToolCall,
    ErrorBody,
    ErrorResponse,
    FunctionCall,
    Model,
    ModelList,
    ToolCall,
    Usage,
)

MESSAGE_TYPES: dict[str, type[BaseMessage]] = {
    "system": SystemMessage,
    "developer": SystemMessage,
    "user": HumanMessage,
    "assistant": AIMessage,
}


class APIError(Exception):
    """An error to answer with an OpenAI-shaped body and an HTTP status."""

    def __init__(self, status: int, message: str, kind: str, code: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.body = ErrorResponse(error=ErrorBody(message=message, type=kind, code=code))

    def response(self) -> JSONResponse:
        return JSONResponse(self.body.model_dump(), status_code=self.status)


def api_error(error: Exception) -> APIError:
    """The HTTP answer to an error of the ensemble: the caller's fault (400) or ours (503)."""
    if isinstance(error, APIError):
        return error
    if isinstance(error, PromptTooLongError):
        return APIError(400, str(error), "invalid_request_error", "context_length_exceeded")
    if isinstance(error, AnswerFormatError):
        return APIError(500, str(error), "server_error", "answer_format")
    if isinstance(error, SpecEMError):  # a member cannot be loaded or reached
        return APIError(503, str(error), "service_unavailable", "member_unavailable")
    if isinstance(error, TimeoutError):
        return APIError(503, str(error), "service_unavailable", "timeout")
    if isinstance(error, (ValueError, TypeError)):
        return APIError(400, str(error), "invalid_request_error")
    return APIError(500, f"internal error: {type(error).__name__}: {error}", "server_error")


def validation_error(error: RequestValidationError) -> APIError:
    first = error.errors()[0]
    location = [str(p) for p in first["loc"] if p != "body"]
    where = ".".join(location)
    api = APIError(400, f"{where or 'body'}: {first['msg']}", "invalid_request_error")
    api.body.error.param = where or None
    return api


def to_messages(messages: list[ChatMessage]) -> list[BaseMessage]:
    """OpenAI messages as LangChain messages (content parts pass through as blocks)."""
    result: list[BaseMessage] = []
    for index, message in enumerate(messages):
        content: Any = message.content or ""
        if isinstance(content, list):
            content = [part.model_dump(exclude_none=True) for part in content]
        if message.role == "tool":
            result.append(ToolMessage(content, tool_call_id=message.tool_call_id or ""))
        elif message.tool_calls:
            calls = [
                {"name": c.function.name, "args": _arguments(c, index), "id": c.id}
                for c in message.tool_calls
            ]
            result.append(AIMessage(content, tool_calls=calls))
        else:
            result.append(MESSAGE_TYPES[message.role](content=content))
    return result


def _arguments(call: ToolCall, index: int) -> dict[str, Any]:
    try:
        arguments = json.loads(call.function.arguments or "{}")
    except ValueError:
        arguments = None
    if not isinstance(arguments, dict):
        raise APIError(
            400,
            f"messages.{index}.tool_calls: the arguments of {call.id!r} are not a JSON object",
            "invalid_request_error",
        )
    return arguments


def tool_calls_of(message: AIMessage | AIMessageChunk) -> list[DeltaToolCall]:
    """The answer's valid tool calls in the OpenAI format, with their index in the answer
    (a streamed chunk keeps the index of its tool-call chunk)."""
    indexes = {c["id"]: c["index"] for c in getattr(message, "tool_call_chunks", [])}
    return [
        DeltaToolCall(
            index=indexes.get(call["id"], n),
            id=call["id"] or "",
            function=FunctionCall(
                name=call["name"], arguments=json.dumps(call["args"], ensure_ascii=False)
            ),
        )
        for n, call in enumerate(message.tool_calls)
    ]


def call_settings(request: ChatCompletionRequest) -> dict[str, Any]:
    """Per-call settings of SpecEMChatModel, from the request."""
    settings: dict[str, Any] = {
        "max_tokens": request.max_completion_tokens or request.max_tokens,
        "temperature": request.temperature,
        "seed": request.seed,
    }
    if request.stop:
        settings["stop"] = [request.stop] if isinstance(request.stop, str) else request.stop
    for option in ("tools", "tool_choice", "response_format"):
        settings[option] = getattr(request, option)
    return {name: value for name, value in settings.items() if value is not None}


def usage_of(message: AIMessage) -> Usage:
    usage = message.usage_metadata or {"input_tokens": 0, "output_tokens": 0}
    return Usage(
        prompt_tokens=usage["input_tokens"],
        completion_tokens=usage["output_tokens"],
        total_tokens=usage["input_tokens"] + usage["output_tokens"],
    )


def create_app(llm: SpecEMChatModel) -> FastAPI:
    """An OpenAI-compatible app serving ``llm`` (run it with uvicorn)."""
    app = FastAPI(title="specem-chain", description="SpecEM behind the OpenAI chat API.")
    started = int(time.time())

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, error: RequestValidationError) -> JSONResponse:
        return validation_error(error).response()

    @app.exception_handler(HTTPException)
    async def _http(_: Request, error: HTTPException) -> JSONResponse:
        kind = "not_found_error" if error.status_code == 404 else "invalid_request_error"
        return APIError(error.status_code, str(error.detail), kind).response()

    @app.exception_handler(APIError)
    async def _api(_: Request, error: APIError) -> JSONResponse:
        return error.response()

    @app.get("/health")
    async def health() -> dict[str, Any]:
        return {"status": "ok", "model": llm.model_name, "members": llm_members(llm)}

    @app.get("/v1/models")
    async def models() -> ModelList:
        return ModelList(data=[Model(id=llm.model_name, created=started)])

    @app.post("/v1/chat/completions", response_model=None)
    async def chat_completions(
        request: ChatCompletionRequest,
    ) -> ChatCompletion | StreamingResponse:
        messages = to_messages(request.messages)
        settings = call_settings(request)
        if request.stream:
            include_usage = bool(request.stream_options and request.stream_options.include_usage)
            return await stream(llm, messages, settings, include_usage)
        try:
            message = await llm.ainvoke(messages, **settings)
        except Exception as error:
            raise api_error(error) from error
        return ChatCompletion(
            id=completion_id(),
            created=int(time.time()),
            model=llm.model_name,
            choices=[
                Choice(
                    message=AssistantMessage(
                        content=message.text or (None if message.tool_calls else ""),
                        tool_calls=[
                            ToolCall.model_validate(c.model_dump(exclude={"index"}))
                            for c in tool_calls_of(message)
                        ]
                        or None,
                    ),
                    finish_reason=message.response_metadata["finish_reason"],
                )
            ],
            usage=usage_of(message),
            specem=message.response_metadata["specem"],
        )

    return app


def llm_members(llm: SpecEMChatModel) -> list[str]:
    return [member.label for member in llm.members]


def completion_id() -> str:
    return f"chatcmpl-{uuid.uuid4().hex}"


async def stream(
    llm: SpecEMChatModel,
    messages: list[BaseMessage],
    settings: dict[str, Any],
    include_usage: bool,
) -> StreamingResponse:
    """Server-sent events, one per accepted segment. The first segment is awaited before the
    response starts, so errors that come before any text get their HTTP status."""
    chunks = cast(AsyncGenerator[AIMessageChunk, None], llm.astream(messages, **settings))
    try:
        first = await anext(chunks)
    except Exception as error:
        await chunks.aclose()
        raise api_error(error) from error
    return StreamingResponse(
        events(llm.model_name, first, chunks, include_usage), media_type="text/event-stream"
    )


async def events(
    model: str,
    first: AIMessageChunk,
    rest: AsyncGenerator[AIMessageChunk, None],
    include_usage: bool,
) -> AsyncIterator[str]:
    identity = {"id": completion_id(), "created": int(time.time()), "model": model}
    total = first
    delta = Delta(role="assistant", content=first.text, tool_calls=tool_calls_of(first) or None)
    try:
        yield sse(
            ChatCompletionChunk(
                **identity,
                choices=[ChunkChoice(delta=delta)],
                specem=first.response_metadata["specem"],
            )
        )
        async for chunk in rest:
            total += chunk
            calls = tool_calls_of(chunk) or None
            choice = ChunkChoice(delta=Delta(content=chunk.text, tool_calls=calls))
            specem = chunk.response_metadata["specem"]
            yield sse(ChatCompletionChunk(**identity, choices=[choice], specem=specem))
    except Exception as error:  # the status line is sent: report the error in the stream
        yield "data: " + api_error(error).body.model_dump_json() + "\n\n"
        return
    finally:
        await rest.aclose()
    finish = ChunkChoice(delta=Delta(), finish_reason=total.response_metadata["finish_reason"])
    yield sse(ChatCompletionChunk(**identity, choices=[finish]))
    if include_usage:
        yield sse(ChatCompletionChunk(**identity, choices=[], usage=usage_of(total)))
    yield "data: [DONE]\n\n"


def sse(chunk: ChatCompletionChunk) -> str:
    return f"data: {chunk.model_dump_json()}\n\n"
