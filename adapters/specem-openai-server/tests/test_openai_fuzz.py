"""A property-based fuzz of the server (schemathesis) on tiny members, with requests drawn
from two descriptions of it: the server's own ``/openapi.json``, and OpenAI's description of
``createChatCompletion`` and ``listModels`` (``openai_protocol/``; its base URL is the
server's ``/v1``). Valid requests and invalid ones (schemathesis' positive and negative
data); for every response:

- no 5xx;
- it conforms to the description the request came from (schemathesis' checks), and to
  OpenAI's schemas (``openai_contract.py``): a completion, each chunk of a stream, the model
  list, an error;
- a 4xx names what was wrong: the field (its ``param``, or its name in the message), the
  body, the key, or the limit's option.

The default run asks a few dozen requests, the same ones every run (a regression check); the
``heavy`` run asks many, new ones each run (it explores)."""

from __future__ import annotations

import re
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from openai_contract import OPENAI, conforms, stream_conforms
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    response_schema_conformance,
    status_code_conformance,
)

from specem_openai_server.limits import IGNORED, UNSUPPORTED
from specem_openai_server.schema import ChatCompletionRequest

OWN = (
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
    negative_data_rejection,
)
"""The server's own description is whole: every status and content type it answers is in
it, and it rejects every request it does not describe."""

OPENAIS = (not_a_server_error, content_type_conformance, response_schema_conformance)
"""OpenAI's description gives only the 200s, and the server accepts more than it describes
(it ignores ``model``, which OpenAI requires...): the errors are checked against OpenAI's
``ErrorResponse`` instead."""

OPENAIS_STREAMED = (not_a_server_error, content_type_conformance)
"""OpenAI's description gives the chunk's schema as its ``text/event-stream`` 200, meaning each
event's data; schemathesis reads it as the schema of each event itself (``{"data": ...,
"event": "message"}``), which no stream could satisfy. A stream's chunks are checked against
it by :func:`openai_contract.stream_conforms` instead."""

FIELDS = {*ChatCompletionRequest.model_fields, *UNSUPPORTED, *IGNORED}
NAMED = re.compile(
    r"\b(body|JSON|key|"
    + "|".join(re.escape(name.split(".")[0].removesuffix("s")) + "s?" for name in FIELDS)
    + r")\b|--[a-z-]+"
)
"""What a 4xx's message names: the body, the key, a field of the request, or an option."""


def check(case: Any, response: Any, checks: tuple[Any, ...]) -> None:
    """Every property of a response to a fuzzed request (the module's docstring)."""
    streamed = response.headers.get("content-type", [""])[0].startswith("text/event-stream")
    if streamed and checks == OPENAIS:
        checks = OPENAIS_STREAMED
    case.validate_response(response, checks=list(checks))
    if response.status_code >= 400:
        conforms(response.json(), "ErrorResponse")
        error = response.json()["error"]
        assert error["param"] or NAMED.search(error["message"]), error
    elif case.operation.path.endswith("/models"):
        conforms(response.json(), "ListModelsResponse")
    elif not case.operation.path.endswith("/chat/completions"):
        return  # /health, /ready, /metrics: the server's own
    elif response.headers["content-type"][0].startswith("text/event-stream"):
        stream_conforms(response.text)
    else:
        conforms(response.json(), "CreateChatCompletionResponse")


SHORT = 12
"""Requests of each kind (description, and valid or invalid) in the default run: the same
ones every run."""

LONG = 500
"""Requests of each kind in the heavy run: new ones every run."""


def fuzz(schema: Any, base_url: str, checks: tuple[Any, ...], mode: str, examples: int) -> None:
    """Ask the server ``examples`` requests of ``mode`` drawn from ``schema``, each checked."""

    @given(case=schema.as_strategy(generation_mode=GenerationMode(mode)))
    @settings(
        max_examples=examples,
        deadline=None,
        database=None,
        derandomize=examples == SHORT,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    )
    def ask(case: Any) -> None:
        check(case, case.call(base_url=base_url, timeout=60), checks)

    ask()


MODES = ["positive", "negative"]


@pytest.fixture(scope="module")
def own(tiny_server: str) -> Any:
    return schemathesis.openapi.from_url(f"{tiny_server}/openapi.json")


@pytest.fixture(scope="module")
def openais() -> Any:
    return schemathesis.openapi.from_dict(OPENAI).include(
        operation_id=["createChatCompletion", "listModels"]
    )


