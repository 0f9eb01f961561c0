"""Task-level feedback: the members' weights, kept across the requests of one task.

The paper resets every member's weight to uniform at the start of each request, so nothing
learnt about a task carries over to its next question. A :class:`Feedback` object, held by
the user and passed to every request of one task, carries it over:

- a request starts from the task's weights;
- when it ends, the task's log-weights become the answer's final ones (where the request's
  own feedback left them), pulled toward uniform by ``decay``;
- under a policy with a gate, a member whose weight is low enough stops drafting (it keeps
  verifying); as the decay pulls its weight back toward uniform over the next requests, it
  is re-admitted and judged again.

The same seed and the same starting weights give the same answer. Updates are made under a
lock, so concurrent requests may share one object; their order then decides the weights.
"""

from __future__ import annotations

import json
import math
import os
import threading
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from .engine.roster import normalised

DECAY = 0.2
"""How far each answer pulls the task's log-weights back toward uniform."""


class Feedback:
    """Members' weights kept across the requests of one task (see the module)."""

    def __init__(self, decay: float = DECAY, log_weights: Mapping[str, float] | None = None):
        if not 0.0 <= decay <= 1.0:
            raise ValueError(f"decay must be between 0 and 1, got {decay}")
        self.decay = decay
        self._log_weights = dict(log_weights or {})
        self._answers = 0
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        shown = ", ".join(f"{m}: {w:.3f}" for m, w in self.weights(list(self._log_weights)).items())
        return f"Feedback(decay={self.decay}, answers={self._answers}, weights={{{shown}}})"

    @property
    def answers(self) -> int:
        """Answers recorded so far."""
        return self._answers

    def weights(self, members: Sequence[str]) -> dict[str, float]:
        """The task's weights of ``members`` (uniform for members it has not seen)."""
        with self._lock:
            logs = [self._log_weights.get(m, 0.0) for m in members]
        if not logs:
            return {}
        top = max(logs)
        return dict(zip(members, normalised([math.exp(x - top) for x in logs])))

    def record(self, weights: Mapping[str, float], dropped: Iterable[str] = ()) -> None:
        """Carry an answer's final weights over to the task. A member dropped from the
        answer (its server kept failing) keeps its task weight: an outage says nothing of
        its answers."""
        kept = {m: w for m, w in weights.items() if m not in set(dropped) and w > 0}
        if not kept:
            return
        logs = {m: math.log(w) for m, w in kept.items()}
        centre = math.fsum(logs.values()) / len(logs)
        with self._lock:
            # the kept members keep their mean task log-weight among them, so the weights of
            # members that were not in this answer (or dropped from it) keep their meaning
            before = math.fsum(self._log_weights.get(m, 0.0) for m in logs) / len(logs)
            for member, log in logs.items():
                self._log_weights[member] = (1.0 - self.decay) * (log - centre + before)
            self._answers += 1

    # -- saving and loading ---------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        with self._lock:
            return {
                "decay": self.decay,
                "answers": self._answers,
                "log_weights": dict(self._log_weights),
            }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Feedback:
        try:
            feedback = cls(
                float(data["decay"]), {str(m): float(w) for m, w in data["log_weights"].items()}
            )
            feedback._answers = int(data.get("answers", 0))
        except (KeyError, TypeError, ValueError, AttributeError) as error:
            raise ValueError(f"not a saved Feedback: {error}") from None
        return feedback

    def save(self, path: str | Path) -> None:
        """Write the weights as JSON to ``path``, replacing it whole: a save cut short
        leaves the file as it was."""
        path = Path(path)
        text = json.dumps(self.to_json(), indent=2) + "\n"
        # a name of its own, so that saves from two threads cannot write one partial file
        partial = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.partial")
        try:
            partial.write_text(text, encoding="utf-8")
            partial.replace(path)
        finally:
            partial.unlink(missing_ok=True)

    @classmethod
    def load(cls, path: str | Path) -> Feedback:
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, ValueError) as error:
            raise ValueError(f"cannot read feedback from {path}: {error}") from None
        return cls.from_json(data)
