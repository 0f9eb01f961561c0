"""benchmarks/rag_context.py against a real vLLM server: both scoring routes answer the same
RAG prompt alike, and the server's own counters show the cached route reading the context
from its prefix cache."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.vllm

SCRIPT = Path(__file__).parents[2] / "benchmarks" / "rag_context.py"


def test_the_rag_benchmark_measures_both_routes_and_each_member_alone(vllm, tmp_path):
    out = tmp_path / "rag"
    command = [sys.executable, str(SCRIPT), "--lengths", "600", "--max-tokens", "16"]
    for name in ("a", "b"):  # two members on the one server
        command += ["-m", json.dumps({"source": vllm.url, "kind": "vllm", "name": name})]
    subprocess.run([*command, "--out", str(out)], check=True, timeout=900)
    answers = json.loads(out.with_suffix(".json").read_text())["answers"]
    systems = [(a["system"], a["route"]) for a in answers]
    assert systems == [
        ("ensemble", "prompt_logprobs"),
        ("ensemble", "auto"),
        *((m, "auto") for m in ("a", "b")),
    ]
    assert all(a["prompt_tokens"] >= 600 and a["tokens"] > 0 for a in answers)
    today, cached = answers[0], answers[1]
    assert cached["text"] == today["text"]  # the same scores, so the same answer
    assert cached["rounds"] == today["rounds"] > 1
    # each answer starts from an empty cache; only the cached route reads the context
    # from it to score (today's reads it only to draft)
    assert cached["cached"]["a"] > 5 * today["cached"]["a"] > 0
    assert all(a["peak_gb"]["a"] > 0.5 for a in answers)  # the server runs on this machine
    table = out.with_suffix(".md").read_text()
    assert table.count("| ensemble |") == 2 and "| yes |" in table
    rounds = out.with_name("rag-rounds.md").read_text()
    assert "ms a computed token" in rounds and rounds.count("\n") == 2 + len(answers)
