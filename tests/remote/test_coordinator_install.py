"""The coordinator-only install (no extras, so no torch, no llama.cpp) runs a remote
ensemble, and serves it with the OpenAI-compatible server."""

from __future__ import annotations

import json
import subprocess
import venv
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

# A fresh virtual environment and a pip install of the package (over a minute): a packaging
# check, among the heavy ones that CI runs as a step of their own.
pytestmark = pytest.mark.heavy

SCRIPT = """
import importlib.util, json, sys
assert importlib.util.find_spec("torch") is None, "torch is installed"
from specem_chain import Member, SpecEMChatModel
tgi_url, llama_url, template = sys.argv[1:4]
llm = SpecEMChatModel(
    members=[
        f"tgi+{tgi_url}",
        Member.openai_completions(llama_url, name="llama", chat_template=template),
    ],
    max_tokens=8,
    window=4,
    seed=0,
)
message = llm.invoke("Name a fruit.")
print(json.dumps({"text": message.content, "meta": message.response_metadata["specem"]}))
"""


def test_the_coordinator_install_runs_a_remote_ensemble_without_torch(
    tmp_path, tiny_tgi_url, smollm2_llama
):
    env_dir = tmp_path / "coordinator"
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    server = REPO / "adapters" / "specem-openai-server"
    install = subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", str(REPO), str(server)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert install.returncode == 0, install.stderr[-3000:]
    template = (smollm2_llama.folder / "chat_template.jinja").read_text()
    run = subprocess.run(
        [str(python), "-c", SCRIPT, tiny_tgi_url, smollm2_llama.url, template],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads(run.stdout.strip().splitlines()[-1])
    assert result["text"].strip()
    assert set(result["meta"]["wins"]) == {tiny_tgi_url.removeprefix("http://"), "llama"}
    serve = subprocess.run(
        [str(env_dir / "bin" / "specem"), "serve", "--help"], capture_output=True, text=True
    )
    assert serve.returncode == 0 and "--api-key" in serve.stdout, serve.stderr[-3000:]
    assert result["meta"]["dropped"] == {}
