"""Real LlamaIndex flows on real weights (the docs' examples): a forced tool call,
structured prediction and an agent calling a tool on SmolLM2 (135M) on llama.cpp, which
writes valid calls drafting under the answer's format, and a query engine over a vector
index on the embedded default ensemble."""

from __future__ import annotations

import pytest
from llama_index.core.agent.workflow import AgentOutput, ToolCallResult
from llama_index.core.prompts import PromptTemplate
from llama_index.core.tools import FunctionTool
from llama_index.llms.specem import SpecEM
from pydantic import BaseModel

pytestmark = pytest.mark.models

QUESTION = "What is the weather like in Lisbon today?"
SMOLLM2 = ["smollm2"]


def weather_tool(calls: list[str]) -> FunctionTool:
    def get_weather(location: str) -> str:
        """Get the current weather at a location."""
        calls.append(location)
        return f"It is sunny and 24 degrees in {location}."

    return FunctionTool.from_defaults(get_weather)


def test_a_required_tool_call_is_a_valid_tool_selection():
    tool = weather_tool([])
    llm = SpecEM(members=SMOLLM2, seed=0, max_tokens=48)
    response = llm.chat_with_tools([tool], user_msg=QUESTION, tool_required=True)
    (selection,) = llm.get_tool_calls_from_response(response)
    assert selection.tool_name == "get_weather" and selection.tool_id.startswith("call_")
    tool.metadata.fn_schema.model_validate(selection.tool_kwargs)  # raises if invalid
    assert response.raw["finish_reason"] == "tool_calls"
    assert response.raw["specem"]["segments"] and response.additional_kwargs["total_tokens"]


async def test_predict_and_call_runs_the_forced_call():
    calls: list[str] = []
    result = await SpecEM(members=SMOLLM2, seed=1, max_tokens=48).apredict_and_call(
        [weather_tool(calls)], user_msg=QUESTION, tool_required=True
    )
    assert len(calls) == 1 and isinstance(calls[0], str) and calls[0]
    assert result.sources[0].tool_name == "get_weather" and not result.sources[0].is_error
    assert result.response == f"It is sunny and 24 degrees in {calls[0]}."


class Person(BaseModel):
    name: str
    age: int


def test_structured_predict_fills_the_model_through_a_forced_call():
    prompt = PromptTemplate("Extract the person: {text}")
    llm = SpecEM(members=SMOLLM2, seed=0, max_tokens=48)
    person = llm.structured_predict(Person, prompt, text="Maria is 34 years old.")
    assert isinstance(person, Person) and person.name


async def test_an_agent_calls_the_tool_then_answers():
    """FunctionAgent with one python tool (the docs' example). Its first step is forced to
    call the tool (``initial_tool_choice``, the agent API's way): the small members do not
    call it reliably on their own. Later steps are the ensemble's own choice (tool_choice
    "auto"), with the call and its result in the conversation; within three steps the run
    ends with an answer written without tools (as it does at seeds 0-2, checked)."""
    from llamaindex_agent import build_agent

    agent = build_agent(SpecEM(members=SMOLLM2, seed=0, max_tokens=48))
    handler = agent.run(QUESTION, max_iterations=3, early_stopping_method="generate")
    steps = [e async for e in handler.stream_events() if isinstance(e, AgentOutput)]
    result = await handler  # raises if the agent ran out of iterations
    first = steps[0].tool_calls[0]
    assert first.tool_name == "get_weather" and isinstance(first.tool_kwargs["location"], str)
    assert result.tool_calls and result.tool_calls[0].tool_kwargs == first.tool_kwargs
    for call in result.tool_calls:
        assert isinstance(call, ToolCallResult) and not call.tool_output.is_error
        location = call.tool_kwargs["location"]
        assert call.tool_output.content == f"It is sunny and 24 degrees in {location}."
    assert result.response.role == "assistant"


def test_the_query_engine_retrieves_the_right_document_and_answers():
    from llamaindex_rag import build_index, build_query_engine

    engine = build_query_engine(build_index(), SpecEM(seed=0, temperature=0, max_tokens=40))
    response = engine.query("How long is the warranty on the Zephyr-9 kettle?")
    source = response.source_nodes[0].node.get_content()
    assert "Zephyr-9" in source and "7-year warranty" in source
    assert str(response).strip()
