"""Every kind of response the server sends, checked against OpenAI's published schemas
(``openai_contract.py``): an answer; streamed answers with and without tool calls, with and
without usage; the model list; and every error, in a body or as a stream's last event."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest
from openai_contract import conforms, events, stream_conforms
from openai_server_harness import serve
from specem_chain import Member, RequestSettings
from specem_chain.errors import (
    AnswerFormatError,
    FeedbackError,
    MemberUnavailable,
    PromptTooLongError,
    RequestError,
)
from test_admission import metric, until

from specem_openai_server.drain import cut_error, refusal
from specem_openai_server.errors import api_error
from specem_openai_server.keys import ApiKeys
from specem_openai_server.limits import Limits

CHAT = "/v1/chat/completions"
QUESTION = [{"role": "user", "content": "How many clips did Natalia sell?"}]
HI = [{"role": "user", "content": "Hi"}]
NOW = {"type": "function", "function": {"name": "now", "description": "The time now."}}
"""A tool without parameters: a tiny member writes a whole call to it in a few tokens."""


def test_an_answer_conforms(tiny_server):
    answer = httpx.post(f"{tiny_server}{CHAT}", json={"messages": QUESTION, "seed": 1}, timeout=60)
    assert answer.status_code == 200, answer.text
    conforms(answer.json(), "CreateChatCompletionResponse")
    assert answer.json()["choices"][0]["message"]["content"]


@pytest.mark.parametrize("include_usage", [False, True], ids=["no-usage", "usage"])
def test_a_streamed_answer_conforms_chunk_by_chunk(tiny_server, include_usage):
    body = {"messages": QUESTION, "seed": 1, "stream": True}
    body["stream_options"] = {"include_usage": include_usage}
    streamed = httpx.post(f"{tiny_server}{CHAT}", json=body, timeout=60)
    chunks = stream_conforms(streamed.text)
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    usage = [chunk for chunk in chunks if chunk.get("usage")]
    assert usage == ([chunks[-1]] if include_usage else [])
    if include_usage:
        assert chunks[-1]["choices"] == []


def test_chunks_without_usage_leave_it_out(tiny_server):
    """Every chunk said ``"usage": null``: OpenAI's ``usage`` is a ``$ref`` to an object, and
    in OpenAPI 3.0 the ``nullable`` beside a ``$ref`` is ignored (the description's older
    revision has no ``nullable`` there at all), so a null usage breaks it; left out, it
    conforms however a client reads the description."""
    body = {"messages": QUESTION, "seed": 1, "stream": True}
    body["stream_options"] = {"include_usage": True}
    streamed = httpx.post(f"{tiny_server}{CHAT}", json=body, timeout=60)
    chunks = [json.loads(event) for event in events(streamed.text)[:-1]]
    assert [("usage" in chunk) for chunk in chunks] == [False] * (len(chunks) - 1) + [True]


def test_the_model_list_conforms(tiny_server):
    conforms(httpx.get(f"{tiny_server}/v1/models").json(), "ListModelsResponse")


@pytest.fixture(scope="module")
def caller(tiny_models):
    """The tiny member whose template writes tools, alone (the tools' description fits its
    context): forced to call, it writes a valid call as it drafts under the call's format."""
    with serve([str(tiny_models["tools"])], RequestSettings(max_tokens=32)) as base:
        yield base


CALL = {"messages": HI, "tools": [NOW], "tool_choice": "required", "seed": 0}


