"""Candidate constraints: the JSON prefix scanner, JSON-object answers and tool-call answers."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from specem_chain.engine.constraints import (
    AnswerFormat,
    EitherAnswer,
    JsonObjectAnswer,
    JsonScan,
    LastKey,
    ToolCallAnswer,
    fits_schema,
    json_fits,
    scan_json,
)
from specem_chain.engine.types import Draft, Segment

scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=5)
)
keys = st.text(max_size=4)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(keys, inner, max_size=3),
    max_leaves=8,
)
objects = st.dictionaries(keys, values, max_size=3)


def dumps(value) -> st.SearchStrategy[str]:
    return st.builds(
        json.dumps, value, ensure_ascii=st.booleans(), indent=st.sampled_from([None, 2])
    )


documents = dumps(st.lists(values, max_size=3) | objects)
object_documents = dumps(objects)
jsonish = st.text(alphabet='{}[]":,0123456789.eE+-tfrnulas \\', max_size=12)
NAMES = ("get_weather", "search")
ANY_ARGUMENTS: dict[str, dict] = {name: {} for name in NAMES}  # schemas: any arguments
calls = st.fixed_dictionaries({"name": st.sampled_from(NAMES), "arguments": objects})
blocks = dumps(calls).map(lambda call: f"<tool_call>\n{call}\n</tool_call>")


@st.composite
def pieces(draw, text: st.SearchStrategy[str]) -> list[str]:
    """A text split at random points into non-empty pieces."""
    whole = draw(text)
    cuts = sorted(draw(st.sets(st.integers(1, len(whole) - 1), max_size=5)))
    return [whole[a:b] for a, b in zip([0, *cuts], [*cuts, len(whole)])]


def rounds(constraint, texts: list[str], finish: bool) -> list[Segment | None]:
    """What ``constraint`` makes of the texts fed round by round (the last one finished if
    ``finish``), each round after the text accepted so far."""
    answer, accepted = "", []
    for i, text in enumerate(texts):
        segment = constraint(answer, Segment(text, finish and i == len(texts) - 1))
        accepted.append(segment)
        answer += segment.text if segment else ""
    return accepted


# --------------------------------------------------------------------------------------------
# scan_json
# --------------------------------------------------------------------------------------------


@given(doc=documents, lead=st.sampled_from(["", " \n\t\r"]), junk=st.text(max_size=5))
def test_every_prefix_of_a_document_is_valid(doc, lead, junk):
    doc = lead + doc
    for k in range(len(doc)):
        assert (scan_json(doc[:k]).valid, scan_json(doc[:k]).end) == (True, None), doc[:k]
    assert scan_json(doc) == scan_json(doc + junk) == JsonScan(True, len(doc))


@st.composite
def near_json(draw) -> str:
    """Random JSON-ish text, or a document's prefix followed by such text."""
    doc = draw(documents)
    start = doc[: draw(st.integers(0, len(doc)))] if draw(st.booleans()) else ""
    return start + draw(jsonish)


def parses(text: str) -> bool:
    try:
        return isinstance(json.loads(text), dict | list)
    except ValueError:
        return False


@given(text=near_json(), more=jsonish)
def test_scan_agrees_with_json_loads(text, more):
    scan = scan_json(text)
    if scan.end is not None:
        assert scan.valid and parses(text[: scan.end])
    if parses(text):
        assert scan == JsonScan(True, len(text.rstrip(" \t\n\r")))
    if not scan.valid:  # a prefix that cannot be extended stays invalid
        assert not scan_json(text + more).valid and not parses(text + more)


@pytest.mark.parametrize(
    "text",
    ['{"a" 1', "[1,]", '{"a":1,}', "{,", "[01", "[00", '{"a": tx', '["\x01"]', '["\\x"]',
     '["\\u123"]', '["\\u12g', "{1:2}", "1", ' "a"', "true", "[1.]", "[1e+]", "[-]", "[.5]",
     "[+1]", "[1 2]", "[}", "[1}", '{"a":1]', '{"a"}', "x"],
)  # fmt: skip
def test_invalid_prefixes(text):
    assert not scan_json(text).valid


