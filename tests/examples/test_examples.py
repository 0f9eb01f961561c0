"""Every example runs offline on the embedded default ensemble."""

from __future__ import annotations

import io
import sys
from pathlib import Path

import pytest
from rich.console import Console

from specem_chain import SpecEMChatModel

sys.path.insert(0, str(Path(__file__).parents[2] / "examples"))

pytestmark = pytest.mark.models


@pytest.fixture(scope="module")
def llm() -> SpecEMChatModel:
    return SpecEMChatModel(seed=0, max_tokens=48)


def test_lcel_chain_returns_a_string(llm):
    from lcel_chain import build_chain

    answer = build_chain(llm).invoke({"question": "What is 15% of 80?"})
    assert isinstance(answer, str) and answer.strip()


def test_rag_retrieves_the_right_document_and_answers_from_it():
    from rag import build_rag_chain, build_retriever

    retriever = build_retriever()
    question = "How long is the warranty on the Zephyr-9 kettle?"
    top = retriever.invoke(question)[0].page_content
    assert "Zephyr-9" in top and "7-year warranty" in top
    answer = build_rag_chain(SpecEMChatModel(temperature=0, max_tokens=40), retriever).invoke(
        question
    )
    assert "7" in answer  # the warranty is stated only in the retrieved text


def test_review_graph_drafts_then_reviews(llm):
    from review_graph import build_graph

    updates = list(build_graph(llm).stream({"question": "What is 12 times 3?"}))
    assert [next(iter(u)) for u in updates] == ["draft", "review"]
    assert updates[0]["draft"]["draft"].strip() and updates[1]["review"]["review"].strip()


def test_stream_colours_prints_every_segment_in_its_members_colour(llm):
    from stream_colours import MemberColours

    buffer = io.StringIO()
    console = Console(file=buffer, force_terminal=True, record=True, width=200)
    handler = MemberColours(console)
    full = None
    for chunk in llm.stream("Why is the sky blue?", config={"callbacks": [handler]}):
        full = chunk if full is None else full + chunk
    members = {s["member"] for s in full.response_metadata["specem"]["segments"]}
    assert set(handler.colours) == members
    assert "\x1b[" in buffer.getvalue()  # coloured
    assert console.export_text().startswith(full.content)  # the whole answer, in order
    assert "members:" in buffer.getvalue()


def test_agent_tools_calculator_is_safe():
    from agent_tools import calculator

    assert calculator.invoke({"expression": "2*(3+4)"}) == "14"
    for unsafe in ("__import__('os')", "open('/etc/passwd')", "2 ** 10 ** 10", "x + 1"):
        assert calculator.invoke({"expression": unsafe}).startswith("Error:")


@pytest.mark.heavy  # an agent on the default member (a minute); tests/langchain/test_agents.py
# checks an agent's tool call and answer by default
def test_agent_tools_calls_the_calculator_then_answers_from_its_result():
    from agent_tools import build_agent, calculator
    from langchain_core.messages import AIMessage, ToolMessage

    agent = build_agent(SpecEMChatModel(seed=0, max_tokens=64))
    question = "What is 1234 * 56? Use the calculator."
    messages = agent.invoke({"messages": [("user", question)]})["messages"]
    replies = [m for m in messages if isinstance(m, AIMessage)]
    [call] = replies[0].tool_calls  # forced by tool_choice="any": exactly one valid call
    assert call["name"] == "calculator"
    assert isinstance(call["args"], dict) and isinstance(call["args"].get("expression"), str)
    assert calculator.invoke(call["args"]) == "69104"
    results = [m for m in messages if isinstance(m, ToolMessage)]
    assert [(r.name, r.content, r.tool_call_id) for r in results] == [
        ("calculator", "69104", call["id"])
    ]
    final = replies[-1]
    assert final is messages[-1] and not final.tool_calls
    assert "69104" in final.text or "69,104" in final.text, final.text


def test_task_feedback_carries_the_weights_to_the_next_run(tiny_models, tmp_path):
    from task_feedback import answer_task

    from specem_chain import Feedback

    members = [str(tiny_models["llama"]), str(tiny_models["qwen2"])]
    store = tmp_path / "tasks.db"
    first = answer_task(["What is 2 + 3?", "Name a colour."], store, members, max_tokens=8)
    assert len(first) == 2 and store.exists()
    assert Feedback.open(store, task="maths").answers == 2
    answer_task(["What is 4 + 4?"], store, members, max_tokens=8)
    assert Feedback.open(store, task="maths").answers == 3  # the second run went on
