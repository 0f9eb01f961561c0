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
    return name.startswith(
        ("CJK ", "HIRAGANA", "KATAKANA", "HANGUL", "THAI", "LAO", "KHMER", "MYANMAR")
    )


def last_boundary(text: str) -> int:
    """Length of the longest non-empty prefix of ``text`` that ends at a word boundary.

    - A newline ends a prefix and is kept (``"Done.\\n"`` stays whole).
    - A run of other whitespace ends the prefix before it, so the next segment starts with
      the space, as BPE tokenizers expect (``"Hello wor"`` -> ``"Hello"``).
    - Between characters of a space-less script every position is a boundary, so the last
      (possibly partial) character is left for the next round.
    Returns ``len(text)`` when there is no such prefix: a draft that is one word is kept.
    """
    for i in range(len(text) - 1, 0, -1):
        char = text[i]
        if char == "\n":
            return i + 1
        if char.isspace():
            start = i
            while start > 0 and text[start - 1].isspace() and text[start - 1] != "\n":
                start -= 1
            if start > 0:
                return start
            continue
        if _spaceless(char) or _spaceless(text[i - 1]):
            return i
    return len(text)


def clean_boundary(text: str, finished: bool) -> str:
    """The part of a draft that may be accepted.

    A finished draft (it ended with its member's end-of-turn) is never cut. A draft that the
    window stopped is cut back to :func:`last_boundary`.
    """
    if finished:
        return text
    return text[: last_boundary(text)]
