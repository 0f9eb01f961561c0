"""The tasks: how examples load from JSONL and how an answer is scored.

- ``gsm8k``: ``{"question", "answer"}`` lines whose answer ends with ``#### N``; exact match
  of the final number.
- ``instructions``: IFEval's layout, ``{"key", "prompt", "instruction_id_list", "kwargs"}``;
  IFEval's checkers from lm-eval (all 25 instruction types) and its four scores: prompt and
  instruction level, strict and loose (:mod:`~specem_chain.evaluation.ifeval`).
- ``reference``: ``{"id", "prompt", "reference"}``; ROUGE-L and ROUGE-2 F1 against the
  reference, as the paper's FuseEval does.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from ..errors import SpecEMError
from . import ifeval

if TYPE_CHECKING:
    from rouge_score.rouge_scorer import RougeScorer


class DataError(SpecEMError, ValueError):
    """A data file is missing, is not JSONL, or lacks a field its task needs."""


@dataclass(frozen=True)
class Example:
    """One prompt with what its answer is scored against."""

    id: str
    index: int  # position in the data file; every system's sampling seed derives from it
    prompt: str
    reference: Any


class Task:
    """Loads examples and scores answers; ``metrics[0]`` is the headline metric."""

    name: ClassVar[str]
    metrics: ClassVar[tuple[str, ...]]
    weights: ClassVar[dict[str, str]] = {}
    """metric -> the score key that weighs it when a summary averages it over examples
    (unweighted if absent)."""
    votable: ClassVar[bool] = False  # final answers can be counted in a majority vote

    def example(self, record: dict[str, Any], index: int) -> Example:
        raise NotImplementedError

    def score(self, example: Example, answer: str) -> dict[str, float]:
        raise NotImplementedError

    def final_answer(self, answer: str) -> str | None:
        """The part of an answer that a majority vote counts (votable tasks only)."""
        raise NotImplementedError

    def load(self, path: Path, limit: int | None = None) -> list[Example]:
        examples = []
        for index, record in _records(path):
            if limit is not None and len(examples) >= limit:
                break
            try:
                examples.append(self.example(record, index))
            except (KeyError, TypeError, ValueError) as error:
                raise DataError(
                    f"{path}:{index + 1}: not a {self.name} example ({error})"
                ) from None
        ids = [e.id for e in examples]
        if len(set(ids)) != len(ids):
            raise DataError(f"{path}: example ids are not unique")
        return examples


# -- gsm8k --------------------------------------------------------------------------------

_NUMBER = re.compile(
    r"(?<![\w.])(?P<sign>[-\u2212]?)\s?\$?\s?(?P<int>\d{1,3}(?:,\d{3})+(?![\d,])|\d+)(?P<frac>\.\d+)?"
)
_SENTENCE_END = re.compile(r"\.(?:\s|$)")
_MARKED = (
    re.compile(r"####\s*([^\n]*)"),
    re.compile(r"\\boxed\{([^{}]*)\}"),
    re.compile(r"answer\s*(?:is|:|=)\s*([^\n]*)", re.IGNORECASE),
)


def normalise_number(text: str) -> str | None:
    """The first number in ``text`` in canonical form ("1,080.00" becomes "1080")."""
    match = _NUMBER.search(text)
    return _canonical(match) if match else None


def extract_number(answer: str) -> str | None:
    """The final number of a free-form answer, in canonical form, or None.

    The last number of the sentence after the last ``####``, inside the last ``\\boxed{}``
    or after the last "answer is" wins; otherwise the last number in the answer.
    """
    for marker in _MARKED:
        for tail in reversed(marker.findall(answer)):
            number = _last_number(_SENTENCE_END.split(tail, maxsplit=1)[0])
            if number is not None:
                return number
    return _last_number(answer)


def _last_number(text: str) -> str | None:
    matches = list(_NUMBER.finditer(text))
    return _canonical(matches[-1]) if matches else None


def _canonical(match: re.Match[str]) -> str | None:
    sign = "-" if match["sign"] else ""
    digits = match["int"].replace(",", "") + (match["frac"] or "")
    try:
        value = Decimal(sign + digits).normalize()
    except InvalidOperation:
        return None
    return format(value, "f") if value != 0 else "0"


class GSM8K(Task):
    name = "gsm8k"
    metrics = ("exact_match",)
    votable = True
    INSTRUCTION = "Think step by step, then give the final answer as 'The answer is <number>.'"
    """A '#### <number>' format line made Qwen2.5-Coder answer a bare '#### N' with no
    working (0 of 13 train problems); with this one it reasons first (2 of 8)."""

    def example(self, record: dict[str, Any], index: int) -> Example:
        _, marker, tail = record["answer"].rpartition("####")
        reference = normalise_number(tail) if marker else None
        if reference is None:
            raise ValueError("the answer does not end with '#### N'")
        return Example(
            id=str(record.get("id", index)),
            index=index,
            prompt=f"{record['question'].strip()}\n\n{self.INSTRUCTION}",
            reference=reference,
        )

    def score(self, example: Example, answer: str) -> dict[str, float]:
        return {"exact_match": float(extract_number(answer) == example.reference)}

    def final_answer(self, answer: str) -> str | None:
        return extract_number(answer)


# -- instructions ----------------------------------------------------------------------


class Instructions(Task):
    name = "instructions"
    metrics = ifeval.METRICS
    weights: ClassVar[dict[str, str]] = {
        "inst_level_strict_acc": "instructions",
        "inst_level_loose_acc": "instructions",
    }
    """IFEval pools its instruction-level scores over every instruction of every prompt."""

    def example(self, record: dict[str, Any], index: int) -> Example:
        ifeval.check(record["instruction_id_list"], record["kwargs"])
        return Example(
            id=str(record.get("key", index)),
            index=index,
            prompt=record["prompt"],
            reference={k: record[k] for k in ("prompt", "instruction_id_list", "kwargs")}
            | {"key": record.get("key", index)},
        )

    def score(self, example: Example, answer: str) -> dict[str, float]:
        return ifeval.score(example.reference, answer)


# -- reference ---------------------------------------------------------------------------


@lru_cache(maxsize=1)
def _scorer() -> RougeScorer:
    from rouge_score.rouge_scorer import RougeScorer  # here: it imports nltk and scipy (2-4 s)

    return RougeScorer(["rougeL", "rouge2"], use_stemmer=True)


def rouge(reference: str, answer: str) -> dict[str, float]:
    """ROUGE-L and ROUGE-2 F1 of ``answer`` against ``reference`` (Porter-stemmed)."""
    scores = _scorer().score(target=reference, prediction=answer)
    return {"rougeL": scores["rougeL"].fmeasure, "rouge2": scores["rouge2"].fmeasure}


class Reference(Task):
    name = "reference"
    metrics = ("rougeL", "rouge2")

    def example(self, record: dict[str, Any], index: int) -> Example:
        if not record["reference"].strip():
            raise ValueError("the reference is empty")
        return Example(
            id=str(record.get("id", index)),
            index=index,
            prompt=record["prompt"],
            reference=record["reference"],
        )

    def score(self, example: Example, answer: str) -> dict[str, float]:
        return rouge(example.reference, answer)


TASKS: dict[str, Task] = {t.name: t for t in (GSM8K(), Instructions(), Reference())}


def _records(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as error:
        raise DataError(f"cannot read {path}: {error.strerror}") from None
    for index, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError:
            raise DataError(f"{path}:{index + 1}: not a JSON line") from None
        if not isinstance(record, dict):
            raise DataError(f"{path}:{index + 1}: not a JSON object")
        yield index, record
