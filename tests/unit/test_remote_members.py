"""Remote member specs, labels and secrets."""

from __future__ import annotations

import socket

import pytest
from pydantic import ValidationError

from specem_chain import Member, SpecEMChatModel
from specem_chain.backends.http import RemoteClient
from specem_chain.errors import EnsembleError


def test_spec_strings_name_the_kind_the_url_and_the_model() -> None:
    tgi = Member(source="tgi+http://gpu-1:8080")
    assert (tgi.kind, tgi.source, tgi.label) == ("tgi", "http://gpu-1:8080", "gpu-1:8080")
    openai = Member(source="openai+http://gpu-2:8000/v1#Qwen/Qwen2.5-7B-Instruct")
    assert (openai.kind, openai.source, openai.model) == (
        "openai",
        "http://gpu-2:8000/v1",
        "Qwen/Qwen2.5-7B-Instruct",
    )
    assert openai.label == "Qwen2.5-7B-Instruct"
    assert Member.openai_completions("http://h:1/v1").label == "h:1"
    assert Member.tgi("http://h:1", name="big").label == "big"
    vllm = Member(source="vllm+http://gpu-3:8000")
    assert (vllm.kind, vllm.source, vllm.model, vllm.label) == (
        "vllm",
        "http://gpu-3:8000",
        None,
        "gpu-3:8000",
    )
    assert Member(source="vllm+http://gpu-3:8000/v1#org/big-7b").label == "big-7b"
    assert Member.vllm("http://gpu-3:8000", model="m") == Member(source="vllm+http://gpu-3:8000#m")


def test_a_vllm_member_is_its_servers_address_with_or_without_v1() -> None:
    from specem_chain.backends.vllm import api_root

    assert api_root("http://gpu-3:8000") == api_root("http://gpu-3:8000/v1/") == "http://gpu-3:8000"


def test_chat_model_accepts_remote_specs() -> None:
    llm = SpecEMChatModel(
        members=["tgi+http://a:1", "openai+http://b:2/v1#m", "vllm+http://c:3"], min_members=2
    )
    assert [m.kind for m in llm.members] == ["tgi", "openai", "vllm"]
    assert llm.model_name == "specem[a:1, m, c:3]"


@pytest.mark.parametrize(
    "settings",
    [
        {"source": "tgi+gpu-1:8080"},
        {"source": "ftp://x", "kind": "tgi"},
        {"source": "smollm2", "model": "m"},
        {"source": "tgi+http://a:1", "request_timeout": 0},
        {"source": "vllm+http://a:1", "tokenizer": "/models/m"},  # the server's template
        {"source": "tgi+http://a:1", "chat_template": "{{ messages }}"},
    ],
)
def test_bad_remote_settings_are_rejected(settings: dict) -> None:
    with pytest.raises(ValidationError):
        Member(**settings)


def test_bearer_tokens_never_show() -> None:
    member = Member.tgi("http://a:1", api_key="sk-very-secret")
    client = RemoteClient(member, member.source)
    for shown in (repr(member), str(member), repr(client), str(member.model_dump())):
        assert "sk-very-secret" not in shown
    llm = SpecEMChatModel(members=[member, Member.tgi("http://b:1", api_key="sk-very-secret")])
    assert "sk-very-secret" not in repr(llm) + str(llm._identifying_params)


async def test_an_unreachable_member_is_dropped_at_its_first_request(tiny_models):
    url = f"http://127.0.0.1:{free_port()}"
    nowhere = Member.tgi(url, name="nowhere", retries=1, request_timeout=2, api_key="sk-secret")
    llm = SpecEMChatModel(members=[nowhere, str(tiny_models["qwen2"])], max_tokens=8, seed=0)
    reply = await llm.ainvoke("Hi")
    meta = reply.response_metadata["specem"]
    assert reply.content and f"cannot reach GET {url}/info" in meta["dropped"]["nowhere"]
    assert meta["weights"]["nowhere"] == 0.0 and meta["wins"]["nowhere"] == 0
    assert "sk-secret" not in str(meta)
    with pytest.raises(EnsembleError, match="only 1 of 2 members could be reached") as caught:
        await llm.ainvoke("Hi", min_members=2)
    assert "min_members=2" in str(caught.value) and "sk-secret" not in str(caught.value)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
