"""The online update of a task's weights, as pure functions: what every kind of
:class:`~specem_chain.feedback.Feedback` (in memory, or in a feedback store) computes."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence

from ..engine.roster import normalised

DECAY = 0.2
"""How far each answer pulls the task's log-weights back toward uniform."""
DEFAULT_TASK = "default"
"""The task a feedback store's answers count toward when none is named."""
TASK_NAME_LIMIT = 200
"""The longest task name, in characters."""


def task_weights(log_weights: Mapping[str, float], members: Sequence[str]) -> dict[str, float]:
    """The weights of ``members`` given the task's log-weights (a member the task has not
    seen has log-weight 0, the uniform one)."""
    logs = [log_weights.get(m, 0.0) for m in members]
    if not logs:
        return {}
    top = max(logs)
    return dict(zip(members, normalised([math.exp(x - top) for x in logs])))


def final_weights(weights: Mapping[str, float], dropped: Iterable[str] = ()) -> dict[str, float]:
    """The final weights of an answer that carry over to its task: those of the members it
    kept, above zero. A member dropped from the answer (its server kept failing) keeps its
    task weight: an outage says nothing of its answers."""
    out = set(dropped)
    return {m: w for m, w in weights.items() if m not in out and w > 0}


def carried_over(
    log_weights: Mapping[str, float], final: Mapping[str, float], decay: float
) -> dict[str, float]:
    """The task's new log-weights of the members of ``final`` (an answer's
    :func:`final_weights`), from their log-weights before it: the answer's log-weights,
    centred on the kept members' mean task log-weight and pulled toward uniform by
    ``decay``. The other members' log-weights do not change."""
    if not final:
        return {}
    logs = {m: math.log(w) for m, w in final.items()}
    centre = math.fsum(logs.values()) / len(logs)
    # the kept members keep their mean task log-weight among them, so the weights of
    # members that were not in this answer (or dropped from it) keep their meaning
    before = math.fsum(log_weights.get(m, 0.0) for m in logs) / len(logs)
    return {m: (1.0 - decay) * (log - centre + before) for m, log in logs.items()}


def checked_decay(decay: float) -> float:
    if not 0.0 <= decay <= 1.0:
        raise ValueError(f"decay must be between 0 and 1, got {decay}")
    return decay


def checked_task(task: str) -> str:
    if not isinstance(task, str) or not task.strip() or len(task) > TASK_NAME_LIMIT:
        raise ValueError(
            f"a task is named by 1 to {TASK_NAME_LIMIT} characters, not all blank; got {task!r}"
        )
    return task
