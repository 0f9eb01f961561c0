"""Remote member specs, labels and secrets."""

from __future__ import annotations

import socket

import pytest
from pydantic import ValidationError

from specem_chain import Member, SpecEMChatModel
from specem_chain.backends.http import RemoteClient
from specem_chain.backends.vllm import (
    asked_positions,
    cache_block,
    cached_cost,
    rereading_cost,
)
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


def cost(prompts: list[list[int]], starts: list[int], block: int) -> int:
    """What the cached route computes for these prompts from these starts."""
    return cached_cost(asked_positions(prompts, starts)[1], block)


def test_the_tokens_each_scoring_route_computes_are_counted_from_the_block_size():
    # two 3-token candidates after a 130-token context; their first token is shared
    context = list(range(130))
    prompts = [[*context, 1, 2, 3], [*context, 1, 5, 6]]
    starts = [130, 130]
    assert rereading_cost(prompts) == 266
    # distinct prefixes of 130, 131, 131, 132, 132 tokens (the 130 one asked once), each
    # computed from its last whole 128-token block on: 2 + 3 + 3 + 4 + 4
    assert cost(prompts, starts, 128) == 16
    assert cost(prompts, starts, 16) == 2 + 3 + 3 + 4 + 4
    assert cost(prompts, starts, 0) == 130 + 131 * 2 + 132 * 2  # no prefix caching
    # a prefix that ends a block is computed whole from the block before (its last token
    # at least is computed): 128 tokens -> the last block's 128
    assert cost([list(range(129))], [128], 128) == 128
    short = [[*range(60), 1, 2, 3, 4, 5, 6, 7, 8, 9, 10]]
    assert cost(short, [60], 128) > rereading_cost(short)


def test_the_block_size_is_read_from_vllms_cache_config_metric():
    line = 'vllm:cache_config_info{block_size="%s",enable_prefix_caching="%s",x="y"} 1.0'
    assert cache_block("# HELP ...\n" + line % ("128", "True")) == 128
    assert cache_block(line % ("16", "False")) == 0
    assert cache_block(line % ("None", "True")) is None
    assert cache_block("") is None and cache_block(None) is None


def test_the_session_header_is_a_header_name_or_none() -> None:
    assert Member.tgi("http://h:1").session_header == "X-Session-ID"
    assert Member.vllm("http://h:1", session_header=None).session_header is None
    assert Member.vllm("http://h:1", session_header="X-User-Id").session_header == "X-User-Id"
    for bad in ("", "X Session", "X-Session:", "Authorization", "content-type", "Host"):
        with pytest.raises(ValidationError, match="session_header must be an HTTP header's name"):
            Member.tgi("http://h:1", session_header=bad)
    client = RemoteClient(Member.tgi("http://h:1", session_header=None), "http://h:1")
    assert client.answering("a1") is client
    client = RemoteClient(Member.tgi("http://h:1"), "http://h:1")
    assert client.answering(None) is client
    assert client.answering("a1").headers == {"X-Session-ID": "a1"}
