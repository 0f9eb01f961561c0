"""The OpenAI chat-completions wire format: the subset the server reads and writes."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, model_validator


class ContentPart(BaseModel):
    """A content part; only ``text`` parts can be answered, others get a clear 400."""

    model_config = ConfigDict(extra="allow")

    type: str
    text: str | None = None

    @model_validator(mode="after")
    def _text_has_text(self) -> ContentPart:
        if self.type == "text" and self.text is None:
            raise ValueError("a text content part needs a text field")
        return self


class FunctionCall(BaseModel):
    name: str
    arguments: str
    """The arguments as a JSON text."""


class ToolCall(BaseModel):
    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


class ChatMessage(BaseModel):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[ContentPart] | None = None
    name: str | None = None
    tool_calls: list[ToolCall] | None = None
    """An assistant turn's tool calls."""
    tool_call_id: str | None = None
    """The call a tool turn answers."""


class StreamOptions(BaseModel):
    model_config = ConfigDict(strict=True)

    include_usage: bool = False


class ChatCompletionRequest(BaseModel):
    """A chat-completions request: the fields the server reads. Any other field is kept in
    ``model_extra``, where the guard refuses those OpenAI defines and the server does not
    implement (:data:`.limits.UNSUPPORTED`); the rest are ignored, as other compatible
    servers do (:data:`.limits.IGNORED`). A field takes only its own JSON type (strict):
    ``true`` or ``"5"`` is no ``max_tokens``, ``"yes"`` no ``stream``."""

    model_config = ConfigDict(extra="allow", strict=True)

    model: str | None = None
    messages: list[ChatMessage] = Field(min_length=1)
    max_tokens: int | None = Field(None, ge=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    temperature: float | None = Field(None, ge=0.0, le=2.0)
    seed: int | None = Field(None, ge=0)
    repeat_penalty: float | None = Field(
        None,
        validation_alias=AliasChoices("repeat_penalty", "repetition_penalty"),
        description="Not OpenAI's: every member's repetition penalty in drafting, under "
        "llama.cpp's server's name or vLLM's (repetition_penalty); checked as the "
        "request setting of that name.",
    )
    loop_penalty: float | None = Field(
        None,
        description="Not OpenAI's: every member's repetition penalty in a round drafted "
        "again to break a loop (1: off); checked as the request setting of that name.",
    )
    stop: str | list[str] | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    response_format: dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    metadata: dict[str, str] | None = Field(
        None,
        description="OpenAI's key-value tags; on a server with task-level feedback "
        "(specem serve --feedback), metadata.task names the task the answer counts toward.",
    )

    @property
    def asked_tokens(self) -> int | None:
        """The answer's length the request asks for: ``max_completion_tokens``, OpenAI's
        name now, else the older ``max_tokens``."""
        return self.max_completion_tokens or self.max_tokens


class Usage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


def absent(value: object) -> bool:
    """Whether a field is left out of the wire format: OpenAI's schema lets it be absent,
    not null."""
    return value is None


class AssistantMessage(BaseModel):
    role: Literal["assistant"] = "assistant"
    content: str | None
    refusal: str | None = None
    """Always null: the members' answer is never a refusal in OpenAI's sense."""
    tool_calls: list[ToolCall] | None = Field(None, exclude_if=absent)


FinishReason = Literal["stop", "length", "tool_calls"]


class Choice(BaseModel):
    index: int = 0
    message: AssistantMessage
    finish_reason: FinishReason
    logprobs: None = None


class ChatCompletion(BaseModel):
    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    choices: list[Choice]
    usage: Usage
    specem: dict[str, Any]
    """Provenance (extension field): segments with candidates and scores, wins, weights."""


ANSWER: dict[str, Any] = {
    "model": ChatCompletion,
    "description": "The answer; with stream: true, server-sent events instead: a "
    "chat.completion.chunk for each round, one with the finish_reason, one with the usage "
    "where stream_options.include_usage asks for it, then data: [DONE].",
    "content": {
        "text/event-stream": {
            "schema": {
                "description": "An event: its data a chat.completion.chunk or an error, as "
                "JSON, or [DONE].",
                "type": "object",
                "properties": {"data": {"type": "string"}},
                "required": ["data"],
            }
        }
    },
}
"""A chat completion's 200, as the app's OpenAPI description gives it."""


class DeltaToolCall(ToolCall):
    index: int


class Delta(BaseModel):
    role: Literal["assistant"] | None = Field(None, exclude_if=absent)
    content: str | None = None
    tool_calls: list[DeltaToolCall] | None = Field(None, exclude_if=absent)


class ChunkChoice(BaseModel):
    index: int = 0
    delta: Delta
    finish_reason: FinishReason | None = None
    logprobs: None = None


class ChatCompletionChunk(BaseModel):
    id: str
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    created: int
    model: str
    choices: list[ChunkChoice]
    usage: Usage | None = Field(None, exclude_if=absent)
    """Only on the last chunk, with ``stream_options.include_usage``."""
    specem: dict[str, Any] | None = None
    """This chunk's segment; the last content chunk also carries wins and weights."""


class Model(BaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str = "specem"


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[Model]


class ErrorBody(BaseModel):
    message: str
    type: str
    param: str | None = None
    code: str | None = None


class ErrorResponse(BaseModel):
    error: ErrorBody
