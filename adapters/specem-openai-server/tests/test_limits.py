"""The server's limits, each checked before any member runs: a 400 (413 for the body) that
names the limit, the value sent and the option that changes it. Most requests go to a
server whose only member is unreachable, where asking it would be a 503."""

from __future__ import annotations

import json
import socket

import httpx
import openai
import pytest
from openai_server_harness import WEATHER, serve
from specem_chain import Member, RequestSettings

from specem_openai_server.limits import IGNORED, UNSUPPORTED, Guard, Limits, concurrency

UNREACHABLE = Member.tgi("http://127.0.0.1:9", retries=0)
HI = [{"role": "user", "content": "Hi"}]


@pytest.fixture(scope="module")
def guarded():
    limits = Limits(max_messages=3, max_tools=1, max_stop_length=8, max_body_bytes=4096)
    with serve([UNREACHABLE], RequestSettings(max_tokens=16), limits=limits) as base:
        yield base


def post(base: str, body: dict | bytes, **headers: str) -> httpx.Response:
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    headers = {"content-type": "application/json", **headers}
    return httpx.post(f"{base}/v1/chat/completions", content=content, headers=headers)


@pytest.mark.parametrize(
    ("fields", "param", "named"),
    [
        ({"max_tokens": 1_000_000_000}, "max_tokens", ["1000000000", "128", "--max-tokens-limit"]),
        ({"max_completion_tokens": 129}, "max_completion_tokens", ["129", "128"]),
        ({"stop": ["a", "b", "c", "d", "e"]}, "stop", ["5", "4", "--max-stop-sequences"]),
        ({"stop": "x" * 9}, "stop", ["9", "8", "--max-stop-length"]),
        ({"messages": HI * 4}, "messages", ["4", "3", "--max-messages"]),
        ({"tools": [WEATHER, WEATHER]}, "tools", ["2", "1", "--max-tools"]),
    ],
)
def test_a_request_past_a_limit_is_a_400_naming_it(guarded, fields, param, named):
    response = post(guarded, {"messages": HI, **fields})
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"] == param and error["type"] == "invalid_request_error"
    for part in named:
        assert part in error["message"]


@pytest.mark.parametrize(
    "fields",
    [
        {"logprobs": True},
        {"top_logprobs": 3},
        {"n": 2},
        {"modalities": ["text", "audio"]},
        {"audio": {"voice": "alloy", "format": "wav"}},
        {"prediction": {"type": "content", "content": "x"}},
        {"logit_bias": {"50256": -100}},
        {"functions": [WEATHER["function"]]},
        {"function_call": "auto"},
        {"web_search_options": {}},
    ],
)
def test_a_field_that_would_change_the_answer_is_refused_by_name(guarded, fields):
    (name,) = fields
    error = post(guarded, {"messages": HI, **fields}).json()["error"]
    assert error["param"] == name
    assert error["message"].startswith(f"{name}=") and "not supported" in error["message"]


def test_fields_that_ask_for_nothing_and_those_that_only_tag_or_tune_pass_the_guard(guarded):
    """They reach the member (unreachable: a 503), so the guard let them through."""
    harmless = {"logprobs": False, "n": 1, "modalities": ["text"], "logit_bias": {}}
    tags = {"user": "u1", "store": False, "top_p": 0.9, "presence_penalty": 0.5}
    tags |= {"frequency_penalty": 0.1, "service_tier": "auto", "seed": 1, "reasoning_effort": "low"}
    response = post(guarded, {"messages": HI, **harmless, **tags})
    assert response.status_code == 503, response.text


def test_every_openai_field_is_either_implemented_refused_or_ignored_in_one_list():
    assert not set(UNSUPPORTED) & set(IGNORED)
    assert {"logprobs", "n", "audio", "prediction"} <= set(UNSUPPORTED)
    assert {"user", "store", "top_p", "presence_penalty", "frequency_penalty"} <= set(IGNORED)


