"""The request's translation: OpenAI messages and options make the same specem request as
the LangChain front end (so the same answer and usage), and bad ones are clear 400s before
any member runs."""

from __future__ import annotations

import json

import openai
import pytest
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage
from openai_server_harness import WEATHER, serve
from specem_chain import Feedback, Member, RequestSettings, SpecEMChatModel
from specem_chain.chat_model import turns_from_langchain
from specem_chain.request import merge_turns

from specem_openai_server.from_openai import turns_from_openai
from specem_openai_server.schema import ChatCompletionRequest

CALL = {
    "id": "call_1",
    "type": "function",
    "function": {"name": "get_weather", "arguments": json.dumps({"location": "Lisbon"})},
}
HISTORY = [
    {"role": "developer", "content": "Be brief."},
    {
        "role": "user",
        "content": [{"type": "text", "text": "Weather in "}, {"type": "text", "text": "Lisbon?"}],
    },
    {"role": "assistant", "content": None, "tool_calls": [CALL]},
    {"role": "tool", "tool_call_id": "call_1", "content": "Sunny, 24 degrees."},
    {"role": "user", "content": "And tomorrow?"},
]
LANGCHAIN_HISTORY = [
    SystemMessage("Be brief."),
    HumanMessage("Weather in Lisbon?"),
    AIMessage(
        "", tool_calls=[{"name": "get_weather", "args": {"location": "Lisbon"}, "id": "call_1"}]
    ),
    ToolMessage("Sunny, 24 degrees.", tool_call_id="call_1"),
    HumanMessage("And tomorrow?"),
]
UNREACHABLE = Member.tgi("http://127.0.0.1:9", retries=0)
"""A member that fails if it is ever asked: nothing listens on port 9."""


def test_openai_messages_become_the_turns_the_langchain_front_end_makes():
    request = ChatCompletionRequest(messages=HISTORY)
    assert merge_turns(turns_from_openai(request.messages)) == turns_from_langchain(
        LANGCHAIN_HISTORY
    )


@pytest.fixture(scope="module")
def tools_pair(tiny_models) -> list[str]:
    """A tiny member whose template writes tool turns, and one whose template does not."""
    return [str(tiny_models["tools"]), str(tiny_models["llama"])]


def test_answer_and_usage_are_the_langchain_models_for_the_same_request(tools_pair):
    """A conversation with an earlier call and its result (the tools' descriptions do not
    fit the tiny members' 256-token context; calls are answered on the default ensemble in
    test_openai_server.py)."""
    expected = SpecEMChatModel(members=tools_pair, max_tokens=12, seed=0).invoke(LANGCHAIN_HISTORY)
    with serve(tools_pair, RequestSettings(max_tokens=12)) as base:
        client = openai.OpenAI(base_url=f"{base}/v1", api_key="unused", max_retries=0)
        completion = client.chat.completions.create(model="specem", messages=HISTORY, seed=0)
    assert completion.choices[0].message.content == expected.content
    assert completion.usage.prompt_tokens == expected.usage_metadata["input_tokens"]
    assert completion.usage.completion_tokens == expected.usage_metadata["output_tokens"]
    specem = completion.model_extra["specem"]
    assert specem["wins"] == expected.response_metadata["specem"]["wins"]
    assert specem["segments"] == expected.response_metadata["specem"]["segments"]


@pytest.fixture(scope="module")
def unreachable() -> openai.OpenAI:
    with serve([UNREACHABLE]) as base:
        yield openai.OpenAI(base_url=f"{base}/v1", api_key="unused", max_retries=0)


@pytest.mark.parametrize(
    ("request_args", "message"),
    [
        (
            {"messages": [*HISTORY[:3], {"role": "tool", "content": "Sunny."}]},
            "messages.3: a tool message needs the tool_call_id",
        ),
        ({"messages": HISTORY, "tool_choice": "required"}, "no tools are bound"),
        ({"messages": HISTORY, "tools": [WEATHER], "tool_choice": "lookup"}, "'lookup' is not"),
        ({"messages": HISTORY, "tools": [{"name": "f"}]}, "not an OpenAI function tool"),
        ({"messages": HISTORY, "response_format": {"type": "xml"}}, "is not {'type'"),
        ({"messages": HISTORY, "stop": [""]}, "must not be empty"),
        (
            {
                "messages": HISTORY,
                "tools": [WEATHER],
                "tool_choice": "required",
                "response_format": {"type": "json_object"},
            },
            "give one of them",
        ),
    ],
)
def test_bad_requests_are_400s_before_any_member_runs(unreachable, request_args, message):
    """The only member is unreachable: asking it would be a 503."""
    with pytest.raises(openai.BadRequestError) as caught:
        unreachable.chat.completions.create(model="specem", **request_args)
    assert caught.value.body["type"] == "invalid_request_error"
    assert message in caught.value.body["message"]


def test_a_text_response_format_is_the_free_answer(tiny_server):
    client = openai.OpenAI(base_url=f"{tiny_server}/v1", api_key="unused", max_retries=0)
    ask = {"model": "specem", "messages": HISTORY[-1:], "max_tokens": 8, "seed": 1}
    free = client.chat.completions.create(**ask)
    text = client.chat.completions.create(**ask, response_format={"type": "text"})
    assert text.choices[0].message.content == free.choices[0].message.content


def test_a_request_counts_toward_the_task_its_metadata_names(tiny_models, tmp_path):
    """The server's task by default; another task of its feedback store, started uniform
    and kept apart, where the request's metadata names one; a bad name is a 400."""
    members = [str(tiny_models["llama"]), str(tiny_models["qwen2"])]
    store = tmp_path / "tasks.db"
    feedback = Feedback.open(store, "chat")
    with serve(members, RequestSettings(max_tokens=16), feedback=feedback) as base:
        client = openai.OpenAI(base_url=f"{base}/v1", api_key="unused", max_retries=0)
        ask = {"model": "specem", "messages": [{"role": "user", "content": "Hi"}], "seed": 0}
        chat = client.chat.completions.create(**ask).model_extra["specem"]
        maths = [
            client.chat.completions.create(**ask, metadata={"task": "maths"}).model_extra["specem"]
            for _ in range(2)
        ]
        with pytest.raises(openai.BadRequestError) as caught:
            client.chat.completions.create(**ask, metadata={"task": " "})
    assert (feedback.answers, Feedback.open(store, "maths").answers) == (1, 2)
    uniform = {"llama": 0.5, "qwen2": 0.5}
    assert chat["start_weights"] == maths[0]["start_weights"] == uniform
    expected = Feedback()
    expected.record(maths[0]["weights"], maths[0]["dropped"])
    assert maths[1]["start_weights"] == pytest.approx(expected.weights(list(uniform)))
    assert maths[1]["start_weights"] != uniform
    assert caught.value.body["param"] == "metadata.task"
    assert "a task is named by 1 to 200 characters" in caught.value.body["message"]
