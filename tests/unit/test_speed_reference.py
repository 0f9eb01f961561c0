"""A speed run can take the reference design's figures from an earlier run's JSON."""

from __future__ import annotations

import json

import pytest

from specem_chain.benchmark.speed import ReferenceFigures, reference_figures, table
from specem_chain.errors import SpecEMError
from specem_chain.members import Member

MEMBERS = [Member(source="smollm2", backend="llamacpp"), Member(source="qwen2.5-coder")]
LABELS = [m.label for m in MEMBERS]


def earlier_run(path, **changes):
    run = {
        "members": LABELS,
        "window": 10,
        "reference_repeats": 3,
        "rows": [
            {"length": n, "reference_seconds_per_token": {"min": n / 1000, "median": n / 900}}
            for n in (64, 512)
        ],
    }
    path.write_text(json.dumps(run | changes))
    return path


def test_the_figures_come_with_how_they_were_measured(tmp_path):
    path = earlier_run(tmp_path / "speed-transformers.json")
    figures = reference_figures(path, MEMBERS, [64, 512])
    assert figures == ReferenceFigures(
        seconds_per_token={
            64: {"min": 0.064, "median": 64 / 900},
            512: {"min": 0.512, "median": 512 / 900},
        },
        repeats=3,
        source=str(path),
    )


@pytest.mark.parametrize(
    ("changes", "lengths", "message"),
    [
        ({"members": LABELS[:1]}, [64], "measured members"),
        ({"window": 6}, [64], "with window 6"),
        ({}, [64, 256], r"no reference design figures for lengths \[256\]"),
        ({"rows": [{"length": 64}]}, [64], "not a speed benchmark's JSON"),
    ],
)
def test_figures_that_do_not_fit_this_run_are_refused(tmp_path, changes, lengths, message):
    path = earlier_run(tmp_path / "speed.json", **changes)
    with pytest.raises(SpecEMError, match=message):
        reference_figures(path, MEMBERS, lengths)


def test_a_file_that_is_not_json_is_refused(tmp_path):
    path = tmp_path / "speed.md"
    path.write_text("| answer tokens |")
    with pytest.raises(SpecEMError, match="not a speed benchmark's JSON"):
        reference_figures(path, MEMBERS, [64])


def test_the_table_names_where_the_reference_figures_came_from():
    row = {
        "length": 64,
        "tokens_per_s": {"min": 1, "median": 1},
        "overhead_ratio": {"min": 1, "median": 1},
        "vs_reference_ratio": {"min": 2, "median": 2},
        "first_segment_s": {"min": 1, "median": 1},
        "round_s": {s: {"min": 1, "median": 1} for s in ("draft", "verify", "accept")},
    }
    result = {
        "rows": [row],
        "growth_ratio": 1.0,
        "peak_rss_mb": 1.0,
        "members": LABELS,
        "backend": "llamacpp",
        "repeats": 3,
        "reference_repeats": 3,
        "reference_from": "docs/benchmarks/speed-transformers.json",
    }
    assert "(3 for the reference design, from docs/benchmarks/speed-transformers.json)" in (
        table(result)
    )


def test_a_missing_file_is_named(tmp_path):
    with pytest.raises(SpecEMError, match=r"cannot read .*absent\.json: No such file"):
        reference_figures(tmp_path / "absent.json", MEMBERS, [64])
