"""SpecEM as a LlamaIndex LLM on tiny random models: chat, streaming, async, completion,
provenance and usage, checked settings, and LlamaIndex's messages and tools translated."""

from __future__ import annotations

import asyncio
import json

import pytest
from llama_index.core.base.llms.types import (
    ChatMessage,
    ChatResponse,
    ImageBlock,
    MessageRole,
    TextBlock,
    ToolCallBlock,
)
from llama_index.core.tools import FunctionTool
from llama_index.llms.specem import SpecEM
from llama_index.llms.specem.messages import turns_from_llama_index
from pydantic import ValidationError

from specem_chain import Member
from specem_chain.backends.transformers import TransformersBackend

QUESTION = [ChatMessage(role="user", content="How many clips did Natalia sell?")]


def get_weather(location: str) -> str:
    """Get the current weather at a location."""
    return f"Sunny in {location}."


WEATHER = FunctionTool.from_defaults(get_weather)


@pytest.fixture(scope="module")
def llm(tiny_models) -> SpecEM:
    return SpecEM(
        members=[str(tiny_models["llama"]), str(tiny_models["qwen2"])], max_tokens=16, seed=0
    )


@pytest.fixture(scope="module")
def answer(llm) -> ChatResponse:
    return llm.chat(QUESTION)


def test_metadata_describes_the_ensemble(llm):
    meta = llm.metadata
    assert meta.model_name == "specem[llama, qwen2]"
    assert meta.num_output == 16 and meta.context_window == 8192
    assert meta.is_chat_model and meta.is_function_calling_model
    assert SpecEM(members=["smollm2"], max_tokens=5, context_window=2048).metadata.num_output == 5


def test_the_context_window_is_the_smallest_built_in_members():
    assert SpecEM().metadata.context_window == 32768  # the default, Qwen2.5-Coder
    pair = SpecEM(members=["smollm2", "qwen2.5-coder"])
    assert pair.metadata.context_window == 8192  # SmolLM2's
    assert SpecEM(members=["qwen2.5-coder", "/models/mine"]).metadata.context_window == 8192
    assert SpecEM(members=["qwen2.5-coder"], context_window=4096).metadata.context_window == 4096


def test_it_serializes_as_llamaindex_components_do():
    llm = SpecEM(members=["smollm2", Member(source="/models/mine", name="mine")], seed=3)
    again = SpecEM.from_dict(llm.to_dict())
    assert again.members == llm.members and again.seed == 3
    assert llm.to_dict()["class_name"] == "SpecEM_llm"


def test_the_default_ensemble_is_the_embedded_one():
    assert SpecEM().metadata.model_name == "specem[qwen2.5-coder-1.5b-instruct]"


def test_chat_answers_with_provenance_and_usage(answer):
    raw = answer.raw
    segments = raw["specem"]["segments"]
    assert answer.message.role == MessageRole.ASSISTANT and answer.message.content
    assert answer.message.content == "".join(s["text"] for s in segments)
    assert raw["model"] == "specem[llama, qwen2]"
    assert raw["finish_reason"] in ("stop", "length")
    assert sum(raw["specem"]["wins"].values()) == len(segments)
    assert set(raw["specem"]["weights"]) == {"llama", "qwen2"}
    assert all(s["member"] in ("llama", "qwen2") and s["candidates"] for s in segments)
    usage = answer.additional_kwargs
    assert usage == raw["usage"] and usage["prompt_tokens"] > 0
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    assert (
        sum(m["output_tokens"] for m in raw["specem"]["usage"].values())
        == (usage["completion_tokens"])
    )
    assert answer.delta is None


def test_stream_chat_yields_one_response_per_segment(llm, answer):
    chunks = list(llm.stream_chat(QUESTION))
    assert len(chunks) == len(answer.raw["specem"]["segments"])
    assert "".join(c.delta for c in chunks) == chunks[-1].message.content
    assert chunks[-1].message.content == answer.message.content  # the same seed
    assert [c.raw["specem"]["segment"]["text"] for c in chunks] == [c.delta for c in chunks]
    assert all(c.raw["finish_reason"] is None for c in chunks[:-1])
    assert chunks[-1].raw["specem"]["segments"] == answer.raw["specem"]["segments"]


