"""SpecEM: the specem-chain ensemble as a LlamaIndex function-calling LLM."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import TYPE_CHECKING, Any

from llama_index.core.base.llms.generic_utils import (
    achat_to_completion_decorator,
    astream_chat_to_completion_decorator,
    chat_to_completion_decorator,
    stream_chat_to_completion_decorator,
)
from llama_index.core.base.llms.types import (
    ChatMessage,
    ChatResponse,
    ChatResponseAsyncGen,
    ChatResponseGen,
    CompletionResponse,
    CompletionResponseAsyncGen,
    CompletionResponseGen,
    LLMMetadata,
    MessageRole,
    TextBlock,
    ToolCallBlock,
)
from llama_index.core.bridge.pydantic import Field, field_validator
from llama_index.core.llms.callbacks import llm_chat_callback, llm_completion_callback
from llama_index.core.llms.function_calling import FunctionCallingLLM
from llama_index.core.llms.llm import ToolSelection

from specem_chain import (
    Feedback,
    Member,
    Request,
    RequestSettings,
    Update,
    merge_call,
    open_request,
)
from specem_chain.members import ensemble_name, member_list
from specem_chain.models import DEFAULT_MEMBERS, builtin
from specem_chain.request import segment_record
from specem_chain.sync import iterate_sync

from .messages import to_tool, tool_block, tool_selections, turns_from_llama_index

if TYPE_CHECKING:
    from llama_index.core.tools.types import BaseTool

DEFAULT_CONTEXT_WINDOW = 8192
"""Tokens of context assumed for an ensemble with a member that is not built-in (whose
context specem-chain does not know). A member with a smaller context fails a longer prompt
with a clear error; set ``context_window`` to the smallest of your members' contexts."""


