"""A LangGraph graph with two nodes: the ensemble drafts an answer, then reviews it.

./run python examples/review_graph.py
"""

from __future__ import annotations

from typing import TypedDict

from langchain_core.language_models import BaseChatModel
from langgraph.graph import END, START, StateGraph

from specem_chain import SpecEMChatModel


class State(TypedDict, total=False):
    question: str
    draft: str
    review: str


def build_graph(llm: BaseChatModel):
    def draft(state: State) -> State:
        return {"draft": llm.invoke(state["question"]).text}

    def review(state: State) -> State:
        request = (
            f"Question: {state['question']}\n\nDraft answer: {state['draft']}\n\n"
            "Check the draft. Point out any mistake, then give the corrected final answer."
        )
        return {"review": llm.invoke(request).text}

    graph = StateGraph(State)
    graph.add_node("draft", draft)
    graph.add_node("review", review)
    graph.add_edge(START, "draft")
    graph.add_edge("draft", "review")
    graph.add_edge("review", END)
    return graph.compile()


if __name__ == "__main__":
    graph = build_graph(SpecEMChatModel(seed=0))
    question = "A train travels 60 km in 45 minutes. What is its speed in km/h?"
    result = graph.invoke({"question": question})
    print("Draft:\n" + result["draft"] + "\n\nReview:\n" + result["review"])
