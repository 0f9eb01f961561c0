"""SpecEMChatGenerator on tiny random members: run, run_async, streaming chunks, settings and
their errors."""

from __future__ import annotations

import asyncio

import pytest
from haystack import Pipeline
from haystack.components.generators.utils import _convert_streaming_chunks_to_chat_message
from haystack.dataclasses import ChatMessage, ChatRole, ImageContent, StreamingChunk
from haystack.tools import tool
from haystack.utils import Secret
from pydantic import ValidationError
from specem_chain import Feedback, Member
from specem_chain.errors import RequestError

from haystack_integrations.components.generators.specem import SpecEMChatGenerator

QUESTION = [ChatMessage.from_system("Be brief."), ChatMessage.from_user("How many clips?")]
UNREACHABLE = Member.tgi("http://127.0.0.1:9")
"""A member that fails if it is ever asked: nothing listens on port 9."""


@pytest.fixture(scope="module")
def generator(tiny_pair) -> SpecEMChatGenerator:
    return SpecEMChatGenerator(members=tiny_pair, generation_kwargs={"max_tokens": 24, "seed": 0})


def test_run_returns_one_assistant_reply_with_its_provenance(generator, tiny_pair):
    [reply] = generator.run(QUESTION)["replies"]
    assert reply.role is ChatRole.ASSISTANT and reply.text and not reply.tool_calls
    meta = reply.meta
    assert meta["model"] == "specem[llama, qwen2]" == generator.model_name
    assert meta["finish_reason"] in ("stop", "length")
    usage = meta["usage"]
    assert usage["prompt_tokens"] > 0 and usage["completion_tokens"] > 0
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    specem = meta["specem"]
    assert (
        set(specem["wins"])
        == set(specem["weights"])
        == set(specem["usage"])
        == {
            "llama",
            "qwen2",
        }
    )
    assert sum(specem["wins"].values()) == len(specem["segments"]) >= 1
    assert "".join(s["text"] for s in specem["segments"]).startswith(reply.text)
    assert all(s["member"] in ("llama", "qwen2") for s in specem["segments"])


def test_feedback_carries_the_weights_from_one_run_to_the_next(tiny_pair):
    feedback = Feedback()
    generator = SpecEMChatGenerator(
        members=tiny_pair, generation_kwargs={"max_tokens": 24, "seed": 0}, feedback=feedback
    )
    [first] = generator.run(QUESTION)["replies"]
    assert first.meta["specem"]["start_weights"] == {"llama": 0.5, "qwen2": 0.5}
    carried = feedback.weights(["llama", "qwen2"])
    assert feedback.answers == 1 and carried != {"llama": 0.5, "qwen2": 0.5}
    [second] = generator.run(QUESTION, generation_kwargs={"seed": 1})["replies"]
    assert second.meta["specem"]["start_weights"] == pytest.approx(carried)
    assert feedback.answers == 2


def test_streaming_gives_one_chunk_per_segment_and_they_make_the_reply(generator):
    chunks: list[StreamingChunk] = []
    [reply] = generator.run(QUESTION, streaming_callback=chunks.append)["replies"]
    segments = [s for c in chunks for s in c.meta.get("specem", {}).get("segments", [])]
    assert len(chunks) == len(segments) == len(reply.meta["specem"]["segments"])
    assert segments == reply.meta["specem"]["segments"]
    assert "".join(c.content for c in chunks) == reply.text
    text_chunks = [c for c in chunks if c.content]
    assert text_chunks[0].start and not any(c.start for c in text_chunks[1:])
    assert {c.index for c in text_chunks} == {0}
    assert [c.finish_reason for c in chunks[:-1]] == [None] * (len(chunks) - 1)
    assert chunks[-1].finish_reason == reply.meta["finish_reason"]
    assert chunks[-1].meta["usage"] == reply.meta["usage"]
    assert all(c.component_info.type.endswith("SpecEMChatGenerator") for c in chunks)
    joined = _convert_streaming_chunks_to_chat_message(chunks)  # as Haystack joins chunks
    assert joined.text == reply.text
    assert joined.meta["finish_reason"] == reply.meta["finish_reason"]
    assert joined.meta["usage"] == reply.meta["usage"]


def test_the_init_callback_streams_unless_the_call_gives_its_own(tiny_pair):
    from_init: list[StreamingChunk] = []
    from_call: list[StreamingChunk] = []
    generator = SpecEMChatGenerator(
        members=tiny_pair,
        generation_kwargs={"max_tokens": 8, "seed": 1},
        streaming_callback=from_init.append,
    )
    generator.run(QUESTION)
    assert from_init and not from_call
    count = len(from_init)
    generator.run(QUESTION, streaming_callback=from_call.append)
    assert len(from_init) == count and from_call


async def test_run_async_is_native_and_matches_run_for_a_seed(generator):
    chunks: list[StreamingChunk] = []

    async def collect(chunk: StreamingChunk) -> None:
        chunks.append(chunk)

    [reply] = (await generator.run_async(QUESTION, streaming_callback=collect))["replies"]
    assert "".join(c.content for c in chunks) == reply.text
    assert reply.meta["specem"]["segments"]
    [synced] = generator.run(QUESTION)["replies"]  # run() from inside a running loop
    assert synced.text == reply.text


