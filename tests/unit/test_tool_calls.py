"""Tool calls in the answer text: Hermes <tool_call> blocks and bare JSON calls, streamed."""

from __future__ import annotations

import re
from itertools import pairwise

import pytest
from hypothesis import given
from hypothesis import strategies as st

from specem_chain.engine.tool_calls import (
    TOOL_CALL_CLOSE,
    TOOL_CALL_OPEN,
    ParsedCall,
    ToolCallSplitter,
    parse_call,
    split_tool_calls,
)

NAMES = {"get_weather"}
PARIS = '{"name": "get_weather", "arguments": {"location": "Paris"}}'


def block(body: str) -> str:
    return f"{TOOL_CALL_OPEN}\n{body}\n{TOOL_CALL_CLOSE}"


def joined(pieces: list) -> list:
    """Adjacent prose pieces joined, as split_tool_calls returns them."""
    out: list = []
    for piece in pieces:
        if isinstance(piece, str) and out and isinstance(out[-1], str):
            out[-1] += piece
        else:
            out.append(piece)
    return out


def only_call(text: str, names=NAMES) -> ParsedCall:
    (piece,) = split_tool_calls(text, names)
    assert isinstance(piece, ParsedCall)
    return piece


# --------------------------------------------------------------------------------------------
# Tagged blocks
# --------------------------------------------------------------------------------------------


def test_one_block():
    call = only_call(block(PARIS))
    assert (call.name, call.args, call.error, call.valid) == (
        "get_weather",
        {"location": "Paris"},
        None,
        True,
    )
    assert call.text == f"\n{PARIS}\n"


def test_two_blocks_with_prose_between():
    text = f"Let me check.\n{block(PARIS)}\nAnd also:\n\n{block(PARIS.replace('Paris', 'Rome'))}"
    first_prose, first, between, second = split_tool_calls(text, NAMES)
    assert (first_prose, between) == ("Let me check.", "And also:")
    assert (first.args, second.args) == ({"location": "Paris"}, {"location": "Rome"})


def test_whitespace_around_blocks_is_dropped_but_kept_inside_prose():
    text = f"  a  b \n\t{TOOL_CALL_OPEN}{PARIS}{TOOL_CALL_CLOSE} \n\n c\n d \n"
    assert joined(split_tool_calls(text, NAMES))[::2] == ["  a  b", "c\n d \n"]


@pytest.mark.parametrize("text", [f"{TOOL_CALL_OPEN}\n{PARIS}", f"Sure. {TOOL_CALL_OPEN}{PARIS}\n"])
def test_missing_closing_tag_is_parsed_at_finish(text):
    splitter = ToolCallSplitter(NAMES)
    assert all(isinstance(piece, str) for piece in splitter.feed(text))
    (call,) = splitter.finish()
    assert call.valid and call.args == {"location": "Paris"}


def test_unterminated_incomplete_block_is_invalid():
    call = only_call(f'{TOOL_CALL_OPEN}{{"name": "get_weather", "argu')
    assert not call.valid and call.error.startswith("not valid JSON")


def test_invalid_json_keeps_the_raw_text_and_a_readable_name():
    body = '{"name": "get_weather" "arguments": {}}'
    call = only_call(block(body))
    assert (call.name, call.args, call.text) == ("get_weather", None, f"\n{body}\n")
    cut = parse_call('{"name": "get_weather", "arguments": {"location": "Par')
    assert (cut.name, cut.args, cut.valid) == ("get_weather", None, False)
    assert parse_call('{"arguments": {}, "name": 3').name is None
    assert call.error.startswith("not valid JSON: Expecting ',' delimiter: line 2 column 24")


@pytest.mark.parametrize(
    ("body", "name", "error"),
    [
        ("[1, 2]", None, "not a JSON object"),
        ('{"arguments": {}}', None, 'no "name"'),
        ('{"name": "", "arguments": {}}', None, 'no "name"'),
        ('{"name": 3}', None, 'no "name"'),
        (
            '{"name": "get_weather", "arguments": [1]}',
            "get_weather",
            '"arguments" is not an object',
        ),
        ('{"name": "f", "parameters": "[1]"}', "f", '"parameters" is not an object'),
        ('{"name": "f", "arguments": "{bad"}', "f", '"arguments" is a string but not valid JSON'),
    ],
)
def test_invalid_calls_say_why(body, name, error):
    call = only_call(block(body))
    assert (call.valid, call.name, call.args) == (False, name, None)
    assert call.error.startswith(error)


