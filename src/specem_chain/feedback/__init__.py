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

``Feedback()`` keeps the weights in memory (``save`` and ``load`` write and read them as
JSON). ``Feedback.open(location, task=...)`` keeps them in a **feedback store** that holds
any number of named tasks and that every process opening it shares: a SQLite file for the
processes of one machine (:mod:`.sqlite`), or a PostgreSQL database for the replicas of a
fleet (:mod:`.postgres`, which answers on from the weights last read while the database is
down). Each answer is recorded in one transaction that reads and writes the task's weights
with its row locked, so concurrent answers lose none, and what is recorded survives a
restart. Every kind updates the weights with the same pure functions (:mod:`.update`).

- :mod:`.update`: the update, as pure functions;
- :mod:`.memory`: :class:`Feedback`, in memory;
- :mod:`.stored`: :class:`StoredFeedback`, a task of a store, and the stores' protocol;
- :mod:`.sqlite`, :mod:`.postgres`: the stores (:mod:`.postgres_sql`: the tables and
  transactions of the PostgreSQL one).
"""

from .memory import Feedback
from .sqlite import APPLICATION_ID
from .stored import StoredFeedback, StoreState, is_url
from .update import (
    DECAY,
    DEFAULT_TASK,
    TASK_NAME_LIMIT,
    carried_over,
    checked_decay,
    checked_task,
    final_weights,
    task_weights,
)

__all__ = [
    "APPLICATION_ID",
    "DECAY",
    "DEFAULT_TASK",
    "TASK_NAME_LIMIT",
    "Feedback",
    "StoreState",
    "StoredFeedback",
    "carried_over",
    "checked_decay",
    "checked_task",
    "final_weights",
    "is_url",
    "task_weights",
]
