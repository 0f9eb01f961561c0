"""``benchmarks/serve_guard.py`` end to end, short: ``specem serve`` with one answer slot and
no queue on a slow TGI test server (tiny model), four clients at once, then wrong keys."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from remote.remote_servers import tgi_server
from test_serve_command import free_port

BENCHMARK = Path(__file__).parents[3] / "benchmarks" / "serve_guard.py"


@pytest.mark.heavy  # a minute: test_admission.py checks the 429s and test_keys.py the 401s
def test_the_excess_is_refused_and_wrong_keys_reach_no_member(tiny_models, tmp_path):
    with tgi_server(tmp_path, "--delay", "0.2", model=tiny_models["llama"]) as (url, _):
        args = ["--out", str(tmp_path / "guard"), "--port", str(free_port())]
        args += ["-m", f"tgi+{url}", "--member-metrics", f"{url}/metrics"]
        args += ["--concurrent", "1", "--rounds", "2", "--max-tokens", "8", "--wrong-keys", "40"]
        run = subprocess.run(
            [sys.executable, str(BENCHMARK), *args], capture_output=True, text=True, timeout=600
        )
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads((tmp_path / "guard.json").read_text())
    assert result["alone"]["outcomes"] == {"ok": 2}
    assert result["overload"]["outcomes"] == {"ok": 2, "refused": 6}  # one slot, no queue
    wrong = result["wrong_key"]
    assert wrong["statuses"] == {"401": 40}
    assert wrong["members_changed"] == {f"{url}/metrics": {}}
    # the server counted the refusals and nothing else: no request, no drafted token
    assert wrong["server_changed"] == {'specem_rejected_total{"reason": "invalid_api_key"}': 40}
    assert "| wrong key (401) | 40 |" in (tmp_path / "guard.md").read_text()
