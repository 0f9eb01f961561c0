"""Every instruction checker, with an answer that follows it and one that does not."""

from __future__ import annotations

import pytest

from specem_chain.evaluation.checkers import CHECKERS, check

CASES = [
    # (instruction id, kwargs, an answer that passes, an answer that fails)
    (
        "length_constraints:number_words",
        {"relation": "less than", "num_words": 5},
        "one two three four",
        "one two three four five",
    ),
    (
        "length_constraints:number_words",
        {"relation": "at least", "num_words": 3},
        "it's fine",  # \w+ splits "it's" into two words, as IFEval does
        "too short",
    ),
    ("change_case:english_lowercase", {}, "all lower case, 42 times.", "Not lower"),
    ("change_case:english_capital", {}, "ALL CAPS, 42 TIMES.", "ALL CAPS bUT ONE"),
    ("punctuation:no_comma", {}, "No commas here.", "One, here."),
    (
        "detectable_format:number_bullet_lists",
        {"num_bullets": 3},
        "Intro\n* one\n* two\n- three",
        "* one\n* two\n**bold** is not a bullet",
    ),
    (
        "detectable_format:json_format",
        {},
        '```json\n{"a": [1, 2]}\n```',
        'Here it is: {"a": 1}',
    ),
    (
        "startend:end_checker",
        {"end_phrase": "Is there anything else I can help with?"},
        "Done. is there anything else I can help with?  \n",
        "Is there anything else I can help with? Bye.",
    ),
    ("detectable_format:title", {}, "<<A Song of Joy>>\nLa la la", "<< >> no title"),
    ("keywords:existence", {"keywords": ["Paris", "river"]}, "paris has a RIVER.", "Paris only"),
    (
        "keywords:forbidden_words",
        {"forbidden_words": ["very", "good"]},
        "Everything is goodish and fine.",
        "That is Very nice.",
    ),
    ("startend:quotation", {}, ' "All of it quoted." ', '"Half quoted.'),
    (
        "detectable_content:postscript",
        {"postscript_marker": "P.S."},
        "Dear Ann,\nhello.\np.s. see you soon",
        "Dear Ann, see you soon. P.S.",
    ),
]


@pytest.mark.parametrize(
    ("instruction", "kwargs", "passing", "failing"),
    CASES,
    ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)],
)
def test_checker(instruction, kwargs, passing, failing):
    assert check(instruction, passing, kwargs) is True
    assert check(instruction, failing, kwargs) is False


def test_every_checker_has_cases():
    assert {c[0] for c in CASES} == set(CHECKERS)


def test_an_unknown_relation_is_an_error():
    with pytest.raises(ValueError, match="relation"):
        check("length_constraints:number_words", "x", {"relation": "about", "num_words": 3})
