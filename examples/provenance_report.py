"""Write the provenance page of an answer: who wrote each segment, the losing candidates,
the score matrices and the weights over the rounds.

    ./run python examples/provenance_report.py answer.html
"""

from __future__ import annotations

import sys
from pathlib import Path

from specem_chain import SpecEMChatModel, report


def write_report(llm: SpecEMChatModel, question: str, path: Path) -> None:
    message = llm.invoke(question)
    path.write_text(report(message, question=question), encoding="utf-8")


if __name__ == "__main__":
    write_report(
        SpecEMChatModel(members=["smollm2", "qwen2.5-coder", "gemma3"], seed=0),
        "Natalia sold 48 clips in April and half as many in May. How many in total?",
        Path(sys.argv[1] if len(sys.argv) > 1 else "answer.html"),
    )
