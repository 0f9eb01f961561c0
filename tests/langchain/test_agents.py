"""LangChain's create_agent on a real model: tools, and a structured response in the
provider's own format (the ensemble's profile says it has one). SmolLM2 (135M) on
llama.cpp answers: drafting under the answer's format, it writes valid calls and objects,
which is what these flows need; the default member's own answers are checked in
tests/integration/test_default_ensemble.py and the examples' tests."""

from __future__ import annotations

import pytest
from langchain.agents import create_agent
from langchain.agents.middleware import ModelRequest, wrap_model_call
from langchain.agents.structured_output import ProviderStrategy
from langchain_core.tools import tool
from loading import SMOLLM2
from pydantic import BaseModel

from specem_chain import SpecEMChatModel

pytestmark = pytest.mark.models

calls: list[dict] = []


@tool
def multiply(a: int, b: int) -> int:
    """Multiply two whole numbers."""
    calls.append({"a": a, "b": b})
    return a * b


class Product(BaseModel):
    """The result of a multiplication."""

    a: int
    b: int
    product: int


def llm(**settings: object) -> SpecEMChatModel:
    return SpecEMChatModel(members=[SMOLLM2], seed=0, max_tokens=80, temperature=0, **settings)


@wrap_model_call
def call_then_answer(request: ModelRequest, handler):
    """Steers small members as Guides -> Tools says: the first step must call a tool (they
    often describe a call in prose instead), and once a result is in, they answer (left to
    choose, the built-in pair calls the tool again until the recursion limit: measured at
    seed 0 under the default policy)."""
    answered = any(m.type == "tool" for m in request.messages)
    return handler(request.override(tool_choice="none" if answered else "any"))


def test_create_agent_calls_a_tool_and_answers():
    calls.clear()
    agent = create_agent(llm(), tools=[multiply], middleware=[call_then_answer])
    state = agent.invoke(
        {"messages": [("user", "What is 12 times 34? Use the tool.")]}, {"recursion_limit": 6}
    )
    assert calls and all(isinstance(c["a"], int) and isinstance(c["b"], int) for c in calls)
    assert [m.type for m in state["messages"]] == ["human", "ai", "tool", "ai"]
    answer = state["messages"][-1]
    assert answer.content.strip() and not answer.tool_calls


def test_the_profile_leads_create_agent_to_a_structured_answer_through_a_tool():
    """The profile says no native structured output, so create_agent asks for the answer
    as a forced call of a tool made from the schema. (With a real tool beside it, the
    default members keep calling the real tool until the recursion limit: measured at seed
    0; a stronger member pair is needed for that flow.)"""
    agent = create_agent(llm(), response_format=Product)
    state = agent.invoke({"messages": [("user", "Report a=6, b=7 and their product, 42.")]})
    assert isinstance(state["structured_response"], Product)
    assert state["messages"][-2].tool_calls[0]["name"] == "Product"


def test_a_provider_strategy_answers_in_its_json_schema():
    agent = create_agent(llm(), response_format=ProviderStrategy(Product))
    state = agent.invoke({"messages": [("user", "Report a=2, b=3 and their product.")]})
    assert isinstance(state["structured_response"], Product)
    assert state["messages"][-1].response_metadata["finish_reason"] == "stop"
