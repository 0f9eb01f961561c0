"""Tools: Haystack tools and tool turns in the request's format, and the default ensemble
writing forced calls that come back as Haystack ToolCalls."""

from __future__ import annotations

import json

import jsonschema
import pytest
from haystack.components.generators.utils import _convert_streaming_chunks_to_chat_message
from haystack.dataclasses import ChatMessage, StreamingChunk, TextContent, ToolCall
from haystack.tools import Toolset, tool
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage, convert_to_messages
from specem_chain import Member
from specem_chain.backends.transformers import TransformersBackend
from specem_chain.chat_model import turns_from_langchain

from haystack_integrations.components.generators.specem import SpecEMChatGenerator
from haystack_integrations.components.generators.specem.conversation import (
    openai_tools,
    turns_from_haystack,
)


@tool
def get_weather(location: str) -> str:
    """Get the weather at a location."""
    return "sunny"


@tool
def magic_function(value: int) -> int:
    """Apply a magic function to an integer."""
    return value + 2


CALL = ToolCall(tool_name="get_weather", arguments={"location": "Paris"}, id="c1")
HISTORY = [
    ChatMessage.from_system("Be brief."),
    ChatMessage.from_user("Weather in Paris?"),
    ChatMessage.from_assistant(tool_calls=[CALL]),
    ChatMessage.from_tool("sunny", origin=CALL),
]


def test_tool_turns_map_as_the_langchain_front_end_maps_them():
    same_history = [
        ("system", "Be brief."),
        HumanMessage("Weather in Paris?"),
        AIMessage(
            "", tool_calls=[{"name": "get_weather", "args": {"location": "Paris"}, "id": "c1"}]
        ),
        ToolMessage("sunny", tool_call_id="c1", name="get_weather"),
    ]
    assert turns_from_haystack(HISTORY) == turns_from_langchain(convert_to_messages(same_history))
    assert turns_from_haystack(HISTORY)[3] == {
        "role": "tool",
        "content": "sunny",
        "tool_call_id": "c1",
        "name": "get_weather",
    }


def test_text_turns_of_one_role_merge_and_text_results_join():
    """The request merges the turns (specem_chain.request.merge_turns); none runs here."""
    generator = SpecEMChatGenerator(members=[Member.tgi("http://127.0.0.1:9")])
    turns = generator._request(
        [
            ChatMessage.from_user("One."),
            ChatMessage.from_user("Two."),
            ChatMessage.from_assistant("Calling.", tool_calls=[CALL]),
            ChatMessage.from_tool([TextContent("sun"), TextContent("ny")], origin=CALL),
            ChatMessage.from_tool("dry", origin=CALL),
        ],
        None,
        None,
    ).messages
    assert [t["role"] for t in turns] == ["user", "assistant", "tool", "tool"]
    assert turns[0]["content"] == "One.\n\nTwo."
    assert turns[1]["content"] == "Calling." and turns[1]["tool_calls"][0]["id"] == "c1"
    assert [t["content"] for t in turns[2:]] == ["sunny", "dry"]


def test_haystack_tools_become_openai_function_tools():
    converted = openai_tools([get_weather, Toolset([magic_function])])
    assert [t["type"] for t in converted] == ["function", "function"]
    assert converted[0]["function"] == {
        "name": "get_weather",
        "description": "Get the weather at a location.",
        "parameters": get_weather.parameters,
    }
    assert converted[1]["function"]["parameters"]["properties"]["value"]["type"] == "integer"
    with pytest.raises(ValueError, match="Duplicate tool names"):
        openai_tools([get_weather, Toolset([get_weather])])


def test_a_template_with_tools_renders_the_call_and_its_result(tiny_models):
    backend = TransformersBackend.load(Member(source=str(tiny_models["tools"])))
    prompt = backend.template.render(turns_from_haystack(HISTORY), openai_tools([get_weather]))
    assert json.dumps(openai_tools([get_weather])[0]) in prompt
    assert '<tool_call>{"name": "get_weather", "arguments": {"location": "Paris"}}' in prompt
    assert "<tool_response>sunny</tool_response>" in prompt


def test_a_conversation_with_tool_turns_is_answered(tiny_models):
    generator = SpecEMChatGenerator(
        members=[str(tiny_models["tools"])],
        generation_kwargs={"max_tokens": 6, "seed": 0, "tool_choice": "none"},
        tools=[get_weather],
    )
    [reply] = generator.run(HISTORY)["replies"]
    assert reply.meta["usage"]["prompt_tokens"] > 0 and reply.meta["specem"]["segments"]
    assert not reply.tool_calls


def test_a_tool_choice_that_names_no_tool_is_refused_at_init_and_per_call():
    with pytest.raises(ValueError, match=r"bound tools are \['get_weather'\]"):
        SpecEMChatGenerator(
            members=["/a/model"], tools=[get_weather], generation_kwargs={"tool_choice": "lookup"}
        )
    generator = SpecEMChatGenerator(members=[Member.tgi("http://127.0.0.1:9")])
    with pytest.raises(ValueError, match=r"bound tools are \['magic_function'\]"):
        generator.run(
            HISTORY[:2], tools=[magic_function], generation_kwargs={"tool_choice": "get_weather"}
        )


# -- the default ensemble ------------------------------------------------------------------


@pytest.mark.models
def test_a_forced_call_streams_as_a_tool_call_delta_and_comes_back_as_a_tool_call():
    """tool_choice in generation_kwargs forces the call; the engine's constraint keeps it
    a valid call of the named tool."""
    generator = SpecEMChatGenerator(
        tools=[get_weather, magic_function],
        generation_kwargs={"max_tokens": 32, "seed": 0, "tool_choice": "magic_function"},
    )
    chunks: list[StreamingChunk] = []
    [reply] = generator.run(
        [ChatMessage.from_user("Apply the magic function to 7.")], streaming_callback=chunks.append
    )["replies"]
    [call] = reply.tool_calls
    assert call.tool_name == "magic_function" and call.id.startswith("call_")
    jsonschema.validate(call.arguments, magic_function.parameters)
    assert magic_function.invoke(**call.arguments) == call.arguments["value"] + 2
    assert reply.meta["finish_reason"] == "tool_calls"
    [delta_chunk] = [c for c in chunks if c.tool_calls]
    assert delta_chunk.start and delta_chunk.index == 0 and delta_chunk.content == ""
    joined = _convert_streaming_chunks_to_chat_message(chunks)  # as Haystack joins chunks
    assert joined.tool_calls == reply.tool_calls
    assert joined.meta["finish_reason"] == "tool_calls"


@pytest.mark.models
def test_a_call_cut_by_the_length_limit_is_reported_not_returned():
    generator = SpecEMChatGenerator(
        tools=[magic_function],
        generation_kwargs={"max_tokens": 2, "seed": 0, "tool_choice": "required"},
    )
    chunks: list[StreamingChunk] = []
    [reply] = generator.run(
        [ChatMessage.from_user("Apply the magic function to 7.")], streaming_callback=chunks.append
    )["replies"]
    assert reply.tool_calls == [] and not reply.text
    assert reply.meta["finish_reason"] == "length"  # so an Agent stops here
    [invalid] = reply.meta["specem"]["invalid_tool_calls"]
    assert invalid["error"] and '{"name": "magic_function", "arguments": {' in invalid["text"]
    assert chunks and not any(c.tool_calls for c in chunks)
    assert len(chunks) == len(reply.meta["specem"]["segments"])
