"""`specem bench --concurrency ... --server URL`: the load benchmark through the server, with
the openai client."""

from __future__ import annotations

import json

from specem_chain.cli import app
from typer.testing import CliRunner


def test_the_load_benchmark_runs_through_a_server(tiny_server, tmp_path):
    args = ["bench", "--concurrency", "1,3", "--length", "6", "--repeats", "2"]
    args += ["--server", f"{tiny_server}/v1", "--out", str(tmp_path)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    written = json.loads((tmp_path / "load-server.json").read_text())
    assert written["modes"] == ["server"] and written["repeats"] == 2
    assert [r["concurrency"] for r in written["rows"]] == [1, 3]
    for row in written["rows"]:
        # From the provenance the server streamed: the request's length (6), not the
        # server's default (16); the tiny members' tokenisers may re-count a join upwards.
        assert 0 < row["answer_tokens"] < 16
        assert 0 < row["first_segment_s"]["median"] <= row["latency_s"]["p95"]
        assert row["peak_memory_mb"] is None  # the server's memory is not this process's
    assert "| server | 3 |" in (tmp_path / "load-server.md").read_text()
