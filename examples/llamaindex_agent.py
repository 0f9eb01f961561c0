"""A LlamaIndex agent on the ensemble: FunctionAgent with one python tool. The first step is
forced to call the tool (``initial_tool_choice``); the call is written under a constraint
that keeps it a valid call of the tool's schema. The small built-in members tend to call
the tool again after its result instead of answering, so the run stops after three steps
and writes its answer without tools (``early_stopping_method="generate"``).

    ./run python examples/llamaindex_agent.py
"""

from __future__ import annotations

import asyncio

from llama_index.core.agent.workflow import FunctionAgent
from llama_index.core.llms import LLM
from llama_index.llms.specem import SpecEM


def get_weather(location: str) -> str:
    """Get the current weather at a location."""
    return f"It is sunny and 24 degrees in {location}."


def build_agent(llm: LLM) -> FunctionAgent:
    return FunctionAgent(
        tools=[get_weather],
        llm=llm,
        initial_tool_choice="get_weather",
        system_prompt="You answer questions about the weather. Use the tool.",
    )


async def main() -> None:
    agent = build_agent(SpecEM(seed=0, max_tokens=48))
    question = "What is the weather like in Lisbon today?"
    result = await agent.run(question, max_iterations=3, early_stopping_method="generate")
    for call in result.tool_calls:
        print(f"called {call.tool_name}({call.tool_kwargs}) -> {call.tool_output.content}")
    print(result.response.content)


if __name__ == "__main__":
    asyncio.run(main())