@pytest.mark.parametrize("mode", MODES)
def test_a_short_fuzz_from_the_servers_own_description(own, tiny_server, mode):
    fuzz(own, tiny_server, OWN, mode, SHORT)


@pytest.mark.parametrize("mode", MODES)
def test_a_short_fuzz_from_openais_description(openais, tiny_server, mode):
    fuzz(openais, f"{tiny_server}/v1", OPENAIS, mode, SHORT)


@pytest.mark.heavy
@pytest.mark.parametrize("mode", MODES)
def test_the_fuzz_from_the_servers_own_description(own, tiny_server, mode):
    fuzz(own, tiny_server, OWN, mode, LONG)


@pytest.mark.heavy
@pytest.mark.parametrize("mode", MODES)
def test_the_fuzz_from_openais_description(openais, tiny_server, mode):
    fuzz(openais, f"{tiny_server}/v1", OPENAIS, mode, LONG)


# -- what the fuzz found ----------------------------------------------------------------------


def test_a_400_is_what_the_servers_own_description_says(own, tiny_server):
    """The server's ``/openapi.json`` gave FastAPI's 422 ``HTTPValidationError``, which it
    never sends: a request it refuses gets a 400 (a 4xx or 5xx), in OpenAI's error shape."""
    refused = own["/v1/chat/completions"]["POST"].Case(body={"messages": []})
    response = refused.call_and_validate(base_url=tiny_server, checks=list(OWN))
    assert response.status_code == 400
    assert "422" not in refused.operation.definition.raw["responses"]


def test_an_answer_and_a_stream_are_what_the_servers_own_description_says(own, tiny_server):
    """The description gave a chat completion's 200 no schema and no event stream."""
    chat = own["/v1/chat/completions"]["POST"]
    for stream in (False, True):
        asked = chat.Case(body={"messages": [{"role": "user", "content": "Hi"}], "stream": stream})
        assert asked.call_and_validate(base_url=tiny_server, checks=list(OWN)).status_code == 200


def test_a_stream_asked_from_openais_description_passes_its_checks(openais, tiny_server):
    """The heavy fuzz drew a valid streamed request, and schemathesis checked the stream's
    first event, ``{"data": ..., "event": "message"}``, against OpenAI's chunk schema: its
    reading of an event stream's schema, not OpenAI's (see :data:`OPENAIS_STREAMED`)."""
    body = {"model": "any", "messages": [{"role": "user", "content": "Hi"}], "stream": True}
    asked = openais["/chat/completions"]["POST"].Case(body=body)
    response = asked.call(base_url=f"{tiny_server}/v1", timeout=60)
    assert response.status_code == 200
    check(asked, response, OPENAIS)


def test_the_metrics_are_what_the_servers_own_description_says(own, tiny_server):
    """``/metrics`` was described as JSON; it is Prometheus' text."""
    own["/metrics"]["GET"].Case().call_and_validate(base_url=tiny_server, checks=list(OWN))


def test_a_body_that_is_not_utf8_says_so(tiny_server):
    """Was "There was an error parsing the body" (FastAPI's words), which names no cause."""
    response = httpx.post(
        f"{tiny_server}/v1/chat/completions",
        content=b'{"messages": "\xb0"}',
        headers={"content-type": "application/json"},
    )
    assert response.status_code == 400
    conforms(response.json(), "ErrorResponse")
    message = response.json()["error"]["message"]
    assert message.startswith("the body is not valid JSON: it is not UTF-8 text"), message


@pytest.mark.parametrize(
    "fields",
    [
        {"max_tokens": True},
        {"max_tokens": "5"},
        {"seed": False},
        {"temperature": "0.5"},
        {"stream": "yes"},
        {"parallel_tool_calls": 0},
        {"stream_options": {"include_usage": "on"}},
    ],
)
def test_a_field_of_another_json_type_is_refused_not_converted(tiny_server, fields):
    """Were answered: ``max_tokens: true`` as 1, ``"5"`` as 5, ``parallel_tool_calls: 0``
    as false, ``stream: "yes"`` as a stream (pydantic's lax conversions), where the server's
    description, and OpenAI's, give each field one JSON type."""
    body = {"messages": [{"role": "user", "content": "Hi"}], **fields}
    response = httpx.post(f"{tiny_server}/v1/chat/completions", json=body)
    assert response.status_code == 400, response.text
    conforms(response.json(), "ErrorResponse")
    (name,) = fields
    assert response.json()["error"]["param"].startswith(name)