@pytest.mark.parametrize(
    "text",
    ['["\\u12', "[-", "[1.", "[1e", "[1e+", "[tr", "[nul", '{"a": fals', " ", '{"a'],
)
def test_incomplete_prefixes(text):
    assert (scan_json(text).valid, scan_json(text).end) == (True, None)


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ('{"se', LastKey((), "se", closed=False)),
        ('{"setup"', LastKey((), "setup", closed=True)),
        ('{"setup": "Why', LastKey((), "setup", closed=True)),
        ('{"a": [{"b": 1, "c', LastKey(("a", None), "c", closed=False)),
        ('{"a": {"b": 1}', LastKey((), "a", closed=True)),
        ('{"a": {"b": 1}, ', LastKey((), "", closed=False)),
        ("[1, ", None),
        ("{", None),
    ],
)
def test_the_key_being_written(text, key):
    assert scan_json(text).key == key


# --------------------------------------------------------------------------------------------
# JsonObjectAnswer
# --------------------------------------------------------------------------------------------


@given(texts=pieces(object_documents))
def test_object_is_accepted_round_by_round_and_finishes(texts):
    expected = [Segment(text) for text in texts[:-1]] + [Segment(texts[-1], True)]
    assert rounds(JsonObjectAnswer(), texts, finish=False) == expected


@given(doc=object_documents, junk=st.text(min_size=1, max_size=8))
def test_text_after_the_object_is_cut(doc, junk):
    assert JsonObjectAnswer()("", Segment(doc + junk)) == Segment(doc, True)
    assert JsonObjectAnswer()(doc, Segment(junk)) == Segment("", True)


@given(doc=object_documents, data=st.data())
def test_finishing_inside_the_object_is_rejected(doc, data):
    k = data.draw(st.integers(0, len(doc) - 1))
    assert JsonObjectAnswer()(doc[:k], Segment(doc[k:-1], True)) is None


@pytest.mark.parametrize("text", ["[1]", "[", ' "a"', "x{}"])
def test_object_answer_rejects_other_documents(text):
    assert JsonObjectAnswer()("", Segment(text)) is None


# --------------------------------------------------------------------------------------------
# ToolCallAnswer
# --------------------------------------------------------------------------------------------


@given(texts=pieces(st.lists(blocks, min_size=1, max_size=2).map("\n".join)))
def test_tool_calls_are_accepted_round_by_round(texts):
    assert rounds(ToolCallAnswer(ANY_ARGUMENTS), texts, finish=True) == [
        Segment(text, i == len(texts) - 1) for i, text in enumerate(texts)
    ]


@given(block=blocks, prose=st.sampled_from(["\nDone.", " I called it.", "\n\n<tool_calls>"]))
def test_prose_after_a_call_is_cut(block, prose):
    assert ToolCallAnswer(ANY_ARGUMENTS)("", Segment(block + prose)) == Segment(block, True)
    assert ToolCallAnswer(ANY_ARGUMENTS)(block, Segment(prose)) == Segment("", True)


@given(call=dumps(calls), more=st.sampled_from(['\n{"name": "search"', " Done.", "\n\n<tool"]))
def test_text_after_a_call_that_is_not_its_closing_tag_is_cut(call, more):
    # a member that writes a second call inside the first call's tags (Qwen2.5-Coder 1.5B
    # did, asked for one call): the answer ends after the first, which a reader can parse
    block = f"<tool_call>\n{call}"
    assert ToolCallAnswer(ANY_ARGUMENTS)("", Segment(block + more)) == Segment(block, True)
    assert ToolCallAnswer(ANY_ARGUMENTS)(block + "\n", Segment(more.lstrip())) == Segment("", True)


@given(block=blocks, data=st.data())
def test_finishing_inside_a_call_is_rejected(block, data):
    end = block.rindex("}") + 1  # where the call's object is complete
    k = data.draw(st.integers(0, end - 1))
    assert ToolCallAnswer(ANY_ARGUMENTS)("", Segment(block[:k], True)) is None


@given(block=blocks, data=st.data())
def test_a_complete_call_may_end_the_turn_before_its_closing_tag(block, data):
    k = data.draw(st.integers(block.rindex("}") + 1, len(block)))
    assert ToolCallAnswer(ANY_ARGUMENTS)("", Segment(block[:k], True)) == Segment(block[:k], True)


