"""The official openai client (and LangChain's ChatOpenAI) against the running server."""

from __future__ import annotations

import asyncio
import itertools
import json
import socket

import httpx
import openai
import pytest
from langchain_core.messages import HumanMessage
from langchain_openai import ChatOpenAI
from openai_server_harness import WEATHER, serve
from specem_chain import Member, RequestSettings
from specem_chain.models import DEFAULT_MEMBERS

QUESTION = [{"role": "user", "content": "How many clips did Natalia sell?"}]


@pytest.fixture(scope="module")
def client(tiny_server: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{tiny_server}/v1", api_key="unused", max_retries=0)


def test_a_completion_has_text_usage_finish_reason_and_provenance(client):
    completion = client.chat.completions.create(
        model="specem", messages=QUESTION, max_tokens=12, seed=1, temperature=0.8
    )
    choice = completion.choices[0]
    assert completion.model == "specem[llama, qwen2, plain]"
    assert choice.message.role == "assistant" and choice.message.content
    assert choice.finish_reason in ("stop", "length")
    assert completion.usage.prompt_tokens > 0 and completion.usage.completion_tokens > 0
    specem = completion.model_extra["specem"]
    assert "".join(s["text"] for s in specem["segments"]).startswith(choice.message.content)
    assert set(specem["weights"]) == {"llama", "qwen2", "plain"}


def test_the_same_seed_gives_the_same_answer(client):
    answers = {
        client.chat.completions.create(model="specem", messages=QUESTION, max_tokens=12, seed=5)
        .choices[0]
        .message.content
        for _ in range(2)
    }
    assert len(answers) == 1


def test_stop_sequences_end_the_answer_before_them(client):
    free = client.chat.completions.create(model="specem", messages=QUESTION, seed=2)
    text = free.choices[0].message.content
    stop = text[len(text) // 2 :][:3]
    assert stop.strip(), text
    stopped = client.chat.completions.create(model="specem", messages=QUESTION, seed=2, stop=stop)
    assert stopped.choices[0].message.content == text[: text.index(stop)]
    assert stopped.choices[0].finish_reason == "stop"


def test_streaming_sends_segments_then_finish_then_usage(client):
    stream = client.chat.completions.create(
        model="specem",
        messages=QUESTION,
        max_tokens=16,
        seed=3,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    content = [c for c in chunks if c.choices and c.choices[0].delta.content]
    assert len(content) >= 2  # one chunk per segment
    assert chunks[0].choices[0].delta.role == "assistant"
    assert all(len(c.model_extra["specem"]["segments"]) == 1 for c in content)
    assert chunks[-2].choices[0].finish_reason in ("stop", "length")
    usage = chunks[-1]
    assert usage.choices == [] and usage.usage.prompt_tokens > 0
    assert usage.usage.total_tokens == usage.usage.prompt_tokens + usage.usage.completion_tokens
    streamed = "".join(c.choices[0].delta.content for c in content)
    plain = client.chat.completions.create(model="specem", messages=QUESTION, max_tokens=16, seed=3)
    assert streamed == plain.choices[0].message.content
    assert usage.usage.completion_tokens == plain.usage.completion_tokens


def test_without_include_usage_no_usage_chunk_is_sent(client):
    chunks = list(
        client.chat.completions.create(
            model="specem", messages=QUESTION, max_tokens=8, seed=3, stream=True
        )
    )
    assert all(c.usage is None for c in chunks) and chunks[-1].choices


@pytest.mark.parametrize(
    ("request_args", "param", "message"),
    [
        ({"messages": []}, "messages", "at least 1 item"),
        ({"messages": QUESTION, "max_tokens": 0}, "max_tokens", "greater than or equal to 1"),
        ({"messages": QUESTION, "temperature": -1}, "temperature", "greater than or equal"),
        (
            {"messages": QUESTION, "extra_body": {"repeat_penalty": 0.5}},
            "repeat_penalty",
            "greater than or equal to 1",
        ),
        (
            {"messages": QUESTION, "extra_body": {"loop_penalty": 3}},
            "loop_penalty",
            "less than or equal to 2",
        ),
        ({"messages": [{"role": "function", "content": "x"}]}, "messages.0.role", "'system'"),
        ({"messages": QUESTION, "n": 2}, "n", "1"),
    ],
)
def test_bad_requests_get_an_openai_shaped_400(client, request_args, param, message):
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(model="specem", **request_args)
    error = caught.value
    assert error.status_code == 400
    assert error.body["type"] == "invalid_request_error" and error.body["param"] == param
    assert message in error.body["message"]


def test_an_image_part_is_a_400_that_says_text_only(client):
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AA=="}}
    with pytest.raises(openai.BadRequestError, match="accepts text content only"):
        client.chat.completions.create(
            model="specem", messages=[{"role": "user", "content": [image]}]
        )


def test_a_bad_streaming_request_is_a_400_before_any_event(client):
    with pytest.raises(openai.BadRequestError, match="holds 256 tokens"):
        client.chat.completions.create(
            model="specem",
            messages=[{"role": "user", "content": "clips " * 400}],
            stream=True,
        )


def test_concurrent_requests_are_served_side_by_side(tiny_server):
    """Four streams at once: their segments interleave, and each gets its own answer."""

    async def ask(client: openai.AsyncOpenAI) -> tuple[str, float, float]:
        clock = asyncio.get_running_loop().time
        stream = await client.chat.completions.create(
            model="specem", messages=QUESTION, max_tokens=24, seed=0, stream=True
        )
        text, arrivals = "", []
        async for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                text += chunk.choices[0].delta.content
                arrivals.append(clock())
        return text, arrivals[0], arrivals[-1]

    async def ask_all() -> list[tuple[str, float, float]]:
        client = openai.AsyncOpenAI(base_url=f"{tiny_server}/v1", api_key="unused")
        return await asyncio.gather(*(ask(client) for _ in range(4)))

    answers = sorted(asyncio.run(ask_all()), key=lambda a: a[1])
    assert len({text for text, _, _ in answers}) == 1  # same seed, same answer: no crosstalk
    # one request's first segment arrived while another was still being answered
    assert any(later[1] < earlier[2] for earlier, later in itertools.pairwise(answers))


def test_models_and_health(client, tiny_server):
    models = client.models.list()
    assert [m.id for m in models.data] == ["specem[llama, qwen2, plain]"]
    health = httpx.get(f"{tiny_server}/health").json()
    assert health["status"] == "ok" and health["members"] == ["llama", "qwen2", "plain"]
    missing = httpx.get(f"{tiny_server}/v1/nothing")
    assert missing.status_code == 404 and missing.json()["error"]["type"] == "not_found_error"


def test_members_that_cannot_load_give_a_503(tmp_path):
    with serve([str(tmp_path / "missing-model")]) as base:
        client = openai.OpenAI(base_url=f"{base}/v1", api_key="unused", max_retries=0)
        with pytest.raises(openai.InternalServerError) as caught:
            client.chat.completions.create(model="specem", messages=QUESTION)
        assert caught.value.status_code == 503
        assert "does not exist" in caught.value.body["message"]


def test_a_remote_member_that_is_down_gives_a_503():
    with socket.socket() as probe:  # a port that nothing listens on
        probe.bind(("127.0.0.1", 0))
        closed = probe.getsockname()[1]
    with serve([Member.tgi(f"http://127.0.0.1:{closed}", retries=0)]) as base:
        client = openai.OpenAI(base_url=f"{base}/v1", api_key="unused", max_retries=0)
        with pytest.raises(openai.InternalServerError) as caught:
            client.chat.completions.create(model="specem", messages=QUESTION, stream=True)
    assert caught.value.status_code == 503
    assert caught.value.body["type"] == "service_unavailable"
    assert f"127.0.0.1:{closed}" in caught.value.body["message"]


def test_langchain_chat_openai_uses_the_ensemble(tiny_server):
    llm = ChatOpenAI(
        base_url=f"{tiny_server}/v1", api_key="unused", model="specem", max_tokens=12, seed=4
    )
    invoked = llm.invoke([HumanMessage("How many clips?")])
    streamed = "".join(c.text for c in llm.stream([HumanMessage("How many clips?")]))
    assert invoked.content and invoked.content == streamed


@pytest.mark.models
def test_the_default_ensemble_answers_through_the_server():
    # an answer that repeats the prompt's words: the default drafts without a repetition
    # penalty (Guides -> Tuning); one asked for under vLLM's name reaches the members
    with serve(DEFAULT_MEMBERS) as base:
        client = openai.OpenAI(base_url=f"{base}/v1", api_key="unused", max_retries=0)
        ask = {
            "model": "specem",
            "messages": [{"role": "user", "content": "What is 2 + 2? Answer with the number."}],
            "max_tokens": 8,
            "seed": 0,
            "temperature": 0,
        }
        completion = client.chat.completions.create(**ask)
        penalised = client.chat.completions.create(**ask, extra_body={"repetition_penalty": 2})
        assert "4" in completion.choices[0].message.content
        assert penalised.choices[0].message.content != completion.choices[0].message.content
        assert completion.model == "specem[qwen2.5-coder-1.5b-instruct]"


def test_tool_call_arguments_that_are_not_json_are_a_400(client):
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{oops"}}
    messages = [*QUESTION, {"role": "assistant", "content": None, "tool_calls": [call]}]
    with pytest.raises(openai.BadRequestError, match="arguments of 'c1' are not a JSON object"):
        client.chat.completions.create(model="specem", messages=messages)


@pytest.mark.models
def test_tools_through_the_server_call_then_answer_from_the_result():
    # SmolLM2 (135M): drafting under the answer's format, it writes valid calls
    smollm2 = [Member(source="smollm2", backend="llamacpp")]
    with serve(smollm2, RequestSettings(max_tokens=48)) as base:
        client = openai.OpenAI(base_url=f"{base}/v1", api_key="unused", max_retries=0)
        question = [{"role": "user", "content": "What is the weather like in Lisbon?"}]
        ask = {"model": "specem", "tools": [WEATHER], "seed": 0}
        called = client.chat.completions.create(messages=question, tool_choice="required", **ask)
        (call,) = called.choices[0].message.tool_calls
        assert called.choices[0].finish_reason == "tool_calls"
        assert call.function.name == "get_weather"
        assert isinstance(json.loads(call.function.arguments)["location"], str)

        chunks = list(
            client.chat.completions.create(
                messages=question, tool_choice="required", stream=True, **ask
            )
        )
        streamed = [c for chunk in chunks for c in chunk.choices[0].delta.tool_calls or []]
        assert [(c.index, c.function.arguments) for c in streamed] == [(0, call.function.arguments)]

        result = {"role": "tool", "tool_call_id": call.id, "content": "Sunny, 24 degrees."}
        history = [*question, called.choices[0].message.model_dump(exclude_none=True), result]
        answer = client.chat.completions.create(messages=history, tool_choice="none", **ask)
        assert answer.choices[0].message.content and not answer.choices[0].message.tool_calls