@pytest.mark.parametrize(
    ("body", "args"),
    [
        ('{"name": "f", "arguments": "{\\"location\\": \\"Paris\\"}"}', {"location": "Paris"}),
        ('{"name": "f", "parameters": {"location": "Paris"}}', {"location": "Paris"}),
        ('{"name": "f"}', {}),
        ('{"name": "f", "arguments": {}}', {}),
        ('{"name": "f", "arguments": {"城市": "北京"}}', {"城市": "北京"}),
    ],
    ids=["double-encoded", "parameters", "no-arguments", "empty-arguments", "unicode"],
)
def test_valid_call_arguments(body, args):
    call = only_call(block(body), names=())  # any name is valid in a block
    assert (call.valid, call.name, call.args) == (True, "f", args)


# --------------------------------------------------------------------------------------------
# Bare JSON
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [PARIS, f"\n {PARIS}\n", f"```json\n{PARIS}\n```", f"```\n{PARIS}\n```\n", f"```json\n{PARIS}"],
)
def test_bare_call_with_a_known_name(text):
    splitter = ToolCallSplitter(NAMES)
    assert [splitter.feed(char) for char in text] == [[]] * len(text)  # held to the end
    (call,) = splitter.finish()
    assert (call.valid, call.text, call.args) == (True, PARIS, {"location": "Paris"})


@pytest.mark.parametrize(
    "text",
    [
        PARIS.replace("get_weather", "get_time"),
        f"```json\n{PARIS.replace('get_weather', 'get_time')}\n```",
        '{"name": "get_weather", "arguments": [1]}',
        '{"answer": 42}',
        f"{PARIS} Done.",
        "```python\nprint(1)\n```",
        "``",
    ],
)
def test_bare_text_that_is_no_known_call_is_prose(text):
    assert split_tool_calls(text, NAMES) == [text]


def test_tags_win_over_bare_json():
    assert split_tool_calls(f'{{"a": 1}}\n{block(PARIS)}', NAMES)[0] == '{"a": 1}'


# --------------------------------------------------------------------------------------------
# Streaming
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "released"),
    [
        ("Hello world", "Hello world"),
        ("Hello <tool", "Hello"),
        ("Hello \n", "Hello"),
        ("a <toolbox", "a <toolbox"),
        ("x <tool_call", "x"),
        ("<<", "<"),
        ("`x", "`x"),
        (" ``", ""),
    ],
)
def test_prose_is_released_before_finish(text, released):
    splitter = ToolCallSplitter(NAMES)
    assert "".join(splitter.feed(text)) == released
    assert released + "".join(splitter.finish()) == text


prose_text = st.lists(
    st.sampled_from(
        ["a", "b ", " ", "\n", "<", "<tool", "<tool_call", "</tool_call", "{", "`", "你好"]
    )
).map("".join)
call_body = st.one_of(
    st.sampled_from([PARIS, '{"name": "f"}', '{"name": 1}', "{", "", "<tool_call>", "</tool_call"]),
    prose_text,
)
space = st.sampled_from(["", " ", "\n", " \n\t"])


@st.composite
def answers(draw, closed=False):
    """Prose and blocks, the last block possibly unterminated, or a bare call."""
    if not closed and draw(st.booleans()):
        return draw(st.sampled_from([PARIS, f"```json\n{PARIS}\n```", "{}"]))
    parts = [draw(prose_text)]
    for _ in range(draw(st.integers(0, 3))):
        parts += [draw(space), TOOL_CALL_OPEN, draw(call_body), TOOL_CALL_CLOSE, draw(space)]
        parts.append(draw(prose_text))
    if not closed and parts[-1] == "" and draw(st.booleans()):
        parts[-2:] = [draw(space)]  # the turn ended right after the call
    return "".join(parts)


def feed_chunks(text: str, cuts: list[int]) -> list:
    splitter = ToolCallSplitter(NAMES)
    bounds = [0, *sorted(cut % (len(text) + 1) for cut in cuts), len(text)]
    pieces = [p for a, b in pairwise(bounds) for p in splitter.feed(text[a:b])]
    return pieces + splitter.finish()


@given(st.one_of(answers(), st.text()), st.lists(st.integers(0, 10_000), max_size=8))
def test_chunked_feeding_equals_whole_text(text, cuts):
    whole = split_tool_calls(text, NAMES)
    for pieces in feed_chunks(text, cuts), feed_chunks(text, list(range(len(text)))):
        assert all(piece for piece in pieces)  # no empty prose
        assert joined(pieces) == whole


@given(answers(closed=True))
def test_nothing_is_lost(text):
    def tight(s: str) -> str:
        return re.sub(r"\s*(</?tool_call>)\s*", r"\1", s)

    pieces = split_tool_calls(text, ())
    markup = [
        p if isinstance(p, str) else TOOL_CALL_OPEN + p.text + TOOL_CALL_CLOSE for p in pieces
    ]
    assert tight("".join(markup)) == tight(text)
    for before, after in pairwise(pieces):  # no blank padding around calls
        assert not (isinstance(before, str) and before[-1].isspace())
        assert not (isinstance(after, str) and after[0].isspace())