@pytest.mark.parametrize(
    ("text", "accepted"),
    [
        ('<tool_call>{"name": "sea', True),
        ('<tool_call>{"name": "search", "arguments": 3', True),
        ('<tool_call>{"name": "x', False),
        ('<tool_call>{"name": "s\\"', False),  # an escape in a name no tool has
        ('<tool_call>{"name": "sea\\u0072', False),
        ('<tool_call>{"name": "get"', False),
        ('<tool_call>{"name": "search_all', False),
        ('<tool_call>{"name": "search", "arguments": 3}', False),
        ('<tool_call>{"arguments": {}, "name": "other"}', False),
        ("<tool_call>[", False),
        ('<tool_call>{"name": "search", "arguments": {}}</tool', True),
        ('<tool_call>{"name": "search", "arguments": {}}</tool_cal>', False),
        ("Sure! <tool_call>", False),
        ("Sure", False),
    ],
)
def test_tool_call_syntax(text, accepted):
    assert (ToolCallAnswer(ANY_ARGUMENTS)("", Segment(text)) == Segment(text)) is accepted


MAGIC = {
    "type": "object",
    "properties": {
        "input": {"type": "integer"},
        "note": {"anyOf": [{"type": "string"}, {"type": "null"}]},
    },
    "required": ["input"],
}


@pytest.mark.parametrize(
    ("value", "open_path", "fits"),
    [
        ({"input": 3}, None, True),
        ({"input": 3, "note": None}, None, True),
        ({}, (), True),
        ({}, None, False),  # a required key is missing
        ({"input": {}}, (), False),  # the schema's own text echoed as the value
        ({"type": "integer"}, (), False),  # a key the schema does not name
        ({"input": True}, (), False),  # a boolean is not an integer
        ({"input": 3, "note": 4}, (), False),
        ([], (), False),
    ],
)
def test_fits_schema(value, open_path, fits):
    assert fits_schema(value, MAGIC, open_path=open_path) is fits


CALL = {"type": "object", "properties": {"name": {}, "arguments": MAGIC}}


@pytest.mark.parametrize(
    ("text", "fits"),
    [
        ('{"name": "f", "arguments": {', True),  # the arguments are still open
        ('{"name": "f", "arguments": {}', False),  # closed without the required "input"
        ('{"name": "f", "arguments": {"input": 3}', True),
        ('{"name": "f", "arguments": {"input": 3}}', True),
    ],
)
def test_an_inner_object_closed_without_a_required_key_does_not_fit(text, fits):
    assert json_fits(text, scan_json(text), CALL) is fits


def test_additional_properties_and_unknown_schemas_pass():
    assert fits_schema(
        {"x": 1}, {**MAGIC, "required": [], "additionalProperties": True}, open_path=None
    )
    assert fits_schema({"x": [1]}, {"properties": {"x": {"$ref": "#/$defs/X"}}}, open_path=None)


@pytest.mark.parametrize(
    ("text", "accepted"),
    [
        ('<tool_call>{"name": "magic", "arguments": {"input": 3', True),
        ('<tool_call>{"name": "magic", "arguments": {"input": 3.', False),  # an integer
        ('<tool_call>{"name": "magic", "arguments": {"input": 3e', False),
        ('<tool_call>{"name": "magic", "arguments": {"input": -', True),
        ('<tool_call>{"name": "magic", "arguments": {"input": true', False),
        ('<tool_call>{"name": "magic", "arguments": {"input": 3, "note": "3.', True),
        ('<tool_call>{"name": "magic", "arguments": {"input": {"type"', False),
        ('<tool_call>{"name": "magic", "arguments": {"type": "function"', False),
        ('<tool_call>{"name": "magic", "arguments": {}}', False),
        ('<tool_call>{"name": "magic", "arguments": {"input": 3, "no', True),
        ('<tool_call>{"name": "magic", "arguments": {"input": 3, "note": null,', False),
        ('<tool_call>{"name": "magic", "arguments": {"input": 3, "inp', False),
        ('<tool_call>{"name": "magic", "arguments": {"note": "a</tool_call>', False),
        ('<tool_call>{"name": "magic", "arguments": {"input": 3}}\n</tool_call>', True),
    ],
)
def test_tool_call_arguments_fit_the_tool_schema(text, accepted):
    assert (ToolCallAnswer({"magic": MAGIC})("", Segment(text)) == Segment(text)) is accepted


