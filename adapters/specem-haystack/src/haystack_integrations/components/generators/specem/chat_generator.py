"""SpecEMChatGenerator: the SpecEM ensemble as a Haystack chat generator."""

import inspect
from collections.abc import Mapping, Sequence
from typing import Any

from haystack import component, default_from_dict, default_to_dict
from haystack.dataclasses import (
    ChatMessage,
    ComponentInfo,
    StreamingCallbackT,
    StreamingChunk,
    select_streaming_callback,
)
from haystack.tools import (
    ToolsType,
    deserialize_tools_or_toolset_inplace,
    serialize_tools_or_toolset,
)
from haystack.utils import Secret, deserialize_callable, serialize_callable
from specem_chain import Feedback, Request, RequestSettings, open_request
from specem_chain.answer_formats import AnswerOptions
from specem_chain.members import ensemble_name
from specem_chain.request import merge_call
from specem_chain.request import warm_up as load_members
from specem_chain.sync import iterate_sync, run_sync

from .conversation import openai_tools, turns_from_haystack
from .members import (
    MemberSpec,
    check_api_keys,
    member_data,
    to_members,
    with_api_keys,
)
from .streaming import Reply


@component
class SpecEMChatGenerator:
    """Several small LLMs write one answer together, one segment at a time (SpecEM).

    ```python
    from haystack.dataclasses import ChatMessage
    from haystack_integrations.components.generators.specem import SpecEMChatGenerator

    generator = SpecEMChatGenerator(generation_kwargs={"max_tokens": 64, "seed": 0})
    generator.run([ChatMessage.from_user("Why is the sky blue?")])["replies"][0].text
    ```

    Each request has its own sessions and weights; the members' models load on first use
    and are shared by every request in the process. Streaming gives one chunk per round
    (segment), and the reply's ``meta["specem"]`` holds the answer's provenance: the
    segments with their members, candidates and scores, and the wins and weights.
    """

    def __init__(
        self,
        members: MemberSpec | list[MemberSpec] | None = None,
        generation_kwargs: dict[str, Any] | None = None,
        streaming_callback: StreamingCallbackT | None = None,
        tools: ToolsType | None = None,
        api_keys: dict[str, Secret] | None = None,
        feedback: Feedback | None = None,
    ) -> None:
        """
        :param members: The ensemble: member specs (a built-in name such as ``"smollm2"``,
            a model folder, a ``.gguf`` file, ``tgi+http://host:port`` or
            ``openai+http://host:port/v1#model``), ``specem_chain.Member`` objects, or their
            dumps. None: the embedded default ensemble.
        :param generation_kwargs: The request's settings, the fields of
            ``specem_chain.RequestSettings`` (``max_tokens``, ``window``, ``policy``,
            ``seed``, ``temperature``, ``answer_timeout``, ...), and the answer's options,
            as every specem front end takes them: ``stop``, ``tool_choice`` (``"auto"``,
            ``"none"``, ``"any"`` / ``"required"`` or a tool's name), ``response_format``
            (OpenAI's ``json_object`` or ``json_schema``), ``parallel_tool_calls`` and
            ``strict``. ``run`` may override them per call. A bad key or value raises here.
        :param streaming_callback: Called with each ``StreamingChunk``: one per round.
        :param tools: Haystack tools or toolsets the members may call.
        :param api_keys: Remote members' API keys as Haystack secrets, by member name
            (``Secret.from_env_var(...)``), so ``to_dict`` writes no key in plain text.
        :param feedback: Task-level feedback: a ``specem_chain.Feedback`` that carries the
            members' weights from one answer to the next (each run starts from it and
            updates it when it ends). ``to_dict`` writes the weights it holds then.
        """
        self.members = to_members(members)
        self.generation_kwargs = dict(generation_kwargs or {})
        self.streaming_callback = streaming_callback
        self.tools = tools
        self.api_keys = dict(api_keys or {})
        self.feedback = feedback
        check_api_keys(self.api_keys, self.members)
        self._options(self.generation_kwargs, tools)

    @property
    def model_name(self) -> str:
        """A readable name for the ensemble, naming its members."""
        return ensemble_name(self.members)

    def _get_telemetry_data(self) -> dict[str, Any]:
        return {"model": self.model_name}

    def warm_up(self) -> None:
        """Load every member's model now (a built-in one is fetched and converted on first
        use), so the first run does not wait for it. Pipelines and Agents call it before
        running; calling it again costs little."""
        run_sync(load_members(with_api_keys(self.members, self.api_keys)))

    async def warm_up_async(self) -> None:
        """:meth:`warm_up` for an async pipeline, the loading off its event loop."""
        await load_members(with_api_keys(self.members, self.api_keys))

    def to_dict(self) -> dict[str, Any]:
        """The component as plain data; a member's plain-text API key raises a ValueError
        (give it in ``api_keys``), and so does a token ``Secret``."""
        callback = self.streaming_callback
        return default_to_dict(
            self,
            members=[member_data(m) for m in self.members],
            generation_kwargs=self.generation_kwargs,
            streaming_callback=serialize_callable(callback) if callback else None,
            tools=serialize_tools_or_toolset(self.tools),
            api_keys={label: key.to_dict() for label, key in self.api_keys.items()} or None,
            feedback=self.feedback.to_json() if self.feedback is not None else None,
        )

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "SpecEMChatGenerator":
        """The component from :meth:`to_dict`'s data."""
        init = data["init_parameters"]
        deserialize_tools_or_toolset_inplace(init, key="tools")
        if init.get("streaming_callback"):
            init["streaming_callback"] = deserialize_callable(init["streaming_callback"])
        if init.get("api_keys"):
            init["api_keys"] = {label: Secret.from_dict(k) for label, k in init["api_keys"].items()}
        if init.get("feedback") is not None:
            init["feedback"] = Feedback.from_json(init["feedback"])
        return default_from_dict(cls, data)

    @staticmethod
    def _options(
        generation_kwargs: Mapping[str, Any], tools: ToolsType | None
    ) -> tuple[RequestSettings, AnswerOptions]:
        """The call's settings and answer options: an unknown key raises an error that
        lists the known ones (a ValueError), a bad value one that names it."""
        arguments = dict(generation_kwargs)
        if tools:
            arguments["tools"] = openai_tools(tools)
        return merge_call(RequestSettings(), arguments, what="generation_kwargs")

    def _request(
        self,
        messages: Sequence[ChatMessage],
        generation_kwargs: Mapping[str, Any] | None,
        tools: ToolsType | None,
    ) -> Request:
        """The request for one call; bad input raises here, before any member runs."""
        settings, options = self._options(
            {**self.generation_kwargs, **(generation_kwargs or {})},
            tools if tools is not None else self.tools,
        )
        return open_request(
            with_api_keys(self.members, self.api_keys),
            turns_from_haystack(messages),
            settings,
            options,
            feedback=self.feedback,
        )

    @component.output_types(replies=list[ChatMessage])
    def run(
        self,
        messages: list[ChatMessage],
        generation_kwargs: dict[str, Any] | None = None,
        tools: ToolsType | None = None,
        *,
        streaming_callback: StreamingCallbackT | None = None,
    ) -> dict[str, list[ChatMessage]]:
        """Answer the conversation.

        :param messages: The conversation: system, user, assistant (text and tool calls)
            and tool (one result each) messages.
        :param generation_kwargs: Overrides of the init's ``generation_kwargs``, per key.
        :param tools: Tools for this call, instead of the init's.
        :param streaming_callback: Called with each chunk, instead of the init's callback.
        :returns: ``{"replies": [ChatMessage]}``: one assistant message.
        """
        callback = select_streaming_callback(
            self.streaming_callback, streaming_callback, requires_async=False
        )
        request = self._request(messages, generation_kwargs, tools)
        reply = Reply(self.model_name, ComponentInfo.from_component(self))
        for update in iterate_sync(request.updates()):
            for chunk in reply.chunks(update, request.answer):
                if callback:
                    callback(chunk)
        return {"replies": [reply.reply(request.answer)]}

    @component.output_types(replies=list[ChatMessage])
    async def run_async(
        self,
        messages: list[ChatMessage],
        generation_kwargs: dict[str, Any] | None = None,
        tools: ToolsType | None = None,
        *,
        streaming_callback: StreamingCallbackT | None = None,
    ) -> dict[str, list[ChatMessage]]:
        """:meth:`run`, natively async; the callback may be sync or async."""
        callback = select_streaming_callback(
            self.streaming_callback, streaming_callback, requires_async=True
        )
        request = self._request(messages, generation_kwargs, tools)
        reply = Reply(self.model_name, ComponentInfo.from_component(self))
        async with request as run:
            async for update in run:
                for chunk in reply.chunks(update, run.answer):
                    if callback:
                        await _call(callback, chunk)
        return {"replies": [reply.reply(request.answer)]}


async def _call(callback: StreamingCallbackT, chunk: StreamingChunk) -> None:
    result = callback(chunk)
    if inspect.isawaitable(result):
        await result
