"""``benchmarks/serve_faults.py`` end to end: ``specem serve --workers 2`` on two TGI test
servers (tiny models), the second killed with SIGKILL and started again by the benchmark's
own commands, as an operator's would against real servers."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import httpx
import pytest
from remote.remote_servers import TGI_TEST_SERVER, running
from test_serve_command import free_port

BENCHMARK = Path(__file__).parents[3] / "benchmarks" / "serve_faults.py"


# The benchmark run end to end (over a minute): test_remote_ensemble.py checks a member
# dropped mid-answer and test_ready_and_drain.py readiness through an outage, by default.
@pytest.mark.heavy
def test_every_request_through_a_killed_and_restarted_member_ends_clearly(tiny_models, tmp_path):
    steady, faulty = free_port(), free_port()
    pid = tmp_path / "faulty.pid"
    serve = shlex.join([sys.executable, str(TGI_TEST_SERVER), str(tiny_models["qwen2"])])
    control = tmp_path / "faulty"
    control.write_text(
        "#!/bin/sh\n"
        f'if [ "$1" = start ]; then {serve} --port {faulty} >>{tmp_path}/faulty.log 2>&1 &'
        f" echo $! >{pid}; else kill -9 $(cat {pid}); fi\n"
    )
    control.chmod(0o755)
    subprocess.run([str(control), "start"], check=True)
    steady_server = [sys.executable, str(TGI_TEST_SERVER), str(tiny_models["llama"])]
    try:
        deadline = time.monotonic() + 240
        while True:  # the faulty member's server, started by its own command
            try:
                if httpx.get(f"http://127.0.0.1:{faulty}/health").status_code == 200:
                    break
            except httpx.TransportError:
                assert time.monotonic() < deadline, (tmp_path / "faulty.log").read_text()
                time.sleep(0.2)
        steady_url = f"http://127.0.0.1:{steady}"
        with running(
            [*steady_server, "--port", str(steady)], f"{steady_url}/health", tmp_path / "steady.log"
        ):
            args = ["--out", str(tmp_path / "faults"), "--port", str(free_port())]
            args += ["-m", f"tgi+{steady_url}", "-m", f"tgi+http://127.0.0.1:{faulty}"]
            args += ["--faulty", "2", "--kill", f"{control} kill", "--restart", f"{control} start"]
            # enough requests that some start after the restart (a second or two here)
            args += ["--requests", "160", "--clients", "2", "--kill-after", "2", "--down", "0"]
            args += ["--max-tokens", "48", "--timeout", "120"]
            run = subprocess.run(
                [sys.executable, str(BENCHMARK), *args], capture_output=True, text=True, timeout=900
            )
    finally:
        subprocess.run([str(control), "kill"], capture_output=True)
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads((tmp_path / "faults.json").read_text())
    outcomes = Counter(a["outcome"] for a in result["asked"])
    # every request accounted for: answered, or ended with an error the client read
    assert sum(outcomes.values()) == 160 and set(outcomes) <= {"ok", "error"}, outcomes
    timeline = result["timeline"]
    assert timeline["healthy"] is not None, timeline  # back before the run ended
    assert timeline["killed"] < timeline["restarted"] <= timeline["healthy"]
    answered_after = [
        a for a in result["asked"] if a["outcome"] == "ok" and a["started"] >= timeline["healthy"]
    ]
    assert answered_after and all(result["faulty"] in a["members"] for a in answered_after)
    assert result["metrics"]["specem_requests_total{outcome=ok}"] == outcomes["ok"]
    assert "| all | 160 |" in (tmp_path / "faults.md").read_text()