async def test_async_chat_and_stream_match_the_sync_answer(llm, answer):
    whole = await llm.achat(QUESTION)
    assert whole.message.content == answer.message.content
    deltas = [c.delta async for c in await llm.astream_chat(QUESTION)]
    assert "".join(deltas) == answer.message.content
    assert len(deltas) == len(answer.raw["specem"]["segments"])


async def test_sync_calls_work_inside_a_running_loop(llm, answer):
    assert asyncio.get_running_loop()
    assert llm.chat(QUESTION).message.content == answer.message.content


async def test_completion_goes_through_chat(llm, answer):
    prompt = QUESTION[0].content
    assert llm.complete(prompt).text == answer.message.content
    assert "".join(c.delta for c in llm.stream_complete(prompt)) == answer.message.content
    assert (await llm.acomplete(prompt)).text == answer.message.content
    streamed = [c.delta async for c in await llm.astream_complete(prompt)]
    assert "".join(streamed) == answer.message.content


def test_call_settings_override_the_constructors(llm):
    short = llm.chat(QUESTION, max_tokens=2, window=2)
    assert short.raw["specem"]["answer_tokens"] <= 2 and short.raw["finish_reason"] == "length"


def test_a_call_takes_every_answer_option_specem_front_ends_take(llm):
    weather = {"type": "function", "function": {"name": "weather", "parameters": {}}}
    request = llm._request(QUESTION, {"tools": [weather], "parallel_tool_calls": False})
    assert request.format.stop == ("</tool_call>",)  # one call at most
    assert llm._request(QUESTION, {"strict": True, "stop": ["\n"]}).config.stop == ("\n",)


def test_bad_settings_raise_before_any_member_runs():
    missing = [Member(source="/nonexistent/model-a"), Member(source="/nonexistent/model-b")]
    llm = SpecEM(members=missing)  # opening either member would fail
    for bad in ({"window": 0}, {"temperature": -1.0}, {"policy": "best"}, {"max_tokens": 0}):
        with pytest.raises(ValidationError, match=next(iter(bad))):
            llm.chat(QUESTION, **bad)
        with pytest.raises(ValidationError):
            llm.stream_chat(QUESTION, **bad)  # at the call, not at the first chunk
        with pytest.raises(ValidationError):
            SpecEM(members=missing, **bad)
    with pytest.raises(TypeError, match="unsupported call arguments \\['top_p'\\]"):
        llm.chat(QUESTION, top_p=0.9)
    with pytest.raises(ValueError, match="no tools are bound"):
        llm.chat(QUESTION, tool_choice="required")
    with pytest.raises(ValueError, match="bound tools are \\['get_weather'\\]"):
        llm.chat_with_tools([WEATHER], user_msg="Weather?", tool_choice="lookup")
    with pytest.raises(ValueError, match="the role 'function'"):
        llm.chat([ChatMessage(role="function", content="x")])
    with pytest.raises(ValueError, match="'image' block"):
        llm.chat([ChatMessage(role="user", blocks=[ImageBlock(url="http://x/y.png")])])
    with pytest.raises(ValueError, match="at least one member"):
        SpecEM(members=[])
    with pytest.raises(ValueError, match="must be unique"):
        SpecEM(members=["/a/model", "/b/model"])


# -- tools --------------------------------------------------------------------------------

HISTORY = [
    ChatMessage(role="system", content="Be brief."),
    ChatMessage(role="user", content="Weather in Paris?"),
    ChatMessage(
        role="assistant",
        blocks=[
            TextBlock(text=""),
            ToolCallBlock(
                tool_call_id="c1", tool_name="get_weather", tool_kwargs={"location": "Paris"}
            ),
        ],
    ),
    # as FunctionAgent writes a tool's result
    ChatMessage(role="tool", content="Sunny.", additional_kwargs={"tool_call_id": "c1"}),
]


def test_tool_calls_and_results_become_template_turns():
    system, user, call, result = turns_from_llama_index(HISTORY)
    assert system == {"role": "system", "content": "Be brief."}
    assert user == {"role": "user", "content": "Weather in Paris?"}
    assert call == {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {
                "id": "c1",
                "type": "function",
                "function": {"name": "get_weather", "arguments": {"location": "Paris"}},
            }
        ],
    }
    assert result == {"role": "tool", "content": "Sunny.", "tool_call_id": "c1"}


