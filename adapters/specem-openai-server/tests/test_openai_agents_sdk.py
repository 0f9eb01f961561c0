"""The OpenAI Agents SDK (its Chat Completions model, tracing off) against the running
server: an agent that answers, plain and streamed, on tiny members; a function tool on the
default ensemble."""

from __future__ import annotations

import asyncio
import json

import pytest
from agents import Agent, ModelSettings, Runner, ToolCallItem
from openai_server_harness import serve
from specem_chain import RequestSettings
from specem_chain.models import DEFAULT_MEMBERS


def test_an_agent_answers_through_the_server(tiny_server):
    from openai_agents import ask

    answer = ask(f"{tiny_server}/v1", "How many clips did Natalia sell?")
    assert isinstance(answer, str) and answer


def test_a_streamed_run_gets_the_answer_one_round_at_a_time(tiny_server):
    from openai_agents import specem_model

    agent = Agent(
        name="assistant",
        model=specem_model(f"{tiny_server}/v1"),
        model_settings=ModelSettings(max_tokens=16, extra_args={"seed": 2}),
    )

    async def run() -> tuple[list[str], str, str]:
        result = Runner.run_streamed(agent, "How many clips did Natalia sell?")
        deltas = [
            event.data.delta
            async for event in result.stream_events()
            if event.type == "raw_response_event"
            and event.data.type == "response.output_text.delta"
        ]
        plain = await Runner.run(agent, "How many clips did Natalia sell?")
        return deltas, result.final_output, plain.final_output

    deltas, streamed, plain = asyncio.run(run())  # one loop: the client's pool lives in it
    assert len(deltas) >= 2 and "".join(deltas) == streamed == plain


@pytest.mark.models
def test_an_agent_calls_a_function_tool_and_another_answers_from_its_result():
    """The first agent is forced to call (tool_choice="required"): the small members seldom
    call a tool by themselves."""
    from openai_agents import weather_report

    # the writer copies the report's numbers: no repetition penalty (Guides -> Tuning)
    with serve(DEFAULT_MEMBERS, RequestSettings(repeat_penalty=1.0)) as base:
        called, answer = weather_report(f"{base}/v1", "What is the weather like in Lisbon?")
    calls = [item.raw_item for item in called.new_items if isinstance(item, ToolCallItem)]
    assert [call.name for call in calls] == ["get_weather"]
    city = json.loads(calls[0].arguments)["city"]
    assert called.final_output == f"Sunny and 24 degrees in {city}."  # the tool ran
    assert "24" in answer  # the second agent read the tool's result
