"""IFEval's instruction checkers as lm-eval ships them (``lm_eval.tasks.ifeval``: all 25
instruction types), scored as IFEval scores them: prompt level and instruction level, strict
and loose.

The harness is imported on first use (a few seconds), after NLTK's Punkt tables are in place
(:func:`~specem_chain.evaluation.punkt.use_punkt`), so its import never tries NLTK's
downloader. ``langdetect``, which the language checks use, samples; it is seeded so that
scoring an answer twice gives the same result.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from types import ModuleType
from typing import Any

from .punkt import use_punkt

METRICS = (
    "prompt_level_strict_acc",
    "inst_level_strict_acc",
    "prompt_level_loose_acc",
    "inst_level_loose_acc",
)
"""IFEval's four scores, named as lm-eval names them; the first is the headline."""


@lru_cache(maxsize=1)
def harness() -> ModuleType:
    """lm-eval's ``lm_eval.tasks.ifeval.utils`` (its checkers and ``process_results``)."""
    use_punkt()
    import langdetect

    langdetect.DetectorFactory.seed = 0
    from lm_eval.tasks.ifeval import utils

    return utils


def check(instruction_ids: Sequence[str], kwargs: Sequence[dict[str, Any]]) -> None:
    """Build every instruction with its kwargs as the checkers do; a ValueError names the
    first that is unknown or does not build."""
    if not instruction_ids or len(instruction_ids) != len(kwargs):
        raise ValueError("give one kwargs object per instruction")
    registry = harness().instructions_registry.INSTRUCTION_DICT
    for instruction_id, arguments in zip(instruction_ids, kwargs):
        if instruction_id not in registry:
            raise ValueError(f"unknown instruction {instruction_id!r}")
        try:
            # The checkers drop empty values the same way before building.
            registry[instruction_id](instruction_id).build_description(
                **{k: v for k, v in arguments.items() if v}
            )
        except (TypeError, ValueError) as error:
            raise ValueError(f"{instruction_id}: {error}") from None


def score(record: dict[str, Any], answer: str) -> dict[str, float]:
    """IFEval's four scores of ``answer`` to ``record`` (IFEval's layout: ``key``,
    ``prompt``, ``instruction_id_list``, ``kwargs``). The instruction-level scores are the
    share of the prompt's instructions followed; ``instructions`` is their count, which
    weighs them when a summary pools instructions across prompts, as IFEval does."""
    result = harness().process_results(record, [answer])
    count = len(result["inst_level_strict_acc"])
    return {
        "prompt_level_strict_acc": float(result["prompt_level_strict_acc"]),
        "inst_level_strict_acc": sum(result["inst_level_strict_acc"]) / count,
        "prompt_level_loose_acc": float(result["prompt_level_loose_acc"]),
        "inst_level_loose_acc": sum(result["inst_level_loose_acc"]) / count,
        "instructions": float(count),
    }
