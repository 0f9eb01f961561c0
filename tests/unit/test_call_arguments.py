"""merge_call: one call's settings and answer options, the same for every front end."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from specem_chain.answer_formats import ANSWER_OPTIONS, AnswerOptions
from specem_chain.engine.tool_calls import TOOL_CALL_CLOSE
from specem_chain.engine.types import tool_call
from specem_chain.errors import UnknownArgumentError
from specem_chain.request import CALL_ARGUMENTS, RequestSettings, merge_call

WEATHER = {"type": "function", "function": {"name": "weather", "parameters": {}}}


def test_a_call_overrides_the_defaults_it_names_and_keeps_the_rest():
    defaults = RequestSettings(window=4, seed=1, temperature=0.3)
    settings, options = merge_call(defaults, {"seed": 9, "max_tokens": 7})
    assert (settings.window, settings.seed, settings.max_tokens) == (4, 9, 7)
    assert settings.temperature == 0.3 and options == AnswerOptions()


def test_the_front_ends_stops_come_before_the_calls():
    _, options = merge_call(RequestSettings(), {"stop": "\n\n"}, stop=["END"])
    assert options.stop == ("END", "\n\n")
    assert merge_call(RequestSettings(), {}, stop=None)[1].stop == ()


def test_every_answer_option_is_a_call_argument():
    assert set(ANSWER_OPTIONS) == {
        "stop",
        "tools",
        "tool_choice",
        "response_format",
        "parallel_tool_calls",
        "strict",
    }
    assert set(CALL_ARGUMENTS) == {*RequestSettings.model_fields, *ANSWER_OPTIONS}


def test_one_call_at_most_ends_the_answer_where_the_first_call_closes():
    _, options = merge_call(
        RequestSettings(), {"tools": [WEATHER], "parallel_tool_calls": False, "strict": True}
    )
    assert options.format.stop == (TOOL_CALL_CLOSE,)
    assert options.format.tools == [WEATHER]


def test_a_text_response_format_is_the_free_answer():
    assert AnswerOptions(response_format={"type": "text"}).format.answer is None


def test_an_unknown_argument_is_named_with_the_known_ones_and_the_front_ends_word():
    with pytest.raises(UnknownArgumentError) as caught:
        merge_call(RequestSettings(), {"top_k": 3}, what="generation_kwargs", also=("members",))
    message = str(caught.value)
    assert message.startswith("unsupported generation_kwargs ['top_k']; known: members, window")
    assert isinstance(caught.value, TypeError) and isinstance(caught.value, ValueError)


@pytest.mark.parametrize(
    ("arguments", "error", "match"),
    [
        ({"window": 0}, ValidationError, "window"),
        ({"tool_choice": "required"}, ValueError, "no tools are bound"),
        ({"response_format": {"type": "xml"}}, ValueError, "response_format="),
        ({"tools": [{"name": "f"}]}, ValueError, "not an OpenAI function tool"),
    ],
)
def test_bad_values_are_named(arguments, error, match):
    with pytest.raises(error, match=match):
        merge_call(RequestSettings(), arguments)


def test_an_earlier_calls_arguments_are_read_from_json_text_or_taken_as_they_are():
    expected = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": {"a": 1}}}
    assert tool_call("c1", "f", '{"a": 1}') == expected
    assert tool_call("c1", "f", {"a": 1}) == expected
    assert (
        tool_call(None, "f", None)["id"] == ""
        and tool_call(None, "f", "")["function"]["arguments"] == {}
    )
    with pytest.raises(ValueError, match="'c1' are not a JSON object"):
        tool_call("c1", "f", "[1, 2]")
