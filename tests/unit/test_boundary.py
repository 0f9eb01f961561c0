"""Boundary cleaning: a window-stopped draft is cut back to its last word boundary."""

from __future__ import annotations

import unicodedata

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from specem_chain.engine.boundary import clean_boundary, last_boundary

# Scripts written without spaces between words, as the test sees them (an independent list).
SPACELESS_PREFIXES = ("CJK ", "HIRAGANA", "KATAKANA", "THAI", "LAO", "KHMER", "MYANMAR")


def is_spaceless(char: str) -> bool:
    return unicodedata.name(char, "").startswith(SPACELESS_PREFIXES)


# Latin words, spaces, tabs, newlines and punctuation: no space-less script.
latin_text = st.text(alphabet="ab.,!?-'\" \t\n\r", max_size=30)
# The same with CJK characters mixed in.
mixed_text = st.text(alphabet="ab. \n世界你好", max_size=30)
cjk_text = st.text(alphabet="世界你好こんにちは", min_size=1, max_size=20)
no_boundary_text = st.text(
    alphabet=st.characters(
        exclude_categories=("Cs", "Z", "Cc"),
    ).filter(lambda c: not c.isspace() and not is_spaceless(c)),
    max_size=30,
)


# --------------------------------------------------------------------------------------------
# The reference code's defects must not occur
# --------------------------------------------------------------------------------------------


def test_single_word_is_not_cut():
    # The reference turned "Hello" into "Hell".
    assert clean_boundary("Hello", finished=False) == "Hello"


@pytest.mark.parametrize("text", [" answer is 42", "42", "Hello wor", "你好世界", "Done.\n", "a "])
def test_finished_draft_is_never_cut(text):
    # The reference cut " answer is 42" to " answer is" even after end-of-turn.
    assert clean_boundary(text, finished=True) == text


def test_newline_after_final_punctuation_is_kept():
    assert clean_boundary("Done.\n", finished=False) == "Done.\n"


@pytest.mark.parametrize(
    ("text", "cleaned"),
    [
        ("Hello wor", "Hello"),
        ("Hello world ", "Hello world"),
        ("Hello world  \t", "Hello world"),
        (" answer is 42", " answer is"),
        ("Hello\nwor", "Hello\n"),
        ("Hello\n\nwor", "Hello\n\n"),
        ("Hello\n wor", "Hello\n"),
        ("Hello\r\nwor", "Hello\r\n"),
        (" answer", " answer"),  # a leading space is not a boundary with a non-empty prefix
        ("  ", "  "),
        ("", ""),
    ],
)
def test_cut_back_to_last_word_boundary(text, cleaned):
    assert clean_boundary(text, finished=False) == cleaned


@pytest.mark.parametrize(
    ("text", "cleaned"),
    [
        ("你好世界", "你好世"),
        ("こんにちは", "こんにち"),
        ("Hello 世界", "Hello 世"),
        ("世界abc", "世界"),  # boundary between the CJK and Latin runs
    ],
)
def test_cjk_cut_before_last_character(text, cleaned):
    assert clean_boundary(text, finished=False) == cleaned


def test_cleaning_is_not_idempotent():
    # The cleaner cannot know whether the last word is complete, so cleaning again cuts again.
    once = clean_boundary("Hello big world", finished=False)
    assert once == "Hello big"
    assert clean_boundary(once, finished=False) == "Hello"


# --------------------------------------------------------------------------------------------
# Properties
# --------------------------------------------------------------------------------------------


@given(st.text(max_size=40), st.booleans())
def test_result_is_a_prefix(text, finished):
    assert text.startswith(clean_boundary(text, finished))


@given(st.text(min_size=1, max_size=40))
def test_non_empty_input_gives_non_empty_output(text):
    assert clean_boundary(text, finished=False)


@given(st.text(max_size=40))
def test_finished_is_identity(text):
    assert clean_boundary(text, finished=True) == text


@given(st.text(max_size=40))
def test_last_boundary_is_within_text(text):
    n = last_boundary(text)
    assert (0 < n <= len(text)) if text else n == 0


@given(no_boundary_text)
@example("Hello")
@example("don't-stop!")
@example("Grüße")
def test_text_without_whitespace_or_spaceless_script_is_never_cut(text):
    assert clean_boundary(text, finished=False) == text


@given(latin_text)
def test_cut_never_ends_inside_a_run_of_spaces(text):
    cleaned = clean_boundary(text, finished=False)
    if cleaned != text:
        assert cleaned[-1] == "\n" or not cleaned[-1].isspace()


@given(latin_text)
def test_cut_removes_only_the_last_partial_word(text):
    """What is cut off is one whitespace run (no newline) and the word after it, if any:
    the cut is at the *last* boundary."""
    cleaned = clean_boundary(text, finished=False)
    tail = text[len(cleaned) :]
    if tail:
        assert "\n" not in tail
        assert cleaned.endswith("\n") or tail[0].isspace()
        assert not any(c.isspace() for c in tail.lstrip())


@given(mixed_text)
def test_mixed_text_cut_is_at_a_boundary(text):
    cleaned = clean_boundary(text, finished=False)
    if cleaned != text:
        nxt = text[len(cleaned)]
        assert (
            cleaned.endswith("\n")
            or nxt.isspace()
            or is_spaceless(nxt)
            or is_spaceless(cleaned[-1])
        )


@given(cjk_text)
def test_pure_cjk_text_leaves_last_character_for_next_round(text):
    expected = text if len(text) == 1 else text[:-1]
    assert clean_boundary(text, finished=False) == expected


# --------------------------------------------------------------------------------------------
# Defects found in review (a space before a space-less character; combining marks)
# --------------------------------------------------------------------------------------------


@given(mixed_text)
@example("a 世")
def test_mixed_text_cut_never_ends_inside_a_run_of_spaces(text):
    cleaned = clean_boundary(text, finished=False)
    if cleaned != text:
        assert cleaned[-1] == "\n" or not cleaned[-1].isspace()


@pytest.mark.parametrize("text", ["สวัสดี", "か\u3099"])
def test_cut_never_separates_a_combining_mark_from_its_base(text):
    cleaned = clean_boundary(text, finished=False)
    if cleaned != text:
        assert not unicodedata.category(text[len(cleaned)]).startswith("M")


def test_korean_is_cut_at_spaces_like_latin_text():
    # Korean writes spaces between words, so a word is never split.
    assert clean_boundary("안녕하세요 여러분", finished=False) == "안녕하세요"
    assert clean_boundary("안녕하세요", finished=False) == "안녕하세요"