def test_a_body_past_the_limit_is_a_413_told_by_its_length_or_as_it_is_read(guarded):
    big = json.dumps({"messages": [{"role": "user", "content": "x" * 5000}]}).encode()
    declared = post(guarded, big)
    assert declared.status_code == 413
    error = declared.json()["error"]
    assert error["code"] == "request_too_large" and "4096 bytes" in error["message"]
    assert "--max-body-bytes" in error["message"]

    def chunks():  # no Content-Length: the body is counted as it comes
        for start in range(0, len(big), 1000):
            yield big[start : start + 1000]

    streamed = httpx.post(
        f"{guarded}/v1/chat/completions",
        content=chunks(),
        headers={"content-type": "application/json"},
    )
    assert streamed.status_code == 413 and "more than this server's limit" in streamed.text


def test_a_huge_declared_body_is_refused_before_it_is_sent(guarded):
    """Content-Length of 50 MB and no body at all: the 413 comes at once."""
    host, port = guarded.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: 52428800\r\n\r\n"
        )
        answer = sock.recv(4096).decode()
    assert answer.startswith("HTTP/1.1 413"), answer


def test_a_truncated_body_says_it_is_not_json_and_where(guarded):
    response = post(guarded, b'{"messages": [{"role": "user", "content": "Hi"}')
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["message"].startswith("the body is not valid JSON") and error["param"] is None
    assert "at character" in error["message"]


def test_a_prompt_far_past_every_context_is_refused_by_its_characters(tiny_models):
    """Tiny members hold 256 tokens: 300,000 characters are refused by their length."""
    limits = Limits(max_body_bytes=2**20)
    with serve([str(tiny_models["llama"])], RequestSettings(max_tokens=8), limits=limits) as base:
        error = post(base, {"messages": [{"role": "user", "content": "a " * 150_000}]}).json()
    assert error["error"]["code"] == "context_length_exceeded"
    assert "300000 characters" in error["error"]["message"]


def test_max_input_tokens_counts_the_prompt_in_each_members_own_tokens(tiny_models):
    limits = Limits(max_input_tokens=30)
    members = [str(tiny_models["llama"]), str(tiny_models["qwen2"])]
    with serve(members, RequestSettings(max_tokens=8), limits=limits) as base:
        client = openai.OpenAI(base_url=f"{base}/v1", api_key="unused", max_retries=0)
        assert client.chat.completions.create(model="specem", messages=HI).choices
        with pytest.raises(openai.BadRequestError) as caught:
            long = [{"role": "user", "content": "tell me about the clips " * 8}]
            client.chat.completions.create(model="specem", messages=long)
    error = caught.value.body
    assert error["code"] == "context_length_exceeded"
    assert "limit of 30 (--max-input-tokens)" in error["message"]


def test_the_defaults_are_sized_from_the_members_and_the_settings(tiny_models):
    from specem_chain.backends.batching import SEQUENCES  # the help says it without llama_cpp

    help_ = Limits.model_fields["max_concurrent_requests"].description
    assert f"smallest of {SEQUENCES} for a llama.cpp member with batching" in help_
    remote = [UNREACHABLE]
    local = [Member(source=str(tiny_models["llama"]))]
    batched = [Member(source="smollm2", batching=True)]
    assert concurrency(remote) == 16
    assert concurrency(local) == 2
    assert concurrency(batched) == 8 and concurrency([*batched, *local]) == 2
    guard = Guard.of(Limits(), remote, max_tokens=256)
    assert (guard.max_concurrent_requests, guard.max_queue, guard.max_tokens_limit) == (
        16,
        16,
        2048,
    )
    set_ = Guard.of(
        Limits(max_concurrent_requests=3, max_queue=0, max_tokens_limit=10), remote, 256
    )
    assert (set_.max_concurrent_requests, set_.max_queue, set_.max_tokens_limit) == (3, 0, 10)


def test_a_member_that_cannot_be_reached_is_left_out_of_the_count_as_of_the_answer(tiny_models):
    """The prompt is counted by every member that can count it; one whose server is down is
    left out of the answer (min_members=1), not made the request's failure."""
    members = [UNREACHABLE, str(tiny_models["llama"])]
    with serve(members, RequestSettings(max_tokens=8, min_members=1)) as base:
        response = post(base, {"messages": HI})
    assert response.status_code == 200, response.text
    assert list(response.json()["specem"]["dropped"]) == [UNREACHABLE.label]
