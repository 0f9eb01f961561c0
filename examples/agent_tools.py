"""A tool-using LangGraph agent: the ensemble calls a calculator or a fact lookup, reads the
result, and answers from it.

    ./run python examples/agent_tools.py
    ./run python examples/agent_tools.py "How long is the warranty on the Zephyr-9 kettle?"

The graph is the usual agent loop (agent -> tools -> agent), built by hand from
``StateGraph``, ``ToolNode`` and ``tools_condition``. Small models are steered with
``tool_choice``: while no tool result is in the conversation the agent must call a tool
(``"any"``, written under a constraint, so the call is always valid), and once a result has
arrived the tools are hidden (``"none"``) and a short request to answer from the result
is added to the model's input (not to the graph's state), so the agent answers in prose.
Without that request the smallest members tend to repeat the call as text.
"""

from __future__ import annotations

import ast
import math
import operator
import sys

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition

from specem_chain import SpecEMChatModel

SYSTEM = (
    "You are a helpful assistant with two tools: calculator for arithmetic and lookup for "
    "product facts. Use a tool to get the answer, then reply in one short sentence that "
    "states the tool's result."
)
ANSWER_NOW = "Now answer my question in one sentence using that result."

BINARY = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.Pow: operator.pow,
}
MAX_DIGITS = 300  # a power beyond that is refused: 9 ** 9 ** 9 would take ages to compute

FACTS = {
    "zephyr-9 kettle": "The Zephyr-9 kettle holds 1.7 litres and has a 7-year warranty.",
    "aurora desk lamp": "The Aurora desk lamp has three colour temperatures and a 2-year warranty.",
    "nimbus umbrella": "The Nimbus umbrella folds to 24 cm and resists winds of up to 90 km/h.",
    "shipping": "Orders over 50 euros ship free within the EU; returns are free for 30 days.",
}


def _evaluate(node: ast.AST) -> int | float:
    if isinstance(node, ast.Expression):
        return _evaluate(node.body)
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_evaluate(node.operand)
    if isinstance(node, ast.BinOp) and type(node.op) in BINARY:
        left, right = _evaluate(node.left), _evaluate(node.right)
        digits = right * math.log10(abs(left)) if abs(left) > 1 else 0
        if isinstance(node.op, ast.Pow) and digits >= MAX_DIGITS:
            raise ArithmeticError(f"the power has more than {MAX_DIGITS} digits")
        value = BINARY[type(node.op)](left, right)
        if isinstance(value, complex):  # (-8) ** 0.5
            raise ArithmeticError(f"{ast.unparse(node)} is not a real number")
        return value
    raise ValueError(
        f"{ast.unparse(node)!r} is not allowed; use only numbers, + - * / **, parentheses "
        "and unary minus"
    )


@tool
def calculator(expression: str) -> str:
    """Evaluate an arithmetic expression such as "1234 * 56" or "(2 + 3) ** 2".

    Numbers, + - * / **, parentheses and unary minus only.
    """
    try:
        value = _evaluate(ast.parse(expression.strip(), mode="eval"))
    except SyntaxError:
        return f"Error: {expression!r} is not an arithmetic expression."
    except ZeroDivisionError:
        return "Error: division by zero."
    except (ValueError, ArithmeticError) as error:  # OverflowError is an ArithmeticError
        return f"Error: {error}."
    if isinstance(value, float) and not math.isfinite(value):
        return "Error: the result is too large."
    if isinstance(value, int) and abs(value) >= 10**MAX_DIGITS:  # say 10 ** 200 * 10 ** 200
        return f"Error: the result has more than {MAX_DIGITS} digits."
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        value = int(value)  # 10 / 2 is 5, not 5.0
    return str(value)


@tool
def lookup(topic: str) -> str:
    """Look up a fact about one of our products (e.g. "Zephyr-9 kettle") or about shipping."""
    wanted = topic.strip().lower()
    for name, fact in FACTS.items():
        if wanted and (wanted in name or name in wanted):
            return fact
    words = set(wanted.replace("-", " ").split())  # else the entry sharing the most words
    shared = {name: len(words & set(name.replace("-", " ").split())) for name in FACTS}
    best = max(shared, key=shared.get)
    if shared[best]:
        return FACTS[best]
    return f"No entry for {topic!r}. Known topics: {', '.join(FACTS)}."


TOOLS = [calculator, lookup]


def build_agent(llm: BaseChatModel):
    """The compiled agent graph; invoke it with ``{"messages": [("user", question)]}``."""
    must_call = llm.bind_tools(TOOLS, tool_choice="any")
    must_answer = llm.bind_tools(TOOLS, tool_choice="none")

    def agent(state: MessagesState) -> MessagesState:
        messages = [SystemMessage(SYSTEM), *state["messages"]]
        if any(isinstance(m, ToolMessage) for m in messages):
            answer = must_answer.invoke([*messages, HumanMessage(ANSWER_NOW)])
        else:
            answer = must_call.invoke(messages)
        return {"messages": [answer]}

    graph = StateGraph(MessagesState)
    graph.add_node("agent", agent)
    graph.add_node("tools", ToolNode(TOOLS))
    graph.add_edge(START, "agent")
    graph.add_conditional_edges("agent", tools_condition)  # to "tools" or to the end
    graph.add_edge("tools", "agent")
    return graph.compile()


def show(message) -> None:
    if isinstance(message, AIMessage) and message.tool_calls:
        for call in message.tool_calls:
            print(f"[agent] calls {call['name']}({call['args']})")
    elif isinstance(message, ToolMessage):
        print(f"[{message.name}] {message.content}")
    elif isinstance(message, AIMessage):
        print(f"[agent] {message.text}")


def main() -> None:
    question = sys.argv[1] if len(sys.argv) > 1 else "What is 1234 * 56? Use the calculator."
    print(f"[user] {question}")
    agent = build_agent(SpecEMChatModel(seed=0, max_tokens=64))
    for update in agent.stream({"messages": [("user", question)]}, stream_mode="updates"):
        for node in update.values():
            for message in node["messages"]:
                show(message)


if __name__ == "__main__":
    main()
