"""The example: a real Pipeline and Haystack's Agent, on the embedded default ensemble."""

from __future__ import annotations

import pytest
from haystack.dataclasses import ChatRole, StreamingChunk

from haystack_integrations.components.generators.specem import SpecEMChatGenerator

pytestmark = pytest.mark.models


@pytest.fixture(scope="module")
def generator() -> SpecEMChatGenerator:
    return SpecEMChatGenerator(generation_kwargs={"max_tokens": 48, "seed": 0})


def test_the_pipeline_answers_through_the_prompt_builder(generator):
    from haystack_pipeline import build_pipeline

    chunks: list[StreamingChunk] = []
    result = build_pipeline(generator).run(
        {"prompt": {"question": "What is 15% of 80?"}, "llm": {"streaming_callback": chunks.append}}
    )
    [reply] = result["llm"]["replies"]
    assert reply.text.strip() and reply.text == "".join(c.content for c in chunks)
    assert {c.component_info.name for c in chunks} == {"llm"}  # its name in the pipeline
    specem = reply.meta["specem"]
    assert set(specem["wins"]) == {"qwen2.5-coder-1.5b-instruct"}
    assert sum(specem["wins"].values()) == len(specem["segments"]) == len(chunks)


def test_the_agent_calls_the_tool_with_valid_arguments_then_the_answer_uses_its_result(
    generator,
):
    """SmolLM2-135M and Qwen2.5-Coder-0.5B do not call a tool by themselves at this seed
    (they describe the call in prose), so the example forces the call the way Haystack's
    Agent allows: ``generation_kwargs={"tool_choice": "required"}`` on ``Agent.run``, with
    ``exit_conditions=["multiply"]`` to stop once the tool has run."""
    from haystack_pipeline import build_agent, multiply, solve

    messages = solve(build_agent(generator), generator, "What is 12 times 34?")
    roles = [m.role for m in messages]
    assert roles == [ChatRole.USER, ChatRole.ASSISTANT, ChatRole.TOOL, ChatRole.ASSISTANT]
    [call] = messages[1].tool_calls  # forced: exactly one valid call
    assert call.tool_name == "multiply" and set(call.arguments) == {"a", "b"}
    assert all(isinstance(v, int) for v in call.arguments.values())
    [result] = messages[2].tool_call_results
    assert not result.error and result.origin == call
    assert result.result == str(multiply.invoke(**call.arguments))
    final = messages[3]
    assert not final.tool_calls and final.text.strip()
    assert result.result in final.text.replace(",", ""), final.text
