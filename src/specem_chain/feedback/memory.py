"""A task's feedback kept in memory: :class:`Feedback`, which :meth:`Feedback.open` turns
into a task of a feedback store instead (:mod:`.stored`)."""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .update import DECAY, DEFAULT_TASK, carried_over, checked_decay, final_weights, task_weights

if TYPE_CHECKING:
    from .stored import StoreState


class Feedback:
    """Members' weights kept across the requests of one task (see :mod:`specem_chain.feedback`),
    in memory; :meth:`open` keeps them in a feedback store instead."""

    location: str | None = None
    """Where the task is kept, as :meth:`open` takes it: a SQLite file's path or a
    PostgreSQL URL (None: in memory). A URL may hold a password: show :attr:`where`."""
    path: Path | None = None
    """The SQLite feedback store holding the weights (None: in memory, or PostgreSQL)."""
    task: str | None = None
    """The task's name in the feedback store (None: in memory)."""

    def __init__(self, decay: float = DECAY, log_weights: Mapping[str, float] | None = None):
        self.decay = checked_decay(decay)
        self._log_weights = dict(log_weights or {})
        self._answers = 0
        self._lock = threading.Lock()

    @classmethod
    def open(
        cls, location: str | Path, task: str = DEFAULT_TASK, decay: float | None = None
    ) -> Feedback:
        """The feedback of ``task`` kept in the feedback store at ``location``, which holds
        any number of named tasks, is shared by every thread and process that opens it, and
        is kept across restarts:

        - a path: a SQLite file (made where there is none yet, in a folder that exists), for
          the processes of one machine;
        - a ``postgresql://`` URL (libpq's form; the ``PG*`` variables fill in what it
          leaves out, such as ``PGPASSWORD``): a PostgreSQL database (its tables made where
          there are none yet), for every replica of a fleet. Needs the postgres extra.
          While the database cannot be reached, answers start from the weights last read
          and their records wait in memory, to be written in order when it is back
          (:mod:`.postgres`).

        A task's ``decay`` is set when it is first opened (None: :data:`DECAY`) and stays:
        opening it again with another one is an error (None keeps it). A store that cannot
        be opened or is not a feedback store raises
        :class:`~specem_chain.errors.FeedbackError` naming the problem (never a password);
        a blank task name or a decay out of range, ValueError."""
        from .stored import open_stored

        return open_stored(location, task, decay)

    def __repr__(self) -> str:
        try:
            state = self.to_json()
        except ValueError as error:
            return f"Feedback({self._where()}cannot be read: {error})"
        logs = state["log_weights"]
        shown = ", ".join(f"{m}: {w:.3f}" for m, w in task_weights(logs, list(logs)).items())
        return (
            f"Feedback({self._where()}decay={state['decay']}, answers={state['answers']}, "
            f"weights={{{shown}}})"
        )

    def _where(self) -> str:
        return ""

    @property
    def where(self) -> str | None:
        """Where the task is kept, to show: a path, or a URL without its password (None:
        in memory)."""
        return None

    @property
    def answers(self) -> int:
        """Answers recorded so far."""
        return self._answers

    def weights(self, members: Sequence[str]) -> dict[str, float]:
        """The task's weights of ``members`` (uniform for members it has not seen)."""
        with self._lock:
            logs = {m: self._log_weights[m] for m in members if m in self._log_weights}
        return task_weights(logs, members)

    def record(self, weights: Mapping[str, float], dropped: Iterable[str] = ()) -> None:
        """Carry an answer's final weights over to the task (:func:`carried_over`). A member
        dropped from the answer (its server kept failing) keeps its task weight: an outage
        says nothing of its answers."""
        final = final_weights(weights, dropped)
        if not final:
            return
        with self._lock:
            self._log_weights.update(carried_over(self._log_weights, final, self.decay))
            self._answers += 1

    async def aweights(self, members: Sequence[str]) -> dict[str, float]:
        """:meth:`weights`, for a caller on an event loop (a store is read without
        blocking it)."""
        return self.weights(members)

    async def arecord(self, weights: Mapping[str, float], dropped: Iterable[str] = ()) -> None:
        """:meth:`record`, for a caller on an event loop (a store is written without
        blocking it)."""
        self.record(weights, dropped)

    def state(self) -> StoreState | None:
        """The feedback store's state as this process last saw it, without asking it
        (None: in memory)."""
        return None

    async def probe(self) -> StoreState | None:
        """The feedback store's state now: whether it answers, and the records that wait
        in memory for it (None: in memory)."""
        return None

    def close(self) -> None:
        """Let go of the connections this object holds open (none in memory)."""

    # -- saving and loading ---------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        """The weights as they are now: decay, answers and log-weights."""
        with self._lock:
            return {
                "decay": self.decay,
                "answers": self._answers,
                "log_weights": dict(self._log_weights),
            }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Feedback:
        try:
            feedback = Feedback(
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
