"""Verifiable instruction checkers in the style of IFEval (strict mode).

The ids and keyword arguments are IFEval's, so a prompt in IFEval's JSONL layout
(``instruction_id_list`` + ``kwargs``) that uses only these kinds is checked as IFEval
checks it, with two simplifications: "english_lowercase" and "english_capital" do not run a
language detector, and word counts split on ``\\w+`` exactly as IFEval's tokenizer does.
lm-eval's own IFEval module is not used: importing it loads the whole harness and fetches
NLTK data from the network, which offline machines cannot do.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

Checker = Callable[..., bool]


def number_words(text: str, *, relation: str, num_words: int) -> bool:
    """``relation`` is "less than" or "at least" ``num_words`` words."""
    words = len(re.findall(r"\w+", text))
    return _compare(words, relation, num_words)


def english_lowercase(text: str) -> bool:
    return text.islower()


def english_capital(text: str) -> bool:
    return text.isupper()


def no_comma(text: str) -> bool:
    return "," not in text


def number_bullet_lists(text: str, *, num_bullets: int) -> bool:
    """Exactly ``num_bullets`` markdown bullets (``* item`` or ``- item``)."""
    stars = re.findall(r"^\s*\*[^\*].*$", text, flags=re.MULTILINE)
    dashes = re.findall(r"^\s*-.*$", text, flags=re.MULTILINE)
    return len(stars) + len(dashes) == num_bullets


def json_format(text: str) -> bool:
    """The whole answer is JSON, optionally inside a markdown code fence."""
    body = text.strip()
    body = re.sub(r"^```(?:json|Json|JSON)?\s*", "", body)
    body = re.sub(r"\s*```$", "", body)
    try:
        json.loads(body)
    except ValueError:
        return False
    return True


def end_checker(text: str, *, end_phrase: str) -> bool:
    """The answer ends with ``end_phrase`` (case-insensitive), nothing after it."""
    return text.strip().lower().endswith(end_phrase.strip().lower())


def title(text: str) -> bool:
    """A title in double angular brackets, such as <<poem of joy>>."""
    return any(t.strip() for t in re.findall(r"<<([^\n]+?)>>", text))


def existence(text: str, *, keywords: list[str]) -> bool:
    """Every keyword appears (case-insensitive)."""
    return all(re.search(re.escape(k), text, flags=re.IGNORECASE) for k in keywords)


def forbidden_words(text: str, *, forbidden_words: list[str]) -> bool:
    """No forbidden word appears as a whole word (case-insensitive)."""
    return not any(
        re.search(r"\b" + re.escape(w) + r"\b", text, flags=re.IGNORECASE) for w in forbidden_words
    )


def quotation(text: str) -> bool:
    """The whole answer is wrapped in double quotation marks."""
    body = text.strip()
    return len(body) > 1 and body[0] == '"' and body[-1] == '"'


def postscript(text: str, *, postscript_marker: str) -> bool:
    """A postscript: ``postscript_marker`` (such as "P.S.") followed by text."""
    marker = re.escape(postscript_marker.strip())
    return re.search(marker + r"\s*\S", text, flags=re.IGNORECASE) is not None


CHECKERS: dict[str, Checker] = {
    "length_constraints:number_words": number_words,
    "change_case:english_lowercase": english_lowercase,
    "change_case:english_capital": english_capital,
    "punctuation:no_comma": no_comma,
    "detectable_format:number_bullet_lists": number_bullet_lists,
    "detectable_format:json_format": json_format,
    "startend:end_checker": end_checker,
    "detectable_format:title": title,
    "keywords:existence": existence,
    "keywords:forbidden_words": forbidden_words,
    "startend:quotation": quotation,
    "detectable_content:postscript": postscript,
}


def check(instruction_id: str, text: str, kwargs: dict[str, Any]) -> bool:
    """Whether ``text`` follows the instruction ``instruction_id`` with ``kwargs``."""
    return CHECKERS[instruction_id](text, **kwargs)


def _compare(value: int, relation: str, threshold: int) -> bool:
    if relation == "less than":
        return value < threshold
    if relation == "at least":
        return value >= threshold
    raise ValueError(f"relation must be 'less than' or 'at least', got {relation!r}")
