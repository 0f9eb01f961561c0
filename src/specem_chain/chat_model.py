"""SpecEMChatModel: the ensemble as a LangChain chat model."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from typing import Any, Literal

from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel, LangSmithParams, LanguageModelInput
from langchain_core.language_models.chat_models import generate_from_stream
from langchain_core.language_models.model_profile import ModelProfile
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage, ToolMessage
from langchain_core.messages.ai import UsageMetadata
from langchain_core.messages.tool import ToolCallChunk
from langchain_core.outputs import ChatGenerationChunk, ChatResult
from langchain_core.runnables import Runnable
from langchain_core.tools import BaseTool
from langchain_core.utils import secret_from_env
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator

from .answer_formats import AnswerOptions
from .engine.tool_calls import TOOL_CALL_CLOSE, TOOL_CALL_OPEN, ParsedCall
from .engine.types import Message, tool_call
from .feedback import Feedback
from .members import Member, ensemble_name, member_list
from .models import DEFAULT_MEMBERS, builtin
from .request import (
    RequestSettings,
    count_tokens,
    merge_call,
    merge_turns,
    open_request,
    segment_record,
)
from .structured_output import json_schema_format, structured_output
from .sync import iterate_sync, run_sync

MISPLACED = {
    "model": "an ensemble has no single model: name its members with members=[...]",
    "model_name": "an ensemble has no single model: name its members with members=[...]",
    "base_url": "a server belongs to a member: members=['tgi+http://host:port', ...]",
}
"""Arguments other chat models take that name something else here, and where it is."""
ROLES = {"system": "system", "human": "user", "ai": "assistant", "tool": "tool"}


class SpecEMChatModel(BaseChatModel, RequestSettings):
    """Several LLMs answer together, one segment at a time (SpecEM).

    ``SpecEMChatModel()`` uses the embedded default ensemble. Members are
    :class:`~specem_chain.Member` objects or member specs (a built-in name, a model folder,
    a ``.gguf`` file, a hub id, ``tgi+http://host:port`` or
    ``openai+http://host:port/v1#model``). Models load on first use and are shared by every request;
    each request has its own sessions, weights and provenance.
    """

    model_config = ConfigDict(extra="forbid")

    members: list[Member] = Field(default_factory=lambda: list(DEFAULT_MEMBERS))
    stop: list[str] | None = None
    streaming: bool = Field(
        False,
        description="invoke() streams internally, so callbacks get one token event per "
        "segment (stream() always streams).",
    )
    model_kwargs: dict[str, Any] = Field(
        default_factory=dict,
        description="Default arguments of every call (request settings and answer "
        "options); a call's own arguments win.",
    )
    api_key: SecretStr | None = Field(
        default_factory=secret_from_env("SPECEM_API_KEY", default=None),
        description="Bearer token of the remote members that have none of their own (no "
        "api_key, nor one in their SPECEM_API_KEY_<NAME> variable); default: the "
        "environment's SPECEM_API_KEY.",
    )
    timeout: float | None = Field(
        None,
        gt=0,
        description="Seconds each request to a remote member's server may take, for the "
        "members that keep the default request_timeout (the whole answer's limit is "
        "answer_timeout).",
    )
    max_retries: int | None = Field(
        None,
        ge=0,
        le=10,
        description="Retries of a failed server request, for the remote members that keep "
        "the default retries.",
    )
    feedback: Feedback | None = Field(
        None,
        exclude=True,
        description="Task-level feedback: weights carried from one answer to the next "
        "(a Feedback object this model updates after each answer: Feedback() in memory, or "
        "Feedback.open(path, task=...), a task of a feedback store that processes share).",
    )

    @model_validator(mode="before")
    @classmethod
    def _no_misplaced_arguments(cls, data: Any) -> Any:
        if isinstance(data, dict):
            for name, where in MISPLACED.items():
                if name in data:
                    raise ValueError(f"SpecEMChatModel takes no {name}=: {where}")
        return data

    @field_validator("members", mode="before")
    @classmethod
    def _members_from_specs(cls, members: Any) -> Any:
        return member_list(members)

    @model_validator(mode="after")
    def _members_for_servers(self) -> SpecEMChatModel:
        self.members = [self._for_server(m) for m in self.members]
        merge_call(self, self.model_kwargs)  # a bad default call argument fails here
        return self

    def _for_server(self, member: Member) -> Member:
        """A remote member with this model's api_key, timeout and max_retries where it
        keeps its defaults."""
        if not member.remote:
            return member
        ours = {
            "api_key": self.api_key,
            "request_timeout": self.timeout,
            "retries": self.max_retries,
        }
        update = {
            name: value
            for name, value in ours.items()
            if value is not None and getattr(member, name) == Member.model_fields[name].default
        }
        if member.key() is not None:  # its own key (or its environment's) comes first
            update.pop("api_key", None)
        return member.model_copy(update=update) if update else member

    @property
    def lc_secrets(self) -> dict[str, str]:
        return {"api_key": "SPECEM_API_KEY"}

    def _resolve_model_profile(self) -> ModelProfile:
        """What the ensemble can do: text in and out, tool calls (forced ones too, streamed
        as chunks) and, when every member is a built-in one, the smallest context of
        theirs. ``structured_output`` is False: small members asked for tools and a JSON
        answer at once often start neither, so ``create_agent`` is better served by asking
        for the structured answer through a forced tool call, which the candidate
        constraint keeps valid (``with_structured_output`` and an explicit
        ``ProviderStrategy`` work too)."""
        profile = ModelProfile(
            text_inputs=True,
            image_inputs=False,
            audio_inputs=False,
            video_inputs=False,
            pdf_inputs=False,
            text_outputs=True,
            tool_calling=True,
            tool_choice=True,
            tool_call_streaming=True,
            structured_output=False,
            temperature=True,
            reasoning_output=False,
            open_weights=all(not m.remote for m in self.members),
        )
        contexts = [b.context if (b := builtin(m.source)) else None for m in self.members]
        if all(c is not None for c in contexts):
            profile["max_input_tokens"] = min(c for c in contexts if c is not None)
        return profile

    # -- serialisation and token counts ------------------------------------------------

    @classmethod
    def is_lc_serializable(cls) -> bool:
        return True

    @property
    def lc_attributes(self) -> dict[str, Any]:
        """The members as plain data, without their API keys: this model's ``api_key`` is
        kept as a secret (SPECEM_API_KEY) that loading takes from ``secrets_map`` or the
        environment, and a member's own key from the environment when it is used
        (:attr:`Member.api_key_env`)."""
        members = [
            m.model_dump(mode="json", exclude_defaults=True, exclude={"api_key"})
            for m in self.members
        ]
        return {"members": members}

    def get_num_tokens_from_messages(
        self, messages: list[BaseMessage], tools: Sequence[Any] | None = None
    ) -> int:
        """The largest member's token count of the conversation as it renders it (with the
        tools), in its own tokenizer; members load as for an answer."""
        conversation = turns_from_langchain(messages)
        tools = [convert_to_openai_tool(t) for t in tools or ()]
        return max(run_sync(count_tokens(self.members, conversation, tools=tools)).values())

    def get_num_tokens(self, text: str) -> int:
        """The largest member's token count of ``text``, in its own tokenizer."""
        return max(run_sync(count_tokens(self.members, text=text)).values())

    def get_token_ids(self, text: str) -> list[int]:
        raise NotImplementedError(
            "the members of an ensemble tokenize text each their own way; use "
            "get_num_tokens(text) (the largest member's count)"
        )

    @property
    def _llm_type(self) -> str:
        return "specem"

    @property
    def model_name(self) -> str:
        """A readable name for the ensemble, naming its members."""
        return ensemble_name(self.members)

    @property
    def _identifying_params(self) -> dict[str, Any]:
        return {
            "members": [m.model_dump() for m in self.members],
            **{name: getattr(self, name) for name in RequestSettings.model_fields},
            "stop": self.stop,
        }

    def _get_ls_params(self, stop: list[str] | None = None, **kwargs: Any) -> LangSmithParams:
        params = super()._get_ls_params(stop=stop, **kwargs)
        params["ls_provider"] = "specem"
        params["ls_model_name"] = kwargs.get("model", self.model_name)
        params["ls_max_tokens"] = kwargs.get("max_tokens", self.max_tokens)
        temperature = kwargs.get("temperature", self.temperature)
        if temperature is not None:
            params["ls_temperature"] = temperature
        if stop or self.stop:
            params["ls_stop"] = [*(self.stop or []), *(stop or [])]
        return params

    # -- tools and structured output -----------------------------------------------------

    def bind_tools(
        self,
        tools: Sequence[dict[str, Any] | type | Callable[..., Any] | BaseTool],
        *,
        tool_choice: str | bool | dict[str, Any] | None = None,
        strict: bool | None = None,
        parallel_tool_calls: bool | None = None,
        response_format: dict[str, Any] | type | None = None,
        **kwargs: Any,
    ) -> Runnable[LanguageModelInput, AIMessage]:
        """The model with ``tools`` given to every member's chat template.

        ``tool_choice``: ``"auto"`` (default) lets the ensemble answer or call, ``"none"``
        hides the tools, ``"any"`` / ``"required"`` / True forces a call, and a tool name
        forces that tool. A forced call is written under a constraint, so every accepted
        segment keeps it a valid call (``strict`` is accepted: calls are always kept to
        their schema). ``parallel_tool_calls=False`` ends the answer after its first call.
        ``response_format`` (an OpenAI ``json_schema`` format, or a Pydantic class or JSON
        schema) makes the answer either tool calls or that JSON object.
        """
        converted = [convert_to_openai_tool(t) for t in tools]
        if response_format is not None and not isinstance(response_format, dict):
            response_format = json_schema_format(response_format)
        # bad options fail here, not at the first call
        AnswerOptions(
            tools=converted,
            tool_choice=tool_choice,
            response_format=response_format,
            parallel_tool_calls=parallel_tool_calls,
        )
        options = {
            "tool_choice": tool_choice,
            "strict": strict,
            "parallel_tool_calls": parallel_tool_calls,
            "response_format": response_format,
        }
        bound = {name: value for name, value in options.items() if value is not None}
        return self.bind(tools=converted, **bound, **kwargs)

    def with_structured_output(
        self,
        schema: dict[str, Any] | type | None = None,
        *,
        method: Literal["json_schema", "function_calling", "json_mode"] = "json_schema",
        include_raw: bool = False,
        strict: bool | None = None,
        **kwargs: Any,
    ) -> Runnable[LanguageModelInput, dict[str, Any] | BaseModel]:
        """The model answering with an object of ``schema`` (a Pydantic class, a TypedDict
        or a JSON schema), written under a constraint that keeps it valid JSON.

        ``method="json_schema"`` (default) asks the members for JSON that follows the
        schema, ``"function_calling"`` forces a call of a tool made from the schema, and
        ``"json_mode"`` asks for any JSON object (say which in the prompt). Pydantic and
        TypedDict results are validated with pydantic. ``include_raw=True`` returns
        ``{"raw", "parsed", "parsing_error"}`` instead of raising on a bad answer.
        ``strict`` is accepted for compatibility: the constraint already keeps the answer
        to the schema's keys.
        """
        return structured_output(self, schema, method=method, include_raw=include_raw, **kwargs)

    # -- the streaming core ------------------------------------------------------------

    async def _rounds(
        self, messages: list[BaseMessage], stop: list[str] | None, kwargs: dict[str, Any]
    ) -> AsyncIterator[ChatGenerationChunk]:
        """One chunk per accepted segment, with its provenance; the last carries the rest."""
        arguments = {k: v for k, v in {**self.model_kwargs, **kwargs}.items() if k[:3] != "ls_"}
        if arguments.get("tools"):
            arguments["tools"] = [convert_to_openai_tool(t) for t in arguments["tools"]]
        settings, options = merge_call(self, arguments, stop=[*(self.stop or ()), *(stop or ())])
        request = open_request(
            self.members, turns_from_langchain(messages), settings, options, feedback=self.feedback
        )
        calls = ToolCallIds()
        async with request as run:
            async for update in run:
                tokens = update.tokens
                usage = UsageMetadata(
                    input_tokens=tokens.input_tokens,
                    output_tokens=tokens.output_tokens,
                    total_tokens=tokens.total_tokens,
                )
                # Lists concatenate when LangChain adds chunks, so each chunk carries its own
                # segment and the joined message carries them all, in order.
                metadata: dict[str, Any] = {"specem": {}}
                if update.finished:
                    metadata = {
                        "model_name": self.model_name,
                        "model_provider": "specem",
                        "finish_reason": run.answer.stop_reason,
                        "specem": run.answer.metadata(),
                    }
                metadata["specem"]["segments"] = [segment_record(update.event)]
                message = AIMessageChunk(
                    content=update.text,
                    tool_call_chunks=[calls.chunk(call) for call in update.tool_calls],
                    usage_metadata=usage,
                    response_metadata=metadata,
                    chunk_position="last" if update.finished else None,
                )
                yield ChatGenerationChunk(message=message)

    # -- LangChain's four entry points ------------------------------------------------

    async def _astream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> AsyncIterator[ChatGenerationChunk]:
        # LangChain's astream() reports each chunk to the callbacks itself.
        async for chunk in self._rounds(messages, stop, kwargs):
            yield chunk

    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        chunks = []
        async for chunk in self._rounds(messages, stop, kwargs):
            if run_manager:
                await run_manager.on_llm_new_token(chunk.text, chunk=chunk)
            chunks.append(chunk)
        return generate_from_stream(iter(chunks))

    def _stream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> Iterator[ChatGenerationChunk]:
        yield from iterate_sync(self._rounds(messages, stop, kwargs))

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        chunks = []
        for chunk in self._stream(messages, stop, **kwargs):
            if run_manager:
                run_manager.on_llm_new_token(chunk.text, chunk=chunk)
            chunks.append(chunk)
        return generate_from_stream(iter(chunks))


