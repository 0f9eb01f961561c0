"""The examples that the docs include: quickstart, provenance report, members."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from specem_chain import SpecEMChatModel

sys.path.insert(0, str(Path(__file__).parents[2] / "examples"))


@pytest.mark.models
@pytest.mark.heavy  # a minute on the default member, which tests/integration checks by default
def test_quickstart_prints_the_answers_and_the_provenance(capsys):
    from quickstart import main

    main(max_tokens=12)
    printed = capsys.readouterr().out
    assert "wins:" in printed and "weights:" in printed
    assert "qwen2.5-coder-1.5b-instruct:" in printed


def test_provenance_report_writes_a_page(tiny_models, tmp_path):
    from provenance_report import write_report

    llm = SpecEMChatModel(
        members=[str(tiny_models["llama"]), str(tiny_models["qwen2"])], max_tokens=12, seed=0
    )
    write_report(llm, "How many clips?", tmp_path / "answer.html")
    page = (tmp_path / "answer.html").read_text(encoding="utf-8")
    assert page.startswith("<!doctype html>") and 'class="seg' in page


def test_the_member_guides_ensembles_build_with_the_right_kinds():
    from members import local_ensemble, mixed_ensemble, remote_ensemble, vllm_ensemble

    local = local_ensemble("/models/my-model", "/models/phi.gguf")
    assert [m.kind for m in local.members] == ["local"] * 5
    assert [m.label for m in local.members][:3] == ["smollm2", "mine", "phi"]
    remote = remote_ensemble().members
    assert [m.kind for m in remote] == ["vllm", "vllm", "tgi", "openai"]
    assert [m.label for m in remote[:2]] == ["gpu-host-1:8000", "gpu-host-2:8000"]
    assert remote[3].model == "llama-3.2-3b"
    assert [m.kind for m in mixed_ensemble().members] == ["local", "vllm", "openai"]
    assert [m.label for m in vllm_ensemble().members] == ["gpu-1:8000", "gpu-2:8000", "served-name"]