async def test_concurrent_calls_keep_their_own_answers(generator):
    seeds = (0, 1, 2)
    replies = await asyncio.gather(
        *(generator.run_async(QUESTION, generation_kwargs={"seed": s}) for s in seeds)
    )
    alone = [generator.run(QUESTION, generation_kwargs={"seed": s})["replies"][0] for s in seeds]
    assert [r["replies"][0].text for r in replies] == [a.text for a in alone]


def test_a_sync_run_refuses_an_async_callback(generator):
    async def callback(chunk: StreamingChunk) -> None: ...

    with pytest.raises(ValueError, match="cannot be a coroutine"):
        generator.run(QUESTION, streaming_callback=callback)


def test_call_settings_override_the_init_ones(generator):
    [reply] = generator.run(QUESTION, generation_kwargs={"max_tokens": 2, "window": 1})["replies"]
    assert reply.meta["finish_reason"] == "length"
    assert reply.meta["specem"]["answer_tokens"] == 2
    assert len(reply.meta["specem"]["segments"]) == 2  # a window of one token per round


def test_a_call_takes_every_answer_option_specem_front_ends_take(generator):
    @tool
    def weather(city: str) -> str:
        """The weather in a city."""
        return "sunny"

    options = {"parallel_tool_calls": False, "strict": True}
    request = generator._request(QUESTION, options, [weather])
    assert request.format.stop == ("</tool_call>",)  # one call at most
    assert [t["function"]["name"] for t in request.format.tools] == ["weather"]


def test_bad_settings_raise_at_init_naming_them():
    with pytest.raises(ValidationError, match="window"):
        SpecEMChatGenerator(members=[UNREACHABLE], generation_kwargs={"window": 0})
    with pytest.raises(ValueError, match=r"unsupported generation_kwargs \['top_k'\]"):
        SpecEMChatGenerator(members=[UNREACHABLE], generation_kwargs={"top_k": 5})
    with pytest.raises(ValueError, match="no tools are bound"):
        SpecEMChatGenerator(members=[UNREACHABLE], generation_kwargs={"tool_choice": "required"})
    with pytest.raises(ValueError, match="response_format="):
        SpecEMChatGenerator(
            members=[UNREACHABLE], generation_kwargs={"response_format": {"type": "xml"}}
        )
    with pytest.raises(ValueError, match="names must be unique"):
        SpecEMChatGenerator(members=["/a/model", "/b/model"])
    with pytest.raises(ValueError, match="at least one member"):
        SpecEMChatGenerator(members=[])
    with pytest.raises(ValueError, match="not a remote member"):
        SpecEMChatGenerator(members=["/a/model"], api_keys={"model": Secret.from_env_var("K")})


def test_bad_calls_raise_before_any_member_runs():
    """The only member is unreachable, so any error but the input's would be a connection
    error: each bad call is refused before a member is asked."""
    generator = SpecEMChatGenerator(members=[UNREACHABLE])
    with pytest.raises(ValidationError, match="max_tokens"):
        generator.run(QUESTION, generation_kwargs={"max_tokens": 0})
    with pytest.raises(ValidationError, match="temperature"):
        asyncio.run(generator.run_async(QUESTION, generation_kwargs={"temperature": -1}))
    with pytest.raises(ValueError, match="stop sequences must not be empty"):
        generator.run(QUESTION, generation_kwargs={"stop": [""]})
    with pytest.raises(RequestError, match="conversation is empty"):
        generator.run([])
    image = ImageContent(base64_image="iVBORw0KGgo=", mime_type="image/png")
    with pytest.raises(ValueError, match="message 0 \\(user\\) has an image"):
        generator.run([ChatMessage.from_user(content_parts=["Describe it.", image])])


async def test_an_async_pipeline_run_uses_run_async(generator):
    chunks: list[StreamingChunk] = []

    async def collect(chunk: StreamingChunk) -> None:  # run() would refuse it
        chunks.append(chunk)

    pipeline = Pipeline()
    pipeline.add_component("llm", generator)
    result = await pipeline.run_async(
        {"llm": {"messages": QUESTION, "streaming_callback": collect}}
    )
    [reply] = result["llm"]["replies"]
    assert "".join(c.content for c in chunks) == reply.text
    assert reply.text == generator.run(QUESTION)["replies"][0].text  # same seed, same answer


def unloaded(members: list[str]) -> list:
    """The members' keys in specem's backend registry (as they run: backend resolved),
    their models dropped from it."""
    from specem_chain.backends import registry
    from specem_chain.models import resolve

    keys = [registry.key(resolve(Member(source=m))) for m in members]
    for key in keys:
        registry._backends.pop(key, None)
    return keys


def test_a_pipeline_warms_the_members_up_before_it_runs(tiny_pair):
    from specem_chain.backends import registry

    pipeline = Pipeline()
    pipeline.add_component("llm", SpecEMChatGenerator(members=tiny_pair))
    keys = unloaded(tiny_pair)
    pipeline.warm_up()  # as Pipeline.run does first
    loaded = [registry._backends[key] for key in keys]  # a KeyError if one is not loaded
    pipeline.warm_up()
    assert [registry._backends[key] for key in keys] == loaded  # loaded once, shared


async def test_an_async_pipeline_warms_the_members_up_off_its_loop(tiny_pair):
    from specem_chain.backends import registry

    pipeline = Pipeline()
    pipeline.add_component("llm", SpecEMChatGenerator(members=tiny_pair))
    keys = unloaded(tiny_pair)
    await pipeline.warm_up_async()  # as Pipeline.run_async does first
    assert all(key in registry._backends for key in keys)
