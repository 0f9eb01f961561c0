"""Remote member specs, labels and secrets."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from specem_chain import Member, SpecEMChatModel
from specem_chain.backends.http import RemoteClient


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


def test_chat_model_accepts_remote_specs() -> None:
    llm = SpecEMChatModel(members=["tgi+http://a:1", "openai+http://b:2/v1#m"], min_members=2)
    assert [m.kind for m in llm.members] == ["tgi", "openai"]
    assert llm.model_name == "specem[a:1, m]"


@pytest.mark.parametrize(
    "settings",
    [
        {"source": "tgi+gpu-1:8080"},
        {"source": "ftp://x", "kind": "tgi"},
        {"source": "smollm2", "model": "m"},
        {"source": "tgi+http://a:1", "timeout": 0},
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