def test_json_answer_fits_its_schema():
    answer = JsonObjectAnswer(MAGIC)
    assert answer("{", Segment('"input": 3')) == Segment('"input": 3')
    assert answer("{", Segment('"properties": {')) is None
    assert answer("{", Segment("}", True)) is None  # closes without the required key
    assert answer('{"input": 3', Segment("} and more")) == Segment("}", True)


# -- closing an answer whose members went astray ---------------------------------------------

SCHEMA = {
    "type": "object",
    "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
    "required": ["a", "b"],
    "additionalProperties": False,
}


@pytest.mark.parametrize(
    ("answer", "closing"),
    [
        ('{"a": 1, "b": 2', "}"),
        ('{"a": 1, "b": [2', None),  # b must be an integer, not an array
        ('{"a": 1', None),  # b is required
        ('{"a": 1, "b": 2, ', None),  # a key must follow a comma
        ('{"a": 1, "b": "2', None),  # inside a string
    ],
)
def test_a_json_answer_closes_once_it_holds_what_its_schema_requires(answer, closing):
    assert JsonObjectAnswer(SCHEMA).closing(answer) == closing


def test_a_tool_call_closes_with_its_brackets_and_tag():
    calls = ToolCallAnswer({"f": SCHEMA})
    answer = '<tool_call>\n{"name": "f", "arguments": {"a": 1, "b": 2'
    assert calls.closing(answer) == "}}\n</tool_call>"
    assert calls.closing(answer + "}}\n</tool_call>") is None  # nothing is open
    assert calls.closing('<tool_call>\n{"name": "f", "arguments": {"a": 1') is None


def test_either_format_closes_the_one_the_answer_began():
    either = EitherAnswer((ToolCallAnswer({"f": SCHEMA}), JsonObjectAnswer(SCHEMA)))
    assert either.closing('{"a": 1, "b": 2') == "}"
    assert either.closing('<tool_call>\n{"name": "f", "arguments": {"a": 1, "b": 2') == (
        "}}\n</tool_call>"
    )


async def test_when_no_draft_fits_the_format_closes_the_answer():
    """Both members add a key the tool's schema does not have: the call is closed instead."""
    from scripted import ScriptedSession, events

    shape = AnswerFormat('<tool_call>\n{"name": "f", "arguments": {', ToolCallAnswer({"f": SCHEMA}))
    a = ScriptedSession("a", ['"a": 1, "b": 2 ', ', "c": 3}}'])
    b = ScriptedSession("b", ['"a": 5, "b": 6 ', ', "d": 4}}'])
    rounds = await events(a, b, answer_format=shape)
    text = "".join(e.text for e in rounds)
    assert text.endswith("}}\n</tool_call>") and '"c"' not in text and '"d"' not in text
    last = rounds[-1].candidates
    assert [c.source for c in last] == ["format"] and rounds[-1].finish_reason == "end_of_turn"


# -- a name only one tool can complete -------------------------------------------------------

TWO_TOOLS = ToolCallAnswer({"magic_function": SCHEMA, "get_weather": SCHEMA})


@pytest.mark.parametrize(
    ("answer", "choices"),
    [
        ('<tool_call>\n{"name": "ma', ('gic_function", "arguments": {',)),
        ('<tool_call>\n{"name": "get_weather', ('", "arguments": {',)),
        # either tool: both are offered, for the verifiers to choose
        (
            '<tool_call>\n{"name": "',
            ('magic_function", "arguments": {', 'get_weather", "arguments": {'),
        ),
        ('<tool_call>\n{"name": "x', ()),  # no tool's name: nothing fits
        ('<tool_call>\n{"name": "get_weather"', ()),  # the name is closed
        ('<tool_call>\n{"name": "get_weather", "arguments": {"a', ()),  # past the name
        ("", ()),
    ],
)
def test_the_format_offers_every_tool_name_that_completes_the_written_one(answer, choices):
    assert TWO_TOOLS.choices(answer) == choices
    either = EitherAnswer((JsonObjectAnswer(SCHEMA), TWO_TOOLS))
    assert either.choices(answer) == choices


