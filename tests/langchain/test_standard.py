"""LangChain's own standard test suites, run against the embedded default ensemble.

Only capability flags are set: the default members get no tools, structured output, JSON
mode or multimodal input here (tool calling is its own issue). Nothing else is skipped or
overridden.
"""

from __future__ import annotations

import pytest
from langchain_tests.integration_tests import ChatModelIntegrationTests
from langchain_tests.unit_tests import ChatModelUnitTests

from specem_chain import SpecEMChatModel


class Capabilities:
    @property
    def chat_model_class(self) -> type[SpecEMChatModel]:
        return SpecEMChatModel

    @property
    def chat_model_params(self) -> dict:
        return {"seed": 0}

    @property
    def has_tool_calling(self) -> bool:
        return False

    @property
    def has_structured_output(self) -> bool:
        return False

    @property
    def supports_json_mode(self) -> bool:
        return False

    @property
    def supports_image_inputs(self) -> bool:
        return False


class TestSpecEMChatModelUnit(Capabilities, ChatModelUnitTests):
    pass


@pytest.mark.models
class TestSpecEMChatModelIntegration(Capabilities, ChatModelIntegrationTests):
    @property
    def chat_model_params(self) -> dict:
        return {"seed": 0, "max_tokens": 24}  # short answers keep the suite fast
