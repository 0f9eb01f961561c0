"""The TGI backend against TGI's published OpenAPI schema and recorded real responses."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import pytest

from specem_chain import Member, SpecEMChatModel
from specem_chain.backends.tgi import TGIBackend, TGISession
from specem_chain.engine.types import Segment

PROTOCOL = Path(__file__).parent / "tgi_protocol"
"""TGI's OpenAPI schema and recorded responses (Apache-2.0; see its README)."""

OPENAPI = json.loads((PROTOCOL / "openapi.json").read_text())
RECORDED = sorted((PROTOCOL / "responses").glob("*.json"))


def json_schema(node: Any) -> Any:
    """OpenAPI 3.0 schema -> JSON Schema: ``nullable`` becomes a null alternative."""
    if isinstance(node, list):
        return [json_schema(n) for n in node]
    if not isinstance(node, dict):
        return node
    out = {k: json_schema(v) for k, v in node.items() if k not in ("nullable", "example")}
    if node.get("nullable"):
        return {"anyOf": [{"type": "null"}, out]}
    return out


SCHEMAS = json.loads(json.dumps(OPENAPI["components"]["schemas"]))
# Real TGI answers "top_tokens": null (see the recorded responses) where its schema has no
# "nullable"; accept what the real server sends.
SCHEMAS["Details"]["properties"]["top_tokens"]["nullable"] = True
VALIDATOR_ROOT = {"components": {"schemas": json_schema(SCHEMAS)}}


def validate(instance: Any, schema: dict[str, Any]) -> None:
    jsonschema.Draft202012Validator({**VALIDATOR_ROOT, **json_schema(schema)}).validate(instance)


def schema_of(path: str, method: str, part: str) -> dict[str, Any]:
    operation = OPENAPI["paths"][path][method]
    if part == "request":
        return operation["requestBody"]["content"]["application/json"]["schema"]
    return operation["responses"]["200"]["content"]["application/json"]["schema"]


@pytest.mark.parametrize("recorded", RECORDED, ids=lambda p: p.stem)
async def test_recorded_response_is_parsed(recorded: Path, monkeypatch) -> None:
    """Every recorded /generate response is valid and the session reads its draft."""
    data = json.loads(recorded.read_text())
    responses = data if isinstance(data, list) else [data]
    schema = schema_of("/generate", "post", "response")
    backend = TGIBackend(Member.tgi("http://tgi.invalid"))
    backend.max_total_tokens = 4096
    session = TGISession(backend, backend.client, "context", [1, 2])
    for response in responses:
        validate(response, schema)

        async def answer(path: str, body: dict[str, Any], response=response) -> Any:
            return response

        monkeypatch.setattr(backend.client, "post", answer)
        draft = await session.draft(10, Member.tgi("http://x").sampling, seed=0)
        details = response["details"]
        assert draft.tokens == details["generated_tokens"]
        assert draft.finished == (details["finish_reason"] != "length")
        assert response["generated_text"].startswith(draft.text)
        prefill = details["prefill"]
        if prefill:  # its ids after the first: a candidate; the log-probs give its score
            session.ids = [prefill[0]["id"]]
            candidate = Segment("x")
            monkeypatch.setattr(backend, "prefill", _returning(prefill))
            [score] = await session.score([candidate], "mean_logprob")
            expected = [t["logprob"] for t in prefill[1:]]
            assert score.mean == pytest.approx(sum(expected) / len(expected))
            assert score.tokens == len(expected)


def _returning(value: Any):
    async def call(*_: Any) -> Any:
        return value

    return call


@pytest.mark.models
async def test_requests_and_responses_follow_the_openapi_schema(tgi_url, monkeypatch) -> None:
    """Every request the backend sends, and every answer of the TGI test server, validates."""
    exchanges: list[tuple[httpx.Request, httpx.Response]] = []
    send = httpx.AsyncClient.send

    async def recording(self, request, **kwargs):
        response = await send(self, request, **kwargs)
        await response.aread()
        exchanges.append((request, response))
        return response

    monkeypatch.setattr(httpx.AsyncClient, "send", recording)
    members = [
        Member.tgi(tgi_url, name="contract-a"),
        Member.tgi(
            tgi_url,
            name="contract-b",
            sampling={"temperature": 0.9, "top_p": 1.0, "repeat_penalty": 1.2},
        ),
    ]
    llm = SpecEMChatModel(members=members, max_tokens=16, window=8, seed=5)
    await llm.ainvoke([("system", "Be brief."), ("human", "Name a colour.")])
    paths = {request.url.path for request, _ in exchanges}
    assert {"/info", "/tokenize", "/chat_tokenize", "/generate"} <= paths
    penalties = {
        json.loads(request.content)["parameters"].get("repetition_penalty")
        for request, _ in exchanges
        if request.url.path == "/generate"
    }
    # drafts send the member's penalty (contract-a's the default, 1.1); scoring calls none
    assert penalties == {None, 1.1, 1.2}
    for request, response in exchanges:
        path, method = request.url.path, request.method.lower()
        assert response.status_code == 200, response.text
        if method == "post":
            validate(json.loads(request.content), schema_of(path, method, "request"))
        validate(response.json(), schema_of(path, method, "response"))
