"""EngineConfig: defaults and validation with errors that name the offending field."""

from __future__ import annotations

import math
from typing import get_args

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from specem_chain.engine.config import EngineConfig
from specem_chain.engine.types import Sampling
from specem_chain.members import Member
from specem_chain.request import PRESETS, Preset, RequestSettings


def test_defaults():
    config = EngineConfig()
    assert config.window == 10
    assert config.learning_rate > 0  # online feedback is on by default (unlike the reference)
    assert config.scoring == "mean_logprob"
    assert config.fast_finish is False
    assert config.stop == ()
    assert config.seed is None
    assert config.max_tokens >= 1


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("window", 0),
        ("window", -3),
        ("learning_rate", -0.1),
        ("learning_rate", math.nan),
        ("scoring", "mean_prob"),
        ("stop", ("",)),
        ("stop", ("\n", "")),
        ("stop", "\n"),  # a bare string is not a tuple of stops
        ("max_tokens", 0),
        ("seed", -1),
    ],
)
def test_invalid_value_error_names_the_field(field, value):
    with pytest.raises(ValidationError) as info:
        EngineConfig(**{field: value})
    errors = info.value.errors()
    assert [e["loc"] for e in errors] == [(field,)]
    assert field in str(info.value)


def test_unknown_scoring_error_lists_the_choices():
    with pytest.raises(ValidationError) as info:
        EngineConfig(scoring="logits")
    message = str(info.value)
    assert "scoring" in message
    assert "mean_logprob" in message
    assert "mean_logit" in message


def test_empty_stop_error_says_why():
    with pytest.raises(ValidationError, match="stop sequences must not be empty"):
        EngineConfig(stop=("Observation:", ""))


def test_extra_key_is_rejected_by_name():
    with pytest.raises(ValidationError) as info:
        EngineConfig(windw=5)
    assert info.value.errors()[0]["loc"] == ("windw",)
    assert info.value.errors()[0]["type"] == "extra_forbidden"
    assert "windw" in str(info.value)


def test_config_is_frozen():
    config = EngineConfig()
    with pytest.raises(ValidationError):
        config.window = 20  # type: ignore[misc]


def test_learning_rate_zero_turns_feedback_off_and_is_allowed():
    assert EngineConfig(learning_rate=0).learning_rate == 0.0


def test_stop_list_becomes_a_tuple():
    assert EngineConfig(stop=["\n", "Observation:"]).stop == ("\n", "Observation:")


@given(
    st.integers(1, 512),
    st.floats(0.0, 100.0),
    st.sampled_from([("pool", "mean_logprob"), ("paper", "mean_logprob"), ("paper", "mean_logit")]),
    st.booleans(),
    st.lists(st.text(min_size=1, max_size=5), max_size=3),
)
def test_valid_settings_round_trip(window, lr, rule, fast_finish, stop):
    policy, scoring = rule
    config = EngineConfig(
        window=window,
        learning_rate=lr,
        policy=policy,
        scoring=scoring,
        fast_finish=fast_finish,
        stop=stop,
    )
    assert (config.window, config.learning_rate, config.scoring) == (window, lr, scoring)
    assert config.fast_finish is fast_finish
    assert config.stop == tuple(stop)
    assert EngineConfig.model_validate(config.model_dump()) == config


def test_request_sampling_settings_override_every_member_s_and_keep_the_rest():
    members = [
        Member(source="smollm2", sampling={"temperature": 0.3, "top_p": 0.5}),
        Member.tgi("http://a:1", sampling={"repeat_penalty": 1.5}),
    ]
    assert RequestSettings().tuned(members) == members
    tuned = RequestSettings(repeat_penalty=1.1).tuned(members)
    assert [m.sampling for m in tuned] == [
        Sampling(temperature=0.3, top_p=0.5, repeat_penalty=1.1),
        Sampling(repeat_penalty=1.1),
    ]
    assert [m.sampling.temperature for m in RequestSettings(temperature=0).tuned(tuned)] == [0, 0]
    with pytest.raises(ValidationError, match="repeat_penalty"):
        RequestSettings(repeat_penalty=0.9)


def test_a_preset_sets_every_member_s_sampling_and_the_settings_named_win_over_it():
    members = [Member(source="smollm2", sampling={"temperature": 0.3}), Member(source="qwen")]
    assert set(PRESETS) == set(get_args(Preset))
    rerank = PRESETS["rerank"]
    tuned = RequestSettings(preset="rerank").tuned(members)
    assert [m.sampling for m in tuned] == [
        Sampling(temperature=0.3, **rerank),
        Sampling(**rerank),
    ]
    [one] = RequestSettings(preset="rerank", drafts=3, temperature=0).tuned(members[1:])
    assert one.sampling == Sampling(**{**rerank, "drafts": 3, "temperature": 0})
    with pytest.raises(ValidationError, match="preset"):
        RequestSettings(preset="best")