class SpecEM(FunctionCallingLLM, RequestSettings):
    """Several LLMs answer together, one segment at a time (SpecEM).

    ``SpecEM()`` uses the embedded default ensemble. Members are
    :class:`~specem_chain.Member` objects or member specs (a built-in name, a model folder,
    a ``.gguf`` file, a hub id, ``tgi+http://host:port`` or ``openai+http://host:port/v1#model``).
    The request's settings (``window``, ``max_tokens``, ``policy``, ``learning_rate``,
    ``seed``, ``temperature``, ``answer_timeout``...) are
    :class:`~specem_chain.RequestSettings`' own; every one can also be set per call, with
    the answer's options (``stop``, ``tools``, ``tool_choice``, ``response_format``,
    ``parallel_tool_calls``, ``strict``), as in every specem front end.

    Examples:
        `pip install ./adapters/llama-index-llms-specem`

        ```python
        from llama_index.llms.specem import SpecEM

        llm = SpecEM(max_tokens=64, seed=0)
        print(llm.complete("Why is the sky blue?"))
        ```
    """

    members: list[Member] = Field(
        default_factory=lambda: list(DEFAULT_MEMBERS),
        description="The ensemble: Member objects or member specs.",
    )
    stop: list[str] | None = Field(None, description="The answer ends before any of these.")
    context_window: int | None = Field(
        None,
        gt=0,
        description="Tokens of context LlamaIndex may fill (the smallest member's context); "
        "unset: the smallest built-in member's, or DEFAULT_CONTEXT_WINDOW.",
    )
    feedback: Feedback | None = Field(
        None,
        exclude=True,
        description="Task-level feedback: weights carried from one answer to the next "
        "(a Feedback object this LLM updates after each answer).",
    )

    @field_validator("members", mode="before")
    @classmethod
    def _members_from_specs(cls, members: Any) -> list[Member]:
        return member_list(members)

    @classmethod
    def class_name(cls) -> str:
        return "SpecEM_llm"

    @property
    def model_name(self) -> str:
        """A readable name for the ensemble, naming its members."""
        return ensemble_name(self.members)

    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata(
            context_window=self.context_window or self._members_context(),
            num_output=self.max_tokens,
            is_chat_model=True,
            is_function_calling_model=True,
            model_name=self.model_name,
        )

    def _members_context(self) -> int:
        """The smallest built-in member's context, when every member is built-in."""
        contexts = [b.context if (b := builtin(m.source)) else None for m in self.members]
        if None in contexts:
            return DEFAULT_CONTEXT_WINDOW
        return min(c for c in contexts if c is not None)

    # -- one request -------------------------------------------------------------------

    def _request(self, messages: Sequence[ChatMessage], kwargs: dict[str, Any]) -> Request:
        """The request for ``messages``, checked: a bad setting, tool or format raises here,
        before any member runs (an unknown argument a TypeError)."""
        settings, options = merge_call(self, kwargs, stop=self.stop)
        return open_request(
            self.members,
            turns_from_llama_index(messages),
            settings,
            options,
            feedback=self.feedback,
        )

    async def _responses(self, request: Request) -> AsyncIterator[ChatResponse]:
        """One response per accepted segment: the answer so far, the segment as ``delta``,
        the token counts so far, and the provenance in ``raw`` (the last one carries all)."""
        text, blocks, invalid = "", [], []
        async with request as run:
            async for update in run:
                text += update.text
                for call in update.tool_calls:
                    if call.valid:
                        blocks.append(tool_block(call))
                    else:
                        invalid.append(call.record())
                message = ChatMessage(
                    role=MessageRole.ASSISTANT,
                    blocks=[TextBlock(text=text), *blocks],
                    additional_kwargs={"invalid_tool_calls": list(invalid)} if invalid else {},
                )
                raw = self._raw(run, update)
                yield ChatResponse(
                    message=message,
                    delta=update.text,
                    raw=raw,
                    additional_kwargs=dict(raw["usage"]),
                )

    def _raw(self, run: Request, update: Update) -> dict[str, Any]:
        """A response's ``raw``: the model, token counts so far, this round's segment, and,
        once the answer is finished, the finish reason and the whole provenance."""
        answer = run.answer
        raw: dict[str, Any] = {
            "model": self.model_name,
            "finish_reason": None,
            "usage": answer.tokens.openai(),
            "specem": {"segment": segment_record(update.event)},
        }
        if update.finished:
            raw["finish_reason"] = answer.stop_reason
            raw["specem"].update(answer.metadata(), segments=answer.segments())
        return raw

    @staticmethod
    def _whole(responses: list[ChatResponse]) -> ChatResponse:
        """The whole answer: the last response, without a delta."""
        return responses[-1].model_copy(update={"delta": None})

    # -- chat --------------------------------------------------------------------------

    @llm_chat_callback()
    def chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        return self._whole(list(iterate_sync(self._responses(self._request(messages, kwargs)))))

    @llm_chat_callback()
    def stream_chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponseGen:
        return iterate_sync(self._responses(self._request(messages, kwargs)))

    @llm_chat_callback()
    async def achat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        return self._whole([r async for r in self._responses(self._request(messages, kwargs))])

    @llm_chat_callback()
    async def astream_chat(
        self, messages: Sequence[ChatMessage], **kwargs: Any
    ) -> ChatResponseAsyncGen:
        return self._responses(self._request(messages, kwargs))

    # -- completion, through chat ----------------------------------------------------

    @llm_completion_callback()
    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        return chat_to_completion_decorator(self.chat)(prompt, **kwargs)

    @llm_completion_callback()
    def stream_complete(
        self, prompt: str, formatted: bool = False, **kwargs: Any
    ) -> CompletionResponseGen:
        return stream_chat_to_completion_decorator(self.stream_chat)(prompt, **kwargs)

    @llm_completion_callback()
    async def acomplete(
        self, prompt: str, formatted: bool = False, **kwargs: Any
    ) -> CompletionResponse:
        return await achat_to_completion_decorator(self.achat)(prompt, **kwargs)

    @llm_completion_callback()
    async def astream_complete(
        self, prompt: str, formatted: bool = False, **kwargs: Any
    ) -> CompletionResponseAsyncGen:
        return await astream_chat_to_completion_decorator(self.astream_chat)(prompt, **kwargs)

    # -- tools -------------------------------------------------------------------------

    def _prepare_chat_with_tools(
        self,
        tools: Sequence[BaseTool],
        user_msg: str | ChatMessage | None = None,
        chat_history: list[ChatMessage] | None = None,
        verbose: bool = False,
        allow_parallel_tool_calls: bool = False,
        tool_required: bool = False,
        tool_choice: str | dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> dict[str, Any]:
        """The chat arguments for a call with ``tools``, given to every member's template.

        ``tool_required`` forces a call (``tool_choice="required"``); ``tool_choice`` may
        instead be ``"auto"``, ``"none"``, ``"required"`` or a tool's name. A forced call is
        written under a constraint that keeps every accepted segment a valid call.
        """
        if isinstance(user_msg, str):
            user_msg = ChatMessage(role=MessageRole.USER, content=user_msg)
        messages = [*(chat_history or []), *([user_msg] if user_msg else [])]
        if tool_choice is None:
            tool_choice = "required" if tool_required else "auto"
        return {
            "messages": messages,
            "tools": [to_tool(t) for t in tools] or None,
            "tool_choice": tool_choice if tools else None,
            **kwargs,
        }

    def _validate_chat_with_tools_response(
        self,
        response: ChatResponse,
        tools: Sequence[BaseTool],
        allow_parallel_tool_calls: bool = False,
        **kwargs: Any,
    ) -> ChatResponse:
        """Without parallel calls, only the answer's first call is kept."""
        if not allow_parallel_tool_calls:
            blocks = response.message.blocks
            first = next((b for b in blocks if isinstance(b, ToolCallBlock)), None)
            response.message.blocks = [
                b for b in blocks if not isinstance(b, ToolCallBlock) or b is first
            ]
        return response

    def get_tool_calls_from_response(
        self, response: ChatResponse, error_on_no_tool_call: bool = True, **kwargs: Any
    ) -> list[ToolSelection]:
        """The response's tool calls; with none, a ValueError unless
        ``error_on_no_tool_call`` is False."""
        selections = tool_selections(response.message)
        if not selections and error_on_no_tool_call:
            invalid = response.message.additional_kwargs.get("invalid_tool_calls")
            raise ValueError(
                "expected at least one tool call, but the answer has none"
                + (f"; it has invalid calls: {invalid}" if invalid else "")
            )
        return selections
