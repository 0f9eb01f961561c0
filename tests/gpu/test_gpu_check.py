"""The GPU check (benchmarks/gpu/check.py) runs end to end on the CPU, so that it cannot
break unseen before a GPU runs it: its tiny part as it runs there (float32 instead of
bfloat16), and its real-size timings with the same code at a size a CPU runs in seconds."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

CHECK = Path(__file__).parents[2] / "benchmarks" / "gpu" / "check.py"


def load_check():
    spec = importlib.util.spec_from_file_location("gpu_check", CHECK)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_gpu_check_runs_on_the_cpu(tmp_path):
    check = load_check()
    argv = ["--device", "cpu", "--part", "all", "--scale", "tiny", "--out", str(tmp_path)]
    assert check.main([*argv, "--tokens", "20"]) == 0
    result = json.loads((tmp_path / "gpu-check.json").read_text())
    assert result["passed"] and result["dtype"] == "float32"
    failed = {name: c.get("error") for name, c in result["checks"].items() if not c["passed"]}
    assert failed == {}
    assert len(result["checks"]) == 8
    passes = result["checks"]["streamed two-member answer, forward passes counted"]["detail"]
    assert all(passes[m]["passes_from_position_0"] == 1 for m in ("llama", "qwen2"))

    real = result["real"]
    assert real["scale"] == "tiny" and real["tokens"] == 20
    rows = {row["system"]: row for row in real["rows"]}
    assert list(rows) == [
        "qwen2.5-1.5b alone",
        "qwen2.5-7b alone",
        "qwen2.5-1.5b generate",
        "qwen2.5-7b generate",
        "ensemble (pool)",
        "anchored (qwen2.5-7b anchors)",
    ]
    for row in rows.values():  # every answer ran to its fixed length
        assert row["finish_reasons"] == ["length"] and row["answer_tokens"] >= 20
        assert row["tokens_per_s"] > 0 and row["peak_gpu_gib"] is None
    for name in ("ensemble (pool)", "anchored (qwen2.5-7b anchors)"):
        assert rows[name]["overhead_vs_slower_alone"] > rows[name]["overhead_vs_both_alone"] > 0
    assert 0 <= rows["anchored (qwen2.5-7b anchors)"]["share_of_rounds_anchor_alone"] <= 1

    page = (tmp_path / "gpu-check.md").read_text()
    assert "| inline scores (qwen2) | passed |" in page
    assert "| ensemble (pool) | 1 |" in page and "every answer to max_tokens" in page