def test_an_answer_with_a_tool_call_conforms(caller):
    answer = httpx.post(f"{caller}{CHAT}", json=CALL, timeout=120).json()
    conforms(answer, "CreateChatCompletionResponse")
    choice = answer["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    assert [c["function"]["name"] for c in choice["message"]["tool_calls"]] == ["now"]


@pytest.mark.parametrize("include_usage", [False, True], ids=["no-usage", "usage"])
def test_a_streamed_tool_call_conforms_chunk_by_chunk(caller, include_usage):
    body = CALL | {"stream": True, "stream_options": {"include_usage": include_usage}}
    chunks = stream_conforms(httpx.post(f"{caller}{CHAT}", json=body, timeout=120).text)
    deltas = [chunk["choices"][0]["delta"] for chunk in chunks if chunk["choices"]]
    calls = [call for delta in deltas for call in delta.get("tool_calls", [])]
    assert [(c["index"], c["function"]["name"]) for c in calls] == [(0, "now")]
    assert bool(chunks[-1].get("usage")) == include_usage


# -- errors ---------------------------------------------------------------------------------

KEY = "sk-specem-contract-0c4f1e"
UNREACHABLE = Member.tgi("http://127.0.0.1:9", retries=0)
"""A member that fails if it is ever asked: nothing listens on port 9."""


@pytest.fixture(scope="module")
def keyed():
    """A server with a key and a small body limit, whose only member is unreachable."""
    limits = Limits(max_body_bytes=4096)
    with serve([UNREACHABLE], keys=ApiKeys([KEY]), limits=limits) as base:
        yield base


BEARER = {"authorization": f"Bearer {KEY}"}
WRONG = {"authorization": "Bearer sk-no"}
ASK = {"messages": HI}
NOT_JSON = b'{"messages": [{"role": "user", "content": "Hi"}'
LARGE = json.dumps({"messages": [{"role": "user", "content": "x" * 5000}]}).encode()
IMAGE = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AA=="}}
IMAGE_TURN = {"role": "user", "content": [IMAGE]}
ERRORS = {
    "401-no-key": ("POST", CHAT, ASK, {}, 401, "invalid_api_key"),
    "401-wrong-key": ("POST", CHAT, ASK, WRONG, 401, "invalid_api_key"),
    "401-models": ("GET", "/v1/models", None, {}, 401, "invalid_api_key"),
    "400-field": ("POST", CHAT, {"messages": []}, BEARER, 400, "messages"),
    "400-range": ("POST", CHAT, ASK | {"temperature": 9}, BEARER, 400, "temperature"),
    "400-not-json": ("POST", CHAT, NOT_JSON, BEARER, 400, "not valid JSON"),
    "400-limit": ("POST", CHAT, ASK | {"max_tokens": 10**9}, BEARER, 400, "--max-tokens-limit"),
    "400-unsupported": ("POST", CHAT, ASK | {"logprobs": True}, BEARER, 400, "logprobs"),
    "400-option": ("POST", CHAT, ASK | {"stop": [""]}, BEARER, 400, "stop"),
    "400-content": ("POST", CHAT, {"messages": [IMAGE_TURN]}, BEARER, 400, "text content only"),
    "404": ("GET", "/v1/nothing", None, BEARER, 404, "Not Found"),
    "405": ("GET", CHAT, None, BEARER, 405, "Method Not Allowed"),
    "413": ("POST", CHAT, LARGE, BEARER, 413, "--max-body-bytes"),
    "503-member": ("POST", CHAT, ASK, BEARER, 503, "127.0.0.1:9"),
    "503-member-streamed": ("POST", CHAT, ASK | {"stream": True}, BEARER, 503, "127.0.0.1:9"),
}
"""Requests and the error each gets: its status, and a text its message, param or code holds."""


@pytest.mark.parametrize(
    ("method", "path", "body", "headers", "status", "named"), ERRORS.values(), ids=ERRORS
)
def test_every_error_is_an_openai_error_naming_the_problem(
    keyed, method, path, body, headers, status, named
):
    content = body if isinstance(body, bytes) or body is None else json.dumps(body).encode()
    headers = {"content-type": "application/json", **headers}
    response = httpx.request(method, f"{keyed}{path}", content=content, headers=headers)
    assert response.status_code == status, response.text
    conforms(response.json(), "ErrorResponse")
    error = response.json()["error"]
    assert named in error["message"] or named in (error["param"], error["code"]), error


def test_a_prompt_past_a_members_context_is_an_openai_error(tiny_server):
    long = {"messages": [{"role": "user", "content": "clips " * 400}], "stream": True}
    response = httpx.post(f"{tiny_server}{CHAT}", json=long)
    assert response.status_code == 400
    conforms(response.json(), "ErrorResponse")
    assert response.json()["error"]["code"] == "context_length_exceeded"


async def test_overload_and_an_answer_past_its_time_are_openai_errors(slow_member):
    """One answer at a time and no queue: a second request is a 429; the first, past its
    second, a 504; a streamed one past its second ends with an error event."""
    limits = Limits(max_concurrent_requests=1, max_queue=0)
    settings = RequestSettings(max_tokens=64, answer_timeout=1.0)
    with serve([slow_member], settings, limits=limits) as base:
        async with httpx.AsyncClient(base_url=base, timeout=120) as client:
            first = asyncio.create_task(client.post(CHAT, json={"messages": HI}))
            await until(lambda: metric(base, "specem_requests_in_progress") == 1)
            overloaded = await client.post(CHAT, json={"messages": HI})
            timed_out = await first
            streamed = await client.post(CHAT, json={"messages": HI, "stream": True})
    assert (overloaded.status_code, timed_out.status_code) == (429, 504)
    conforms(overloaded.json(), "ErrorResponse")
    conforms(timed_out.json(), "ErrorResponse")
    assert overloaded.json()["error"]["code"] == "overloaded"
    assert timed_out.json()["error"]["code"] == "timeout"
    *chunks, last = events(streamed.text)
    assert streamed.status_code == 200 and chunks and last != "[DONE]"
    for chunk in chunks:
        conforms(json.loads(chunk), "CreateChatCompletionStreamResponse")
    conforms(json.loads(last), "ErrorResponse")
    assert json.loads(last)["error"]["code"] == "timeout"


@pytest.mark.parametrize(
    "error",
    [
        refusal(),
        cut_error(25),
        api_error(PromptTooLongError("the prompt is 300 tokens")),
        api_error(RequestError("a setting")),
        api_error(FeedbackError("the feedback store stayed locked")),
        api_error(AnswerFormatError("every candidate broke the format")),
        api_error(MemberUnavailable("m", "refused")),
        api_error(TimeoutError("past answer_timeout")),
        api_error(ValueError("a value")),
        api_error(RuntimeError("a bug")),
    ],
    ids=lambda e: f"{e.status}-{e.body.error.code or e.body.error.type}",
)
def test_every_error_body_the_server_builds_conforms(error):
    """Every error answer, as its bytes are sent: the drain's refusal and cut (sent in a body
    or as a stream's last event; test_ready_and_drain.py drives them), and the answer to
    each kind of error the request or the ensemble raises."""
    conforms(json.loads(error.response().body), "ErrorResponse")
    conforms(json.loads(error.body.model_dump_json()), "ErrorResponse")  # as an SSE event
