"""A real answer of three tiny members, so weights move and every round has rivals."""

from __future__ import annotations

import pytest
from langchain_core.messages import AIMessage

from specem_chain import SpecEMChatModel


@pytest.fixture(scope="module")
def tiny_answer(tiny_models) -> AIMessage:
    members = [str(tiny_models[name]) for name in ("llama", "qwen2", "plain")]
    llm = SpecEMChatModel(members=members, max_tokens=24, seed=7)
    return llm.invoke("How many clips did Natalia sell?")