def test_openai_style_tool_calls_in_additional_kwargs_are_read_too():
    openai_call = {
        "id": "c2",
        "type": "function",
        "function": {"name": "get_weather", "arguments": json.dumps({"location": "Oslo"})},
    }
    message = ChatMessage(
        role="assistant", content="", additional_kwargs={"tool_calls": [openai_call]}
    )
    (turn,) = turns_from_llama_index([message])
    assert turn["tool_calls"][0]["function"]["arguments"] == {"location": "Oslo"}


def test_consecutive_text_turns_of_one_role_are_merged(llm):
    """The request merges them (specem_chain.request.merge_turns); none runs here."""
    turns = llm._request(
        [
            ChatMessage(role="system", content="A."),
            ChatMessage(role="developer", content="B."),
            ChatMessage(role="user", content="Q?"),
        ],
        {},
    ).messages
    assert turns == [{"role": "system", "content": "A.\n\nB."}, {"role": "user", "content": "Q?"}]


def test_a_tool_template_renders_the_round_trip(tiny_models):
    template = TransformersBackend.load(Member(source=str(tiny_models["tools"]))).template
    tool = WEATHER.metadata.to_openai_tool(skip_length_check=True)
    rendered = template.render(turns_from_llama_index(HISTORY), [tool])
    assert f"<tools>{json.dumps(tool)}</tools>" in rendered
    assert '<tool_call>{"name": "get_weather", "arguments": {"location": "Paris"}}' in rendered
    assert "<tool_response>Sunny.</tool_response>" in rendered


def test_prepare_chat_with_tools_maps_tools_and_tool_choice(llm):
    prepared = llm._prepare_chat_with_tools([WEATHER], user_msg="Weather?", tool_required=True)
    assert prepared["tools"] == [WEATHER.metadata.to_openai_tool(skip_length_check=True)]
    assert prepared["tool_choice"] == "required"
    assert prepared["messages"][-1].content == "Weather?"
    auto = llm._prepare_chat_with_tools([WEATHER], chat_history=HISTORY[:2])
    assert auto["tool_choice"] == "auto" and auto["messages"] == HISTORY[:2]
    named = llm._prepare_chat_with_tools([WEATHER], user_msg="x", tool_choice="get_weather")
    assert named["tool_choice"] == "get_weather"
    assert llm._prepare_chat_with_tools([], user_msg="x", tool_required=True)["tools"] is None


def test_tool_calls_come_back_as_tool_selections(llm):
    calls = [
        ToolCallBlock(tool_call_id=f"c{i}", tool_name="get_weather", tool_kwargs={"location": c})
        for i, c in enumerate(("Paris", "Oslo"))
    ]
    response = ChatResponse(
        message=ChatMessage(role="assistant", blocks=[TextBlock(text=""), *calls])
    )
    selections = llm.get_tool_calls_from_response(response)
    assert [(s.tool_id, s.tool_name, s.tool_kwargs) for s in selections] == [
        ("c0", "get_weather", {"location": "Paris"}),
        ("c1", "get_weather", {"location": "Oslo"}),
    ]
    single = llm._validate_chat_with_tools_response(response.model_copy(deep=True), [WEATHER])
    assert [s.tool_id for s in llm.get_tool_calls_from_response(single)] == ["c0"]
    none = ChatResponse(message=ChatMessage(role="assistant", content="Hello."))
    assert llm.get_tool_calls_from_response(none, error_on_no_tool_call=False) == []
    with pytest.raises(ValueError, match="at least one tool call"):
        llm.get_tool_calls_from_response(none)


def ping() -> str:
    """Ping."""
    return "pong"


def test_chat_with_tools_runs_on_a_tool_template(tiny_models):
    """A random model writes no valid call (a forced one is in test_llamaindex_flows.py, on
    the built-in members); this checks that the tools reach the template and back."""
    llm = SpecEM(members=[str(tiny_models["tools"])], max_tokens=12, seed=0)
    response = llm.chat_with_tools([FunctionTool.from_defaults(ping)], user_msg="Ping?")
    assert response.raw["finish_reason"] in ("stop", "length", "tool_calls")
    for selection in llm.get_tool_calls_from_response(response, error_on_no_tool_call=False):
        assert selection.tool_name == "ping"  # the answer's calls are read for bound tools only