async def test_when_no_draft_fits_the_format_writes_the_one_name_that_fits():
    """Both members start a tool's name, then leave it (another name; a closed quote): the
    format writes the rest of the only name that fits, and the members go on from there."""
    from scripted import ScriptedSession, events

    def drafts(astray: str) -> list[Draft]:
        start, rest = Draft("ma", 1, False, at_boundary=True), '"a": 1, "b": 2}}\n</tool_call>'
        return [start, *[Draft(astray, 1, False, at_boundary=True)] * 3, Draft(rest, 1, True)]

    shape = AnswerFormat('<tool_call>\n{"name": "', TWO_TOOLS)
    a, b = ScriptedSession("a", drafts("aak")), ScriptedSession("b", drafts('", "x'))
    rounds = await events(a, b, answer_format=shape)
    call = '{"name": "magic_function", "arguments": {"a": 1, "b": 2}}'
    assert "".join(e.text for e in rounds) == f"<tool_call>\n{call}\n</tool_call>"
    assert [c.source for c in rounds[1].candidates] == ["format"]
    assert 'gic_function", "arguments": {' in a.accepted and a.accepted == b.accepted


async def test_when_members_drafting_under_the_format_find_no_way_on_the_format_offers_its():
    """An in-process member that finds no fitting token drafts nothing: after the redrafts,
    the format writes the rest of the only name that fits, as for drafts that went astray."""
    from scripted import ScriptedSession, events

    rest = Draft('"a": 1, "b": 2}}\n</tool_call>', 1, True)
    a = ScriptedSession(
        "a", [Draft("ma", 1, False, at_boundary=True), *[Draft("", 1, False)] * 3, rest]
    )
    rounds = await events(a, answer_format=AnswerFormat('<tool_call>\n{"name": "', TWO_TOOLS))
    assert [c.source for c in rounds[1].candidates] == ["format"]
    assert rounds[1].segment == 'gic_function", "arguments": {'


async def test_when_no_draft_fits_and_two_names_do_the_verifiers_choose_between_them():
    """Every draft names no tool at all (the only member drafts twice, both astray): the
    format offers both names, and the verifiers' scores pick one."""
    from scripted import ScriptedSession, events, likes

    from specem_chain.engine import Seat
    from specem_chain.engine.types import Sampling

    rest = Draft('"a": 1, "b": 2}}\n</tool_call>', 1, True)
    astray = Draft('hello", "arguments": {', 1, False, at_boundary=True)
    a = ScriptedSession("a", [astray] * 6 + [rest], likes("get_weather"))
    shape = AnswerFormat('<tool_call>\n{"name": "', TWO_TOOLS)
    rounds = await events(Seat("a", a, Sampling(drafts=2)), answer_format=shape)
    offered = rounds[0].candidates
    assert [c.source for c in offered] == ["format", "format"] and rounds[0].verified
    assert [c.text for c in offered] == [
        'magic_function", "arguments": {',
        'get_weather", "arguments": {',
    ]
    assert rounds[0].segment == 'get_weather", "arguments": {'
    call = '{"name": "get_weather", "arguments": {"a": 1, "b": 2}}'
    assert "".join(e.text for e in rounds) == f"<tool_call>\n{call}\n</tool_call>"


@pytest.mark.parametrize(
    ("answer", "choices"),
    [
        ("{", ('"a": ', '"b": ')),
        ('{"a": 1,', ('"b": ',)),  # a key is not written twice
        ('{"a": 1', ()),  # a value ends here: no key may start
        ('{"a": ', ()),
    ],
)
def test_where_a_key_may_start_the_format_offers_each_key_that_fits(answer, choices):
    assert JsonObjectAnswer(SCHEMA).choices(answer) == choices


def test_a_calls_arguments_are_offered_the_keys_of_its_tool():
    call = '<tool_call>\n{"name": "magic_function", "arguments": {'
    assert TWO_TOOLS.choices(call) == ('"a": ', '"b": ')
    assert TWO_TOOLS.choices(call + '"a": 1, ') == ('"b": ',)
    assert TWO_TOOLS.choices(call + '"a": 1') == ()


def test_an_object_that_repeats_a_key_is_refused():
    assert not scan_json('{"a": 1, "a"').valid
    assert scan_json('{"a": {"a": 1}, "b": [{"a": 2}, {"a": 3}]}').valid  # other objects
