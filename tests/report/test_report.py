"""The provenance page: built from an AIMessage or from `specem chat --json`, self-contained."""

from __future__ import annotations

import json
import re

import pytest
from langchain_core.messages import AIMessage
from typer.testing import CliRunner

from specem_chain import report
from specem_chain.cli import app


def segment_spans(page: str) -> list[str]:
    return re.findall(r'<span class="seg m\d+"[^>]*data-member="([^"]*)"', page)


def test_every_segment_is_a_span_of_its_member_in_order(tiny_answer):
    page = report(tiny_answer)
    segments = tiny_answer.response_metadata["specem"]["segments"]
    assert segment_spans(page) == [s["member"] for s in segments]
    assert page.count("<polyline") == 3  # one weight line per member


def test_the_page_is_self_contained(tiny_answer):
    page = report(tiny_answer, question="How many clips?")
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", page)
    assert "<script" not in page and "@import" not in page and "url(" not in page
    assert "How many clips?" in page


def test_cli_json_and_message_give_the_same_segments(tiny_answer):
    specem = tiny_answer.response_metadata["specem"]
    as_json = {
        "text": tiny_answer.content,
        "segments": specem["segments"],
        "members": list(specem["wins"]),
        "wins": specem["wins"],
        "weights": specem["weights"],
        "finish_reason": specem["finish_reason"],
    }
    assert report(as_json) == report(tiny_answer)


def test_text_is_escaped_and_clipped_to_the_answer():
    segment = {
        "text": "<b>x</b> & more",
        "member": "a",
        "candidates": [{"member": "a", "text": "<b>x</b> & more"}, {"member": "b", "text": "<i>"}],
        "verifiers": ["a", "b"],
        "scores": [[0.75, 0.25], [0.5, 0.5]],
        "weights": {"a": 0.5, "b": 0.5},
    }
    answer = {
        "text": "<b>x</b>",  # a stop sequence cut the answer inside the segment
        "segments": [segment],
        "members": ["a", "b"],
        "wins": {"a": 1, "b": 0},
        "weights": {"a": 0.5, "b": 0.5},
    }
    page = report(answer)
    assert "<b>x</b>" not in page and "<i>" not in page
    assert 'data-member="a">&lt;b&gt;x&lt;/b&gt;<span class="tip"' in page
    assert "&lt;i&gt;" in page  # the losing candidate
    assert ">0.625<" in page  # weighted total of a: 0.5 * 0.75 + 0.5 * 0.5


def test_a_message_without_provenance_is_a_clear_error():
    with pytest.raises(ValueError, match="no SpecEM provenance"):
        report(AIMessage(content="hello"))
    with pytest.raises(ValueError, match="missing members, segments"):
        report({"text": "hello", "wins": {}, "weights": {}})


def test_cli_writes_the_report_with_and_without_json(tiny_models, tmp_path):
    members = ["-m", str(tiny_models["llama"]), "-m", str(tiny_models["qwen2"])]
    runner = CliRunner()
    for extra in ([], ["--json"]):
        path = tmp_path / f"out{len(extra)}.html"
        args = ["chat", "How many clips?", *members, "--max-tokens", "12", "--seed", "1"]
        result = runner.invoke(app, [*args, *extra, "--report", str(path)])
        assert result.exit_code == 0, result.output
        page = path.read_text(encoding="utf-8")
        assert segment_spans(page) and "How many clips?" in page
        if extra:
            answer = json.loads(result.stdout)
            assert segment_spans(page) == [s["member"] for s in answer["segments"]]


def test_cli_report_into_a_missing_folder_fails_before_answering(tmp_path):
    result = CliRunner().invoke(app, ["chat", "hi", "--report", str(tmp_path / "no" / "x.html")])
    assert result.exit_code == 2
    message = " ".join(result.stderr.split())
    assert "--report: folder" in message and "does not exist" in message
