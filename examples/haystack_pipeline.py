"""The ensemble in Haystack: a pipeline (ChatPromptBuilder -> SpecEMChatGenerator) that
streams its answer, and an Agent that calls a Python function as a tool.

    pip install ./adapters/specem-haystack
    python examples/haystack_pipeline.py

Small members seldom call a tool by themselves, so the agent forces the call: it passes
``tool_choice="required"`` in ``generation_kwargs`` (written under a constraint, so the call
is always valid) and stops once the tool has run (``exit_conditions``). The generator then
answers from the tool's result with the tools hidden (``tool_choice="none"``).
"""

from __future__ import annotations

from haystack import Pipeline
from haystack.components.agents import Agent
from haystack.components.builders import ChatPromptBuilder
from haystack.components.generators.utils import print_streaming_chunk
from haystack.dataclasses import ChatMessage
from haystack.tools import tool
from haystack_integrations.components.generators.specem import SpecEMChatGenerator


# --8<-- [start:pipeline]
def build_pipeline(generator: SpecEMChatGenerator) -> Pipeline:
    """A prompt template feeding the ensemble; run it with ``{"prompt": {"question": ...}}``."""
    pipeline = Pipeline()
    template = [
        ChatMessage.from_system("You are a patient maths tutor. Answer in two sentences."),
        ChatMessage.from_user("{{ question }}"),
    ]
    pipeline.add_component("prompt", ChatPromptBuilder(template, required_variables="*"))
    pipeline.add_component("llm", generator)
    pipeline.connect("prompt.prompt", "llm.messages")
    return pipeline


# --8<-- [end:pipeline]


# --8<-- [start:agent]
@tool
def multiply(a: int, b: int) -> int:
    """Multiply two integers."""
    return a * b


def build_agent(generator: SpecEMChatGenerator) -> Agent:
    """An agent that stops once it has called ``multiply``."""
    return Agent(chat_generator=generator, tools=[multiply], exit_conditions=["multiply"])


def solve(agent: Agent, generator: SpecEMChatGenerator, question: str) -> list[ChatMessage]:
    """The agent's messages (the question, the forced call, the tool's result), then the
    generator's answer from the result."""
    forced = {"tool_choice": "required"}
    messages = agent.run([ChatMessage.from_user(question)], generation_kwargs=forced)["messages"]
    ask = ChatMessage.from_user("Answer my question in one sentence using that result.")
    answer = generator.run([*messages, ask], generation_kwargs={"tool_choice": "none"})
    return [*messages, *answer["replies"]]


# --8<-- [end:agent]


def main() -> None:
    generator = SpecEMChatGenerator(generation_kwargs={"max_tokens": 64, "seed": 0})
    pipeline = build_pipeline(generator)
    question = "What is 15% of 80, and how do you work it out?"
    result = pipeline.run(
        {"prompt": {"question": question}, "llm": {"streaming_callback": print_streaming_chunk}}
    )
    print("wins:", result["llm"]["replies"][0].meta["specem"]["wins"])

    for message in solve(build_agent(generator), generator, "What is 12 times 34?"):
        calls = [f"{c.tool_name}({c.arguments})" for c in message.tool_calls]
        results = [r.result for r in message.tool_call_results]
        print(f"[{message.role.value}]", message.text or calls or results)


if __name__ == "__main__":
    main()
