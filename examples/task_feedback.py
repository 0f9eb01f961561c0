"""Task-level feedback: the members' weights carried from one question of a task to the next,
which let the default gate (0.8) rest a member the task has found weak (docs: Concepts ->
Policies). It is for an ensemble of different members, here the two built-in chat models.
The weights are kept in a feedback store, a SQLite file that any process may open too.

    ./run python examples/task_feedback.py
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from specem_chain import Feedback, SpecEMChatModel

PAIR = ("smollm2-135m-instruct", "qwen2.5-coder-0.5b-instruct")


def answer_task(
    questions: Sequence[str],
    store: Path,
    members: Sequence[str] = PAIR,
    max_tokens: int = 256,
) -> list[str]:
    """Answer the questions of the task "maths" in order; its weights are kept in the
    feedback store at ``store`` between runs."""
    # --8<-- [start:feedback]
    feedback = Feedback.open(store, task="maths")  # the file is made on first use
    llm = SpecEMChatModel(members=members, feedback=feedback, seed=0, max_tokens=max_tokens)
    answers = [llm.invoke(question).content for question in questions]  # each is recorded
    # --8<-- [end:feedback]
    return [str(a) for a in answers]


if __name__ == "__main__":
    maths = [
        "A pen costs 3 dollars. How much do 4 pens cost?",
        "Tom has 12 apples and gives away 5. How many are left?",
    ]
    for text in answer_task(maths, Path("tasks.db")):
        print(text, "\n")
    print(Feedback.open("tasks.db", task="maths"))