class ToolCallIds:
    """A streamed answer's tool calls as LangChain chunks, numbered in order.

    A valid call becomes a chunk with its name and JSON arguments; an invalid one carries
    its raw text, so LangChain files it under ``invalid_tool_calls``.
    """

    def __init__(self) -> None:
        self.count = 0

    def chunk(self, call: ParsedCall) -> ToolCallChunk:
        args = json.dumps(call.args, ensure_ascii=False) if call.valid else None
        self.count += 1
        return ToolCallChunk(
            name=call.name,
            args=args or f"{TOOL_CALL_OPEN}{call.text}{TOOL_CALL_CLOSE}",
            id=call.id,
            index=self.count - 1,
            type="tool_call_chunk",
        )


def text_of(message: BaseMessage, index: int) -> str:
    """The text of a message. An earlier answer's other blocks (its tool calls, read from
    its ``tool_calls``; reasoning, citations...) are left out; other messages' non-text
    blocks get a clear error."""
    if isinstance(message.content, str):
        return message.content
    parts = []
    for block in message.content:
        if isinstance(block, str):
            parts.append(block)
        elif block.get("type") == "text":
            parts.append(block["text"])
        elif not isinstance(message, AIMessage):
            raise ValueError(
                f"message {index} ({message.type}) has a {block.get('type')!r} content block; "
                "SpecEMChatModel accepts text content only"
            )
    return "".join(parts)


def to_message(message: BaseMessage, index: int) -> Message:
    """A LangChain message as a chat-template turn."""
    role = ROLES.get(message.type) or getattr(message, "role", None)
    if role not in ROLES.values():
        raise ValueError(
            f"message {index} is a {message.type!r} message; SpecEMChatModel accepts "
            "system, human, ai and tool messages"
        )
    turn: Message = {"role": role, "content": text_of(message, index)}
    if isinstance(message, AIMessage) and message.tool_calls:
        turn["tool_calls"] = [
            tool_call(call["id"], call["name"], call["args"]) for call in message.tool_calls
        ]
    if isinstance(message, ToolMessage):
        turn["tool_call_id"] = message.tool_call_id
        if message.name:
            turn["name"] = message.name
    return turn


def turns_from_langchain(messages: Sequence[BaseMessage]) -> list[Message]:
    """LangChain messages as chat-template turns, consecutive text turns of one role merged
    (:func:`~specem_chain.request.merge_turns`)."""
    return merge_turns([to_message(message, i) for i, message in enumerate(messages)])
