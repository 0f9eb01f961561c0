"""One member, two in-process backends: the same prompt, the same context tokens."""

from __future__ import annotations

import pytest
from loading import every_builtin, loaded

from specem_chain.engine.types import Message, Segment
from specem_chain.members import Member

pytestmark = pytest.mark.models

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the weather at a <location> & its 'units'.",
        "parameters": {
            "type": "object",
            "properties": {"location": {"type": "string"}, "units": {"type": "string"}},
            "required": ["location"],
        },
    },
}
"""Keys out of alphabetical order and characters Jinja's own ``tojson`` would escape."""

CONVERSATION: list[Message] = [
    {"role": "system", "content": "You are a weather assistant."},
    {"role": "user", "content": "What is the weather in Paris?"},
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "get_weather", "arguments": {"location": "Paris"}},
            }
        ],
    },
    {"role": "tool", "content": "sunny, 21 °C", "tool_call_id": "call_1", "name": "get_weather"},
    {"role": "user", "content": "And is that warm?"},
]

SEGMENTS = [" It is", " 21", " °C", ".\n", "\n", "That is", " warm", ":\n\n", "- yes", "!"]
"""Accepted segments whose joins merge in some tokenizers ("\\n" + "\\n", ":\\n\\n")."""


@pytest.mark.parametrize("name", every_builtin())
@pytest.mark.parametrize("tools", [[], [WEATHER]], ids=["no tools", "tools"])
def test_llamacpp_and_transformers_render_the_same_prompt(name, tools):
    llama = loaded(Member(source=name, backend="llamacpp"))
    hf = loaded(Member(source=name, backend="transformers"))
    conversation = CONVERSATION if tools else CONVERSATION[:2]
    rendered = llama.template.render(conversation, tools)
    assert rendered == hf.template.render(conversation, tools)
    if tools and llama.template.native_tools:  # the tools as transformers writes them
        assert '"description": "Get the weather at a <location> & its \'units\'."' in rendered
    assert llama.encode(rendered) == hf.encode(rendered)


@pytest.mark.parametrize("name", every_builtin())
async def test_contexts_after_accepted_segments_are_the_tokenizers_reading_of_the_text(name):
    """Each session's context is its tokenizer's reading of prompt and answer as one text,
    on both backends, whatever the joins between the accepted segments."""
    sessions = [
        await loaded(Member(source=name, backend=backend)).open(CONVERSATION[:2])
        for backend in ("llamacpp", "transformers")
    ]
    for segment in SEGMENTS:
        for session in sessions:
            await session.accept(Segment(segment))
        llama, hf = sessions
        assert llama.text == hf.text
        assert llama.ids == hf.ids == hf.backend.encode(hf.text)
    for session in sessions:
        await session.aclose()
