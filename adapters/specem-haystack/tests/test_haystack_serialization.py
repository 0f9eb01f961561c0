"""to_dict / from_dict in Haystack's format: members, settings, callbacks, tools and secrets
survive a round trip, and no API key is written in plain text."""

from __future__ import annotations

import copy

import pytest
from haystack import Pipeline
from haystack.components.generators.utils import print_streaming_chunk
from haystack.dataclasses import ChatMessage
from haystack.tools import Tool, Toolset
from haystack.utils import Secret
from specem_chain import Feedback, Member, Sampling

from haystack_integrations.components.generators.specem import SpecEMChatGenerator

TYPE = "haystack_integrations.components.generators.specem.chat_generator.SpecEMChatGenerator"


def shout(text: str) -> str:
    """Upper-case a text."""
    return text.upper()


def whisper(text: str) -> str:
    """Lower-case a text."""
    return text.lower()


SHOUT = Tool(
    name="shout",
    description="Upper-case a text.",
    parameters={"type": "object", "properties": {"text": {"type": "string"}}},
    function=shout,
)
WHISPER = Tool(
    name="whisper",
    description="Lower-case a text.",
    parameters={"type": "object", "properties": {"text": {"type": "string"}}},
    function=whisper,
)


def test_the_default_generator_writes_the_default_member_with_its_sampling():
    data = SpecEMChatGenerator().to_dict()
    assert data == {
        "type": TYPE,
        "init_parameters": {
            "members": [
                {
                    "source": "qwen2.5-coder-1.5b-instruct",
                    "sampling": {"repeat_penalty": 1.0},
                }
            ],
            "generation_kwargs": {},
            "streaming_callback": None,
            "tools": None,
            "api_keys": None,
            "feedback": None,
        },
    }
    assert SpecEMChatGenerator.from_dict(data).members == SpecEMChatGenerator().members


def test_everything_survives_a_round_trip(monkeypatch):
    monkeypatch.setenv("SPECEM_TGI_KEY", "s3cret")
    monkeypatch.setenv("HAYSTACK_DESERIALIZATION_ALLOWLIST", __name__)  # the tools' functions
    feedback = Feedback(decay=0.3)
    feedback.record({"smollm2-135m-instruct": 0.7, "qwen2.5-coder-0.5b-instruct": 0.3})
    members = [
        "smollm2",
        Member(source="qwen2.5-coder", role="verifier", sampling=Sampling(temperature=0.2)),
        Member.tgi("http://127.0.0.1:8080", name="remote", retries=0),
    ]
    generator = SpecEMChatGenerator(
        members=members,
        generation_kwargs={"max_tokens": 32, "seed": 3, "policy": "pool", "stop": ["\n\n"]},
        streaming_callback=print_streaming_chunk,
        tools=[SHOUT, Toolset([WHISPER])],
        api_keys={"remote": Secret.from_env_var("SPECEM_TGI_KEY")},
        feedback=feedback,
    )
    data = generator.to_dict()
    init = data["init_parameters"]
    assert init["members"][0] == "smollm2"
    assert init["members"][1] == {
        "source": "qwen2.5-coder",
        "role": "verifier",
        "sampling": {"temperature": 0.2},
    }
    assert init["members"][2] == {
        "source": "http://127.0.0.1:8080",
        "kind": "tgi",
        "name": "remote",
        "retries": 0,
    }
    assert init["api_keys"] == {
        "remote": {"type": "env_var", "env_vars": ["SPECEM_TGI_KEY"], "strict": True}
    }
    assert "s3cret" not in repr(data)
    assert (
        init["streaming_callback"] == "haystack.components.generators.utils.print_streaming_chunk"
    )
    assert [t["type"] for t in init["tools"]] == [
        "haystack.tools.tool.Tool",
        "haystack.tools.toolset.Toolset",
    ]

    restored = SpecEMChatGenerator.from_dict(copy.deepcopy(data))  # it works in place
    assert restored.members == generator.members
    assert restored.generation_kwargs == generator.generation_kwargs
    assert restored.streaming_callback is print_streaming_chunk
    assert restored.api_keys["remote"].resolve_value() == "s3cret"
    assert restored.tools[0].name == "shout" and restored.tools[0].function is shout
    assert [t.name for t in restored.tools[1]] == ["whisper"]
    assert restored.feedback is not feedback and restored.feedback.to_json() == feedback.to_json()
    assert restored.to_dict() == data


def test_a_plain_text_api_key_is_refused_with_the_way_out():
    generator = SpecEMChatGenerator(members=[Member.tgi("http://h:80", name="r", api_key="k")])
    with pytest.raises(ValueError, match=r"api_keys=\{'r': Secret.from_env_var"):
        generator.to_dict()
    generator = SpecEMChatGenerator(
        members=[Member.tgi("http://h:80", name="r")],
        api_keys={"r": Secret.from_token("k")},
    )
    with pytest.raises(ValueError, match="Cannot serialize token-based secret"):
        generator.to_dict()
    with pytest.raises(TypeError, match=r"must be a haystack\.utils\.Secret"):
        SpecEMChatGenerator(members=[Member.tgi("http://h:80", name="r")], api_keys={"r": "k"})


def test_a_secret_is_resolved_only_when_a_call_needs_it(monkeypatch):
    monkeypatch.delenv("SPECEM_MISSING_KEY", raising=False)
    generator = SpecEMChatGenerator(
        members=[Member.tgi("http://127.0.0.1:9", name="r")],
        api_keys={"r": Secret.from_env_var("SPECEM_MISSING_KEY")},
    )
    with pytest.raises(ValueError, match="SPECEM_MISSING_KEY"):
        generator.run([ChatMessage.from_user("hi")])


def test_a_pipeline_with_the_generator_loads_from_yaml_and_answers(tiny_pair):
    pipeline = Pipeline()
    pipeline.add_component(
        "llm",
        SpecEMChatGenerator(members=tiny_pair, generation_kwargs={"max_tokens": 6, "seed": 0}),
    )
    loaded = Pipeline.loads(pipeline.dumps())
    llm = loaded.get_component("llm")
    assert isinstance(llm, SpecEMChatGenerator) and llm.members == [
        Member(source=m) for m in tiny_pair
    ]
    [reply] = loaded.run({"llm": {"messages": [ChatMessage.from_user("Hello")]}})["llm"]["replies"]
    assert reply.text and reply.meta["specem"]["segments"]
