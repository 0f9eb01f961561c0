"""``gsm8k_local`` and ``ifeval_local``: the harness's own gsm8k and ifeval tasks, read from
the harness's YAML files (prompts, few-shot settings, filters, metrics), with their data
from local JSONL files instead of the Hugging Face hub.

The files are named in the task metadata (``--metadata`` on the command line, or
``TaskManager(metadata=...)``): ``gsm8k_test`` and ``gsm8k_train`` (``{"question",
"answer"}`` lines, the answer ending in ``#### N``), and ``ifeval_data`` (IFEval's layout).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, ClassVar

import lm_eval.tasks
from datasets import Dataset, DatasetDict
from lm_eval.api.task import ConfigurableTask
from lm_eval.tasks._yaml_loader import load_yaml

from specem_chain.evaluation.punkt import use_punkt

HARNESS_TASKS = Path(lm_eval.tasks.__file__).parent


class LocalTask(ConfigurableTask):
    """A harness task with its config read from the harness's YAML file :attr:`HARNESS`
    and its dataset from :meth:`data`."""

    HARNESS: ClassVar[str]

    def __init__(self, config: dict[str, Any]) -> None:
        base = load_yaml(HARNESS_TASKS / self.HARNESS)
        ours = {k: v for k, v in config.items() if k != "class"}
        metadata = {**(base.get("metadata") or {}), **(ours.get("metadata") or {})}
        super().__init__(config={**base, **ours, "metadata": metadata, "custom_dataset": self.data})

    @staticmethod
    def data(**metadata: Any) -> DatasetDict:
        raise NotImplementedError


class GSM8KLocal(LocalTask):
    HARNESS = "gsm8k/gsm8k.yaml"

    @staticmethod
    def data(*, gsm8k_test: str | None = None, gsm8k_train: str | None = None, **_: Any):
        if not gsm8k_test:
            raise ValueError(
                "gsm8k_local reads its problems from local files: give --metadata "
                '\'{"gsm8k_test": "test.jsonl", "gsm8k_train": "train.jsonl"}\' '
                '({"question", "answer"} lines; the train file holds the few-shot '
                "examples, and without it run with --num_fewshot 0)"
            )
        train = jsonl(gsm8k_train) if gsm8k_train else []
        return DatasetDict(
            {"test": Dataset.from_list(jsonl(gsm8k_test)), "train": Dataset.from_list(train)}
        )


class IFEvalLocal(LocalTask):
    HARNESS = "ifeval/ifeval.yaml"

    def __init__(self, config: dict[str, Any]) -> None:
        use_punkt()  # before the harness's checkers are imported, so they find it
        super().__init__(config)

    @staticmethod
    def data(*, ifeval_data: str | None = None, **_: Any):
        if not ifeval_data:
            raise ValueError(
                "ifeval_local reads its prompts from a local file: give --metadata "
                '\'{"ifeval_data": "prompts.jsonl"}\' (IFEval\'s layout: "key", "prompt", '
                '"instruction_id_list", "kwargs")'
            )
        # The harness's ifeval.yaml evaluates its "train" split, the only one IFEval has.
        return DatasetDict({"train": Dataset.from_list(jsonl(ifeval_data))})


def jsonl(path: str) -> list[dict[str, Any]]:
    """The JSON objects of a JSONL file, one a line."""
    lines = Path(path).expanduser().read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines if line.strip()]
