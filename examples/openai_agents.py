"""An OpenAI Agents SDK agent on a running `specem serve`, through the SDK's Chat
Completions model.

./run specem serve --port 8000 --repeat-penalty 1 &   # the writer copies the tool's numbers
./run python examples/openai_agents.py http://127.0.0.1:8000/v1
"""

from __future__ import annotations

import sys

from agents import (
    Agent,
    ModelSettings,
    OpenAIChatCompletionsModel,
    Runner,
    RunResult,
    function_tool,
    set_tracing_disabled,
)
from openai import AsyncOpenAI

set_tracing_disabled(True)  # the SDK sends traces to OpenAI otherwise

# ModelSettings has no seed: extra_args adds it to the request
SETTINGS = ModelSettings(max_tokens=48, extra_args={"seed": 0})


def specem_model(base_url: str) -> OpenAIChatCompletionsModel:
    """The ensemble as the SDK's model; the server takes any model name and API key."""
    client = AsyncOpenAI(base_url=base_url, api_key="unused")
    return OpenAIChatCompletionsModel(model="specem", openai_client=client)


def ask(base_url: str, question: str) -> str:
    agent = Agent(
        name="assistant",
        instructions="Answer in one short sentence.",
        model=specem_model(base_url),
        model_settings=SETTINGS,
    )
    return Runner.run_sync(agent, question).final_output


@function_tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"Sunny and 24 degrees in {city}."


def weather_report(base_url: str, question: str) -> tuple[RunResult, str]:
    """One agent calls the tool, a second answers from its result. Small members seldom
    call a tool by themselves, so the first must call (``tool_choice="required"``) and
    stops at the tool's result; the second reads that result as text (given the call and
    its result as turns, small members tend to write another call)."""
    caller = Agent(
        name="weather",
        instructions="Look up the weather with the get_weather tool.",
        model=specem_model(base_url),
        tools=[get_weather],
        model_settings=ModelSettings(tool_choice="required", max_tokens=48, extra_args={"seed": 0}),
        tool_use_behavior="stop_on_first_tool",
    )
    called = Runner.run_sync(caller, question)
    writer = Agent(
        name="writer",
        instructions="Answer the question from the weather report, in one sentence.",
        model=specem_model(base_url),
        model_settings=SETTINGS,
    )
    report = f"{question}\nThe weather report: {called.final_output}"
    return called, Runner.run_sync(writer, report).final_output


if __name__ == "__main__":
    url = sys.argv[1] if len(sys.argv) > 1 else "http://127.0.0.1:8000/v1"
    print(ask(url, "Why is the sky blue?"))
    print(weather_report(url, "What is the weather like in Lisbon?")[1])
