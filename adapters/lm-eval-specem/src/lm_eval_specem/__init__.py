"""SpecEM ensembles in the lm-evaluation-harness: the model ``specem`` (registered when this
package is imported) and local-file versions of the harness's gsm8k and ifeval tasks."""

from .model import SpecEMLM
from .tasks import TASKS_DIR

__all__ = ["TASKS_DIR", "SpecEMLM"]
