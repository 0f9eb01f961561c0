"""The token-drafting loop that every in-process backend shares, with a scripted vocabulary."""

from __future__ import annotations

import pytest
from scripted import ScriptedSession, events

from specem_chain.backends.drafting import MAX_CHARACTER_TOKENS, RUN_ON_TOKENS, draft_tokens
from specem_chain.engine.types import Draft

END = 0
PIECES = {1: " The", 2: " quick", 3: " br", 4: "own", 5: " fox", 6: ".\n", 7: "ie", 8: "s"}


def decode(tokens: list[int]) -> str:
    return "".join(PIECES[t] for t in tokens)


def draft(script: list[int], window: int, *, run_on: bool = False, room: int = 100):
    """Draft with a 'model' that samples the script's tokens in turn."""
    stream = iter(script)
    steps: list[int] = []

    def step(tokens: list[int]) -> None:
        steps.append(len(tokens))

    return (
        draft_tokens(
            None,
            step,
            lambda _, tokens: next(stream),
            end_of_turn=frozenset({END}),
            decode=decode,
            window=window,
            room=room,
            run_on=run_on,
        ),
        steps,
    )


def test_the_window_stops_a_draft_inside_a_word():
    (tokens, finished, at_boundary), steps = draft([1, 2, 3, 4, 5], window=3)
    assert (tokens, finished, at_boundary) == ([1, 2, 3], False, False)
    assert steps == [1, 2]  # the last token is never read: nothing needs its logits


def test_an_end_of_turn_token_finishes_a_draft():
    (tokens, finished, _), _ = draft([1, 2, END], window=5)
    assert (tokens, finished) == ([1, 2], True)


def test_a_draft_that_runs_on_ends_with_its_last_word():
    (tokens, finished, at_boundary), steps = draft([1, 2, 3, 4, 7, 8, 5], window=3, run_on=True)
    # " The quick br" -> "own" -> "ie" -> "s" end the word; " fox" starts the next: left out
    assert decode(tokens) == " The quick brownies"
    assert (finished, at_boundary) == (False, True)
    assert steps == [1, 2, 3, 4, 5, 6]


def test_a_draft_that_runs_on_stops_at_a_line_end_or_at_the_window_boundary():
    (tokens, _, at_boundary), _ = draft([1, 6, 2], window=2, run_on=True)
    assert (decode(tokens), at_boundary) == (" The.\n", True)
    (tokens, _, at_boundary), _ = draft([1, 2, 5], window=2, run_on=True)
    assert (decode(tokens), at_boundary) == (" The quick", True)


def test_a_word_too_long_to_finish_is_left_to_the_boundary_cleaner():
    (tokens, _, at_boundary), _ = draft([1, 3] + [4] * 20, window=2, run_on=True)
    assert len(tokens) == 2 + RUN_ON_TOKENS and not at_boundary


def test_a_draft_never_outgrows_the_room_left_in_the_context():
    (tokens, _, _), _ = draft([1, 3, 4, 4, 4], window=2, room=3, run_on=True)
    assert len(tokens) == 3
    assert MAX_CHARACTER_TOKENS < RUN_ON_TOKENS


@pytest.mark.parametrize("at_boundary", [False, True])
async def test_the_engine_cuts_back_only_a_draft_that_does_not_end_a_word(at_boundary):
    last = Draft("", 1, finished=True)
    member = ScriptedSession("a", [Draft(" The quick brownies", 3, False, at_boundary), last])
    first = (await events(member))[0]
    assert first.segment == (" The quick brownies" if at_boundary else " The quick")
