"""Stop sequences: finding them, and holding back a tail that could still become one."""

from __future__ import annotations

from hypothesis import assume, given
from hypothesis import strategies as st

from specem_chain.engine.stops import find_stop, unsafe_tail

# A two-letter alphabet makes stops, overlaps and partial matches frequent.
texts = st.text(alphabet="ab", max_size=30)
stop_lists = st.lists(st.text(alphabet="ab", min_size=1, max_size=4), max_size=3)


def brute_find(text: str, stops: list[str], start: int = 0) -> int | None:
    """Earliest index of a stop occurrence that ends after ``start``."""
    hits = [
        i
        for stop in stops
        for i in range(len(text))
        if text.startswith(stop, i) and i + len(stop) > start
    ]
    return min(hits, default=None)


def brute_tail(text: str, stops: list[str]) -> int:
    """Longest end of ``text`` that is a proper prefix of some stop."""
    return max(
        (
            n
            for stop in stops
            for n in range(1, min(len(stop) - 1, len(text)) + 1)
            if text.endswith(stop[:n])
        ),
        default=0,
    )


# --------------------------------------------------------------------------------------------
# find_stop
# --------------------------------------------------------------------------------------------


def test_find_stop_examples():
    assert find_stop("Answer\nObservation: x", ["Observation:"]) == 7
    assert find_stop("no stop here", ["Observation:"]) is None
    assert find_stop("anything", []) is None
    assert find_stop("one. two\n", ["\n", "."]) == 3  # earliest wins, not first listed


def test_find_stop_respects_start():
    # A stop straddling start is found.
    assert find_stop("xxSTOPyy", ["STOP"], start=4) == 2
    assert find_stop("xxSTOPyy", ["STOP"], start=5) == 2
    # One that ends at or before start is not searched again...
    assert find_stop("STOPxxxx", ["STOP"], start=4) is None
    assert find_stop("STOPxxxx", ["STOP"], start=6) is None
    # ... but a later one is found.
    assert find_stop("STOPxxSTOP", ["STOP"], start=6) == 6


@given(texts, stop_lists)
def test_find_stop_finds_the_earliest_stop(text, stops):
    assert find_stop(text, stops) == brute_find(text, stops)


@given(texts, stop_lists, st.integers(min_value=0, max_value=35))
def test_find_stop_from_start_finds_the_earliest_stop_ending_after_start(text, stops, start):
    assert find_stop(text, stops, start) == brute_find(text, stops, start)


@given(texts, stop_lists)
def test_find_stop_result_is_an_occurrence_or_none_when_absent(text, stops):
    hit = find_stop(text, stops)
    if hit is None:
        assert not any(stop in text for stop in stops)
    else:
        assert any(text.startswith(stop, hit) for stop in stops)
        assert not any(stop in text[: hit + len(stop) - 1] for stop in stops)


@given(texts, texts, stop_lists)
def test_incremental_search_agrees_with_full_search(old, new, stops):
    """Searching only where new text can complete a stop finds what a full search finds,
    provided the old text held no stop (the caller would already have stopped)."""
    assume(find_stop(old, stops) is None)
    assert find_stop(old + new, stops, start=len(old)) == find_stop(old + new, stops)


# --------------------------------------------------------------------------------------------
# unsafe_tail
# --------------------------------------------------------------------------------------------


def test_unsafe_tail_examples():
    assert unsafe_tail("Thought: done\nObs", ["Observation:"]) == 3
    assert unsafe_tail("Observation", ["Observation:"]) == 11
    assert unsafe_tail("plain", ["Observation:"]) == 0
    assert unsafe_tail("abc", []) == 0
    # A complete stop is not a tail to hold back: find_stop handles it.
    assert unsafe_tail("xSTOP", ["STOP"]) == 0
    # The longest candidate among several stops.
    assert unsafe_tail("xab", ["b!", "ab!"]) == 2


@given(texts, stop_lists)
def test_unsafe_tail_is_the_longest_proper_stop_prefix_at_the_end(text, stops):
    tail = unsafe_tail(text, stops)
    assert 0 <= tail <= len(text)
    if tail:
        held = text[-tail:]
        assert any(stop.startswith(held) and len(held) < len(stop) for stop in stops)
    assert tail == brute_tail(text, stops)


# --------------------------------------------------------------------------------------------
# Streaming
# --------------------------------------------------------------------------------------------


def stream(segments: list[str], stops: list[str]) -> tuple[str, list[str]]:
    """Stream segments as the engine does: after each segment, cut at a stop completed by
    it, or else release everything but the unsafe tail; flush at the end."""
    text, shown, released = "", 0, []
    for segment in segments:
        previous = len(text)
        text += segment
        cut = find_stop(text, stops, start=previous)
        if cut is not None:
            assert cut >= shown, "a stop began inside text that was already shown"
            released.append(text[shown:cut])
            return text, released
        safe = len(text) - unsafe_tail(text, stops)
        assert safe >= shown, "released text would have to be taken back"
        released.append(text[shown:safe])
        shown = safe
    released.append(text[shown:])
    return text, released


@given(st.lists(texts, max_size=8), stop_lists)
def test_streamed_text_equals_the_answer_up_to_the_first_stop(segments, stops):
    text, released = stream(segments, stops)
    cut = find_stop(text, stops)
    answer = text if cut is None else text[:cut]
    assert "".join(released) == answer
    # No release ever showed part of a stop: every released prefix is a prefix of the
    # answer and contains no stop.
    shown = ""
    for chunk in released:
        shown += chunk
        assert answer.startswith(shown)
        assert find_stop(shown, stops) is None


def test_streaming_holds_back_a_stop_split_across_segments():
    _, released = stream(["Final answer: 4", "2\nObs", "ervation: more"], ["Observation:"])
    assert released == ["Final answer: 4", "2\n", ""]
    assert "".join(released) == "Final answer: 42\n"


def test_streaming_releases_a_false_alarm_later():
    _, released = stream(["see Obs", "cure things"], ["Observation:"])
    assert released == ["see ", "Obscure things", ""]
