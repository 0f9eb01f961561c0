"""The instructions task scores with IFEval's own checkers from lm-eval: every one of the 25
instruction types, with an answer written here that follows it and one that does not."""

from __future__ import annotations

import pytest

from specem_chain.evaluation import ifeval

ESSAY = "Bees keep warm in winter.\n\nThey cluster together.\n\nThey shiver their muscles."

CASES = [
    # (instruction id, kwargs, an answer that follows it, an answer that does not)
    ("keywords:existence", {"keywords": ["hive", "honey"]}, "The HIVE holds honey.", "A hive."),
    (
        "keywords:frequency",
        {"keyword": "river", "frequency": 2, "relation": "at least"},
        "The river bends; the river shines.",
        "One river only.",
    ),
    (
        "keywords:forbidden_words",
        {"forbidden_words": ["very", "good"]},
        "Everything is goodish and fine.",  # whole words only
        "That is Very nice.",
    ),
    (
        "keywords:letter_frequency",
        {"letter": "z", "let_frequency": 3, "let_relation": "less than"},
        "Zebras graze.",
        "Zany zebras zigzag.",
    ),
    (
        "language:response_language",
        {"language": "fr"},
        "Le chat dort sur le canapé pendant que la pluie tombe doucement dehors.",
        "The cat sleeps on the sofa while the rain falls softly outside.",
    ),
    (
        "length_constraints:number_sentences",
        {"num_sentences": 3, "relation": "less than"},
        "It rains. It pours.",
        "It rains. It pours. It floods.",
    ),
    (
        "length_constraints:number_paragraphs",
        {"num_paragraphs": 2},
        "First part.\n***\nSecond part.",
        "Only one part.",
    ),
    (
        "length_constraints:number_words",
        {"num_words": 5, "relation": "less than"},
        "one two three four",
        "one two three four five",
    ),
    (
        "length_constraints:nth_paragraph_first_word",
        {"num_paragraphs": 3, "nth_paragraph": 2, "first_word": "they"},
        ESSAY,
        ESSAY.replace("They cluster", "Bees cluster"),
    ),
    (
        "detectable_content:number_placeholders",
        {"num_placeholders": 2},
        "Dear [name], see you at [place].",
        "Dear [name], see you soon.",
    ),
    (
        "detectable_content:postscript",
        {"postscript_marker": "P.S."},
        "Dear Ann,\nhello.\nP.S. see you soon",
        "Dear Ann, see you soon.",
    ),
    (
        "detectable_format:number_bullet_lists",
        {"num_bullets": 3},
        "Intro\n* one\n* two\n- three",
        "* one\n* two\n**bold** is not a bullet",
    ),
    (
        "detectable_format:constrained_response",
        {},
        "My answer is maybe.",
        "Perhaps.",
    ),
    (
        "detectable_format:number_highlighted_sections",
        {"num_highlights": 2},
        "Some *warm* and *dry* places.",
        "Only *one* highlight.",
    ),
    (
        "detectable_format:multiple_sections",
        {"section_spliter": "Section", "num_sections": 2},
        "Section 1\nBees.\nSection 2\nHives.",
        "Section 1\nBees only.",
    ),
    ("detectable_format:json_format", {}, '```json\n{"a": [1, 2]}\n```', 'Here: {"a": 1}'),
    ("detectable_format:title", {}, "<<A Song of Joy>>\nLa la la", "<< >> no title"),
    (
        "combination:two_responses",
        {},
        "Yes, it is.\n******\nNo, it is not.",
        "Yes.\n******\nYes.",
    ),
    (
        "combination:repeat_prompt",
        {"prompt_to_repeat": "Name a colour."},
        "Name a colour. Blue.",
        "Blue.",
    ),
    (
        "startend:end_checker",
        {"end_phrase": "Any other questions?"},
        '"Done. any other questions?"',  # IFEval strips quotes before it compares
        "Any other questions? Bye.",
    ),
    (
        "change_case:capital_word_frequency",
        {"capital_frequency": 2, "capital_relation": "at least"},
        "The NASA and ESA teams met.",
        "The NASA team met.",
    ),
    (
        "change_case:english_capital",
        {},
        "THE WEATHER IS SUNNY AND WARM TODAY IN THE CITY.",
        "THE WEATHER IS SUNNY and warm today.",
    ),
    (
        "change_case:english_lowercase",
        {},
        "the weather is sunny and warm today in the city.",
        "The weather is sunny and warm today.",
    ),
    ("punctuation:no_comma", {}, "No commas here.", "One, here."),
    ("startend:quotation", {}, '"All of it quoted."', '"Half quoted.'),
]


def record(instruction: str, kwargs: dict) -> dict:
    return {"key": 1, "prompt": "p", "instruction_id_list": [instruction], "kwargs": [kwargs]}


@pytest.mark.parametrize(
    ("instruction", "kwargs", "follows", "breaks"), CASES, ids=[c[0] for c in CASES]
)
def test_checker(instruction, kwargs, follows, breaks):
    ifeval.check([instruction], [kwargs])
    assert ifeval.score(record(instruction, kwargs), follows)["prompt_level_strict_acc"] == 1.0
    assert ifeval.score(record(instruction, kwargs), breaks)["prompt_level_strict_acc"] == 0.0


def test_every_instruction_type_has_a_case():
    registry = ifeval.harness().instructions_registry.INSTRUCTION_DICT
    assert len(registry) == 25
    assert {c[0] for c in CASES} == set(registry)


def test_loose_scores_forgive_markdown_and_a_first_line():
    # IFEval's loose scores also try the answer without '*' and without its first or last line.
    answer = "Sure, here it is:\n**the whole answer is lowercase.**"
    scores = ifeval.score(record("change_case:english_lowercase", {}), answer)
    assert scores["prompt_level_strict_acc"] == 0.0
    assert scores["prompt_level_loose_acc"] == 1.0


def test_instruction_level_scores_are_shares_with_their_count():
    both = {
        "key": 2,
        "prompt": "p",
        "instruction_id_list": ["punctuation:no_comma", "change_case:english_lowercase"],
        "kwargs": [{}, {}],
    }
    scores = ifeval.score(both, "Fine, upper case here.")
    assert scores == {
        "prompt_level_strict_acc": 0.0,
        "inst_level_strict_acc": 0.0,
        "prompt_level_loose_acc": 0.0,
        "inst_level_loose_acc": 0.0,
        "instructions": 2.0,
    }
    half = ifeval.score(both, "No commas but Capitals here.")
    assert half["inst_level_strict_acc"] == 0.5
    assert half["prompt_level_strict_acc"] == 0.0


@pytest.mark.parametrize(
    ("ids", "kwargs", "message"),
    [
        (["made:up"], [{}], "unknown instruction 'made:up'"),
        (["punctuation:no_comma"], [{}, {}], "one kwargs object per instruction"),
        ([], [], "one kwargs object per instruction"),
        (
            ["length_constraints:number_words"],
            [{"num_words": 5, "relation": "about"}],
            "length_constraints:number_words",
        ),
        (["punctuation:no_comma"], [{"colour": "red"}], "punctuation:no_comma"),
    ],
)
def test_instructions_that_do_not_build_are_errors(ids, kwargs, message):
    with pytest.raises(ValueError, match=message):
        ifeval.check(ids, kwargs)
