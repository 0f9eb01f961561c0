"""The specem command: streaming, JSON output, and clear errors for bad input."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from specem_chain import Feedback, RequestSettings
from specem_chain.cli import app
from specem_chain.models import BUILTINS

runner = CliRunner()


def specem(*args: str):
    return runner.invoke(app, list(args))


@pytest.fixture
def pair_args(tiny_models) -> list[str]:
    return ["-m", str(tiny_models["llama"]), "-m", str(tiny_models["qwen2"])]


def test_json_output_has_text_segments_members_usage_and_finish(pair_args):
    result = specem(
        "chat", "How many clips?", *pair_args, "--seed", "1", "--max-tokens", "20", "--json"
    )
    assert result.exit_code == 0, result.output
    answer = json.loads(result.stdout)
    assert set(answer) >= {"text", "segments", "members", "usage", "finish_reason"}
    assert answer["members"] == ["llama", "qwen2"]
    assert answer["text"] == "".join(s["text"] for s in answer["segments"])
    for segment in answer["segments"]:
        assert segment["member"] in answer["members"]
        assert {c["member"] for c in segment["candidates"]} <= set(answer["members"])
        assert set(segment["weights"]) == set(answer["members"])
    assert answer["usage"]["input_tokens"] > 0


def test_streaming_prints_the_answer_and_a_summary(pair_args):
    result = specem("chat", "How many clips?", *pair_args, "--seed", "2", "--max-tokens", "12")
    assert result.exit_code == 0, result.output
    assert "wins" in result.stdout and "weight" in result.stdout


def test_feedback_carries_the_weights_from_one_answer_to_the_next(pair_args, tmp_path):
    path = tmp_path / "task.json"
    args = ["--max-tokens", "20", "--gate", "0.8", "--feedback", str(path), "--json"]
    first = specem("chat", "How many clips?", *pair_args, "--seed", "1", *args)
    assert first.exit_code == 0, first.output
    assert json.loads(first.stdout)["start_weights"] == {"llama": 0.5, "qwen2": 0.5}
    after_first = Feedback.load(path)
    assert after_first.answers == 1
    assert after_first.weights(["llama", "qwen2"]) != {"llama": 0.5, "qwen2": 0.5}

    second = specem("chat", "And in May?", *pair_args, "--seed", "2", *args)
    assert second.exit_code == 0, second.output
    assert json.loads(second.stdout)["start_weights"] == pytest.approx(
        after_first.weights(["llama", "qwen2"])
    )
    assert Feedback.load(path).answers == 2
    # the console may wrap a long path anywhere, even inside it: compare without whitespace
    assert "".join(f"feedback: {path} (2 answers)".split()) in "".join(second.stderr.split())


@pytest.mark.parametrize(
    ("saved", "message"),
    [("not json", "--feedback: cannot read feedback from"), ("{}", "--feedback: not a saved")],
)
def test_a_bad_feedback_file_is_an_error_before_any_member_runs(tmp_path, saved, message):
    path = tmp_path / "task.json"
    path.write_text(saved)
    result = specem("chat", "hi", "-m", "no-such-model", "--feedback", str(path))
    assert result.exit_code == 2
    assert message in " ".join(result.stderr.split())
    assert path.read_text() == saved


def test_a_feedback_store_keeps_a_tasks_weights_from_one_chat_to_the_next(pair_args, tmp_path):
    path = tmp_path / "tasks.db"
    args = ["--max-tokens", "20", "--feedback", str(path), "--task", "clips", "--json"]
    first = specem("chat", "How many clips?", *pair_args, "--seed", "1", *args)
    assert first.exit_code == 0, first.output
    assert json.loads(first.stdout)["start_weights"] == {"llama": 0.5, "qwen2": 0.5}
    after_first = Feedback.open(path, "clips").weights(["llama", "qwen2"])
    assert after_first != {"llama": 0.5, "qwen2": 0.5}

    second = specem("chat", "And in May?", *pair_args, "--seed", "2", *args)
    assert second.exit_code == 0, second.output
    assert json.loads(second.stdout)["start_weights"] == pytest.approx(after_first)
    assert Feedback.open(path, "clips").answers == 2
    assert Feedback.open(path).answers == 0  # the default task is another one
    said = "".join(f"feedback: {path}, task clips (2 answers)".split())
    assert said in "".join(second.stderr.split())


def test_a_feedback_path_that_is_not_a_store_is_an_error_before_any_member_runs(tmp_path):
    path = tmp_path / "notes.txt"
    path.write_text("some notes, not a database of any kind\n")
    result = specem("chat", "hi", "-m", "no-such-model", "--feedback", str(path))
    assert result.exit_code == 2
    assert "notes.txt' is not a feedback store" in " ".join(result.stderr.split())
    assert path.read_text() == "some notes, not a database of any kind\n"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["chat", "hi", "-m", "no-such-model"], "unknown member 'no-such-model'"),
        (["chat", "hi", "-m", "/no/such/folder"], "does not exist"),
        (["chat", "hi", "-m", "./missing.gguf"], "does not exist"),
        (["chat", "hi", "--window", "0"], "--window: Input should be greater than or equal to 1"),
        (["chat", "hi", "--max-tokens", "0"], "--max-tokens"),
        (["chat", "hi", "--scoring", "best"], "--scoring"),
        (["chat", "hi", "--repeat-penalty", "0.5"], "--repeat-penalty: Input should be"),
        (["chat", "hi", "--loop-penalty", "0.9"], "--loop-penalty: Input should be"),
        (["chat", "hi", "--temperature", "-1"], "--temperature: Input should be"),
        (["chat", "hi", "--drafts", "0"], "--drafts: Input should be greater than or equal to 1"),
        (["chat", "hi", "--answer-timeout", "0"], "--answer-timeout: Input should be greater"),
        (["chat", "hi", "--preset", "best"], "--preset: Input should be 'rerank'"),
        (["chat", "   "], "the prompt is empty"),
        (["chat", "hi", "--feedback", "/no/such/folder/task.json"], "--feedback: folder"),
        (["chat", "hi", "--feedback", "/no/such/folder/tasks.db"], "--feedback: folder"),
        (["chat", "hi", "--task", "maths"], "--task: give --feedback too"),
        (
            ["chat", "hi", "--feedback", "/no/such/folder/task.json", "--task", "maths"],
            "--task: a JSON feedback file holds one task",
        ),
        (["chat", "hi", "--feedback", "/tmp/tasks.db", "--task", " "], "--task: a task is named"),
        (["chat", "hi", "--gate", "1"], "--gate: Input should be less than 1"),
        (["chat", "hi", "-m", "smollm2", "-m", "smollm2"], "member names must be unique"),
        (["bench", "-m", "no-such-model"], "unknown member 'no-such-model'"),
        (["bench", "-m", "smollm2", "-m", "smollm2"], "member names must be unique"),
    ],
)
def test_bad_input_gets_a_clear_error_and_no_traceback(args, message):
    result = specem(*args)
    assert result.exit_code == 2
    assert message in " ".join(result.stderr.split())
    assert "Traceback" not in result.output


def test_chat_has_an_option_for_every_request_setting():
    help_text = " ".join(specem("chat", "--help").stdout.split())
    for name in RequestSettings.model_fields:
        assert f"--{name.replace('_', '-')}" in help_text


def test_a_prompt_longer_than_a_members_context_is_a_clear_error(pair_args):
    result = specem("chat", "clips " * 400, *pair_args)
    assert result.exit_code == 2
    assert "context holds 256" in " ".join(result.stderr.split())
    assert "Traceback" not in result.output


def test_models_list_names_every_built_in_member():
    result = specem("models", "list")
    assert result.exit_code == 0, result.output
    for name in BUILTINS:
        assert name in result.stdout
    assert "default" in result.stdout and "optional" in result.stdout


def test_models_pull_rejects_an_unknown_name():
    result = specem("models", "pull", "no-such-model")
    assert result.exit_code == 2
    assert "not a built-in model" in " ".join(result.stderr.split())
