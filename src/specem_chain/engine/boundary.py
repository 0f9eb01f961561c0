"""Clean a draft's end so that the next round never starts inside a word.

Members use different tokenizers. If one round ended inside a word ("The answ"), the next
member would continue a word that its tokenizer splits differently. A draft that the window
cut off is therefore cut back to its last word boundary; a draft that ended its turn is
complete and kept as it is.
"""

from __future__ import annotations

import unicodedata


def _spaceless(char: str) -> bool:
    """True for characters of scripts written without spaces between words (CJK and kin)."""
    if not char.isalpha():
        return False
    name = unicodedata.name(char, "")
    return name.startswith(("CJK ", "HIRAGANA", "KATAKANA", "THAI", "LAO", "KHMER", "MYANMAR"))


def _mark(char: str) -> bool:
    """A combining mark belongs to the character before it; never cut between them."""
    return unicodedata.category(char).startswith("M")


def _before_spaces(text: str, end: int) -> int:
    """``end`` moved back over the spaces (not newlines) just before it."""
    while end > 0 and text[end - 1].isspace() and text[end - 1] != "\n":
        end -= 1
    return end


def last_boundary(text: str) -> int:
    """Length of the longest non-empty prefix of ``text`` that ends at a word boundary.

    - A newline ends a prefix and is kept (``"Done.\\n"`` stays whole).
    - A run of other whitespace ends the prefix before it, so the next segment starts with
      the space, as BPE tokenizers expect (``"Hello wor"`` -> ``"Hello"``).
    - Between characters of a space-less script (Chinese, Japanese, Thai...) every position
      is a boundary, so the last, possibly partial, character is left for the next round.
      A combining mark stays with its base character.
    Returns ``len(text)`` when there is no such prefix: a draft that is one word is kept.
    """
    for i in range(len(text) - 1, 0, -1):
        char = text[i]
        if char == "\n":
            return i + 1
        between_words = char.isspace() or (
            not _mark(char) and (_spaceless(char) or _spaceless(text[i - 1]))
        )
        if between_words and (cut := _before_spaces(text, i)) > 0:
            return cut
    return len(text)


def clean_boundary(text: str, finished: bool) -> str:
    """The part of a draft that may be accepted.

    A finished draft (it ended with its member's end-of-turn) is never cut. A draft that the
    window stopped is cut back to :func:`last_boundary`.
    """
    if finished:
        return text
    return text[: last_boundary(text)]
