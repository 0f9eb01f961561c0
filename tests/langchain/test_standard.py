"""LangChain's own standard test suites, run against the embedded default ensemble.

Only capability flags are set: tool calling (forced with ``tool_choice="any"``), structured
output and JSON mode are on; multimodal input is off (the members read text only). Nothing
else is skipped or overridden.
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
        return True

    @property
    def has_tool_choice(self) -> bool:
        return True

    @property
    def tool_choice_value(self) -> str:
        return "any"

    @property
    def has_structured_output(self) -> bool:
        return True

    @property
    def supports_json_mode(self) -> bool:
        return True

    @property
    def supports_image_inputs(self) -> bool:
        return False


class TestSpecEMChatModelUnit(Capabilities, ChatModelUnitTests):
    pass


@pytest.mark.models
class TestSpecEMChatModelIntegration(Capabilities, ChatModelIntegrationTests):
    @property
    def chat_model_params(self) -> dict:
        # Short answers keep the suite fast; the longest tool call it asks for takes ~80 tokens.
        return {"seed": 0, "max_tokens": 96}
