"""Task configs for the harness (``--include_path``): ``gsm8k_local`` and ``ifeval_local``,
the harness's own gsm8k and ifeval on local JSONL files (see :mod:`.local`)."""

from pathlib import Path

TASKS_DIR = Path(__file__).parent
"""The folder to give the harness as ``--include_path`` (or ``TaskManager(include_path=...)``)."""
