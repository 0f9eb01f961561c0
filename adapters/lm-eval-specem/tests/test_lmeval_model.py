"""SpecEMLM through the harness's own model API, on tiny random members: model_args,
generate_until as specem requests, log-likelihoods from the members' scores."""

from __future__ import annotations

from importlib.metadata import entry_points

import pytest
import torch
from lm_eval.api.instance import Instance
from lm_eval.api.registry import get_model
from lm_eval_specem import SpecEMLM
from lm_eval_specem.model import ChatHistory, member_loglikelihood, request_seed
from pydantic import ValidationError

from specem_chain import Member, RequestSettings, open_request
from specem_chain.answer_formats import AnswerOptions
from specem_chain.models import DEFAULT_MEMBERS
from specem_chain.sync import run_sync

QUESTION = "How many clips did Natalia sell altogether in April and May?"


def generation(context: str, doc_id: int = 0, **gen_kwargs: object) -> Instance:
    return Instance("generate_until", {}, (context, gen_kwargs), 0, ("t", doc_id, 1))


def likelihood(context: str, continuation: str, doc_id: int = 0) -> Instance:
    return Instance("loglikelihood", {}, (context, continuation), 0, ("t", doc_id, 1))


async def direct(members, messages, settings, stop=()) -> str:
    """The answer of a specem request made without the harness."""
    async with open_request(members, messages, settings, AnswerOptions(stop=stop)) as request:
        async for _ in request:
            pass
    return request.answer.text


@pytest.fixture(scope="module")
def pair(tiny_models) -> SpecEMLM:
    return SpecEMLM(members=f"{tiny_models['llama']};{tiny_models['qwen2']}")


# -- model_args --------------------------------------------------------------------------


def test_the_harness_builds_the_model_from_its_model_args_string(tiny_models):
    args = f"members={tiny_models['llama']};{tiny_models['qwen2']},policy=pool,max_tokens=7,"
    args += "window=3,seed=5,temperature=0.5,num_concurrent=2"
    lm = get_model("specem").create_from_arg_string(args, {"batch_size": 1, "device": "cuda:0"})
    assert isinstance(lm, SpecEMLM)
    assert [m.source for m in lm.members] == [str(tiny_models["llama"]), str(tiny_models["qwen2"])]
    assert [m.label for m in lm.members] == ["llama", "qwen2"]
    assert (lm.settings.policy, lm.settings.max_tokens, lm.settings.window) == ("pool", 7, 3)
    assert (lm.settings.seed, lm.settings.temperature, lm.num_concurrent) == (5, 0.5, 2)
    # The harness's --device places the members when it is there (its default is cuda:0).
    device = "cuda:0" if torch.cuda.is_available() else "cpu"
    assert [m.device for m in lm.members] == [device, device]
    assert lm.tokenizer_name == "specem[llama, qwen2]"
    assert lm.feedback is None  # every answer from uniform weights unless feedback=task


def test_the_harness_plugin_entry_point_names_the_model():
    [entry] = [e for e in entry_points(group="lm_eval.models") if e.name == "specem"]
    assert entry.load() is SpecEMLM is get_model("specem")


def test_member_settings_apply_to_members_in_this_process_only(tiny_models):
    remote = "openai+http://localhost:9/v1#served"
    lm = SpecEMLM(members=[str(tiny_models["llama"]), remote], backend="llamacpp", dtype="bfloat16")
    local, server = lm.members
    assert (local.backend, local.dtype) == ("llamacpp", "bfloat16")
    assert (server.kind, server.model, server.backend, server.dtype) == (
        "openai",
        "served",
        "auto",
        "float32",
    )


def test_the_default_members_are_the_embedded_ensemble():
    assert SpecEMLM().members == list(DEFAULT_MEMBERS)


@pytest.mark.parametrize(
    ("args", "error", "message"),
    [
        ({"temprature": 0.5}, TypeError, r"unsupported model_args \['temprature'\]"),
        ({"policy": "bogus"}, ValidationError, "policy"),
        ({"window": 0}, ValidationError, "window"),
        ({"members": "a;;b"}, ValueError, "separated by ';'"),
        ({"members": "smollm2;smollm2"}, ValueError, "unique"),
        ({"num_concurrent": 0}, ValueError, "num_concurrent"),
        ({"feedback": "always"}, ValueError, "feedback is 'task' or 'none'"),
    ],
)
def test_bad_model_args_fail_before_any_member_runs(args, error, message):
    with pytest.raises(error, match=message):
        SpecEMLM(**args)


# -- generate_until ----------------------------------------------------------------------


def test_a_request_becomes_a_specem_request(pair):
    messages, settings, options = pair.specem_request(
        generation(QUESTION, until=["\n\n", ""], max_gen_toks=9, do_sample=False)
    )
    assert messages == [{"role": "user", "content": QUESTION}]
    assert options.stop == ("\n\n",)
    assert (settings.max_tokens, settings.temperature) == (9, 0.0)
    _, sampled, options = pair.specem_request(
        generation(QUESTION, until="Q:", do_sample=True, temperature=0.7)
    )
    assert (sampled.temperature, sampled.max_tokens, options.stop) == (0.7, 256, ("Q:",))
    _, unset, _ = pair.specem_request(generation(QUESTION))
    assert unset.temperature is None  # each member keeps its own


def test_each_request_has_a_seed_of_its_own(pair):
    def seed(request: Instance, repeat: int = 0) -> int | None:
        return pair.specem_request(request, repeat)[1].seed

    first, second = generation(QUESTION, doc_id=0), generation(QUESTION, doc_id=1)
    assert seed(first) == seed(generation(QUESTION, doc_id=0)) == request_seed(0, first, 0)
    assert len({seed(first), seed(second), seed(first, 1)}) == 3  # documents and repeats
    assert seed(generation(QUESTION, seed=7)) != seed(generation(QUESTION, seed=8))


def test_generate_until_answers_as_a_specem_request_does(pair, tiny_models):
    request = generation(QUESTION, until=["\n\n"], max_gen_toks=6, do_sample=False)
    [answer] = pair.generate_until([request], disable_tqdm=True)
    settings = RequestSettings(max_tokens=6, temperature=0.0, seed=request_seed(0, request, 0))
    expected = run_sync(direct(pair.members, [{"role": "user", "content": QUESTION}], settings))
    assert answer == expected


def test_task_feedback_carries_the_weights_from_one_request_to_the_next(tiny_models):
    args = f"members={tiny_models['llama']};{tiny_models['qwen2']},policy=pool,feedback=task"
    lm = get_model("specem").create_from_arg_string(args)
    requests = [generation(f"What is {i} plus {i}?", doc_id=i, max_gen_toks=8) for i in range(2)]
    lm.generate_until(requests, disable_tqdm=True)
    assert lm.feedback is not None and lm.feedback.answers == 2
    weights = lm.feedback.weights([m.label for m in lm.members])
    assert weights != {"llama": 0.5, "qwen2": 0.5}  # the second answer did not start uniform


def test_the_answer_ends_before_a_stop_sequence(pair):
    [free] = pair.generate_until([generation(QUESTION, max_gen_toks=12, do_sample=False)])
    assert len(free) >= 4
    stop = free[2:4]
    [stopped] = pair.generate_until(
        [generation(QUESTION, until=[stop], max_gen_toks=12, do_sample=False)]
    )
    assert stopped == free[: free.index(stop)]


def test_sampled_answers_do_not_depend_on_order_or_concurrency(tiny_models):
    requests = [
        generation(f"{QUESTION} ({n})", doc_id=n, do_sample=True, temperature=1.0, max_gen_toks=6)
        for n in range(3)
    ]
    members = f"{tiny_models['llama']};{tiny_models['qwen2']}"
    one_by_one = SpecEMLM(members=members).generate_until(requests)
    reversed_ = SpecEMLM(members=members).generate_until(requests[::-1])
    together = SpecEMLM(members=members, num_concurrent=3).generate_until(requests)
    assert one_by_one == reversed_[::-1] == together


def test_a_chat_history_is_the_conversation(pair):
    history = [
        {"role": "system", "content": "Answer briefly."},
        {"role": "user", "content": QUESTION},
    ]
    context = pair.apply_chat_template(history)
    assert isinstance(context, ChatHistory) and context.messages == history
    request = generation(context, max_gen_toks=6, do_sample=False)
    assert pair.specem_request(request)[0] == history
    [answer] = pair.generate_until([request])
    settings = RequestSettings(max_tokens=6, temperature=0.0, seed=request_seed(0, request, 0))
    assert answer == run_sync(direct(pair.members, history, settings))


def test_a_started_answer_is_refused(pair):
    started = pair.apply_chat_template(
        [{"role": "user", "content": QUESTION}, {"role": "assistant", "content": "The"}]
    )
    with pytest.raises(ValueError, match="--apply_chat_template"):
        pair.generate_until([generation(started)])


# -- log-likelihood ----------------------------------------------------------------------


def test_loglikelihood_is_the_members_mean_total_log_probability(tiny_models):
    llama, qwen2 = str(tiny_models["llama"]), str(tiny_models["qwen2"])
    requests = [
        likelihood(QUESTION, " 72 clips"),
        likelihood("The quick brown fox", " jumps"),
        likelihood(QUESTION, " 48 clips", doc_id=1),
    ]
    both = SpecEMLM(members=f"{llama};{qwen2}").loglikelihood(requests)
    alone = [SpecEMLM(members=m).loglikelihood(requests) for m in (llama, qwen2)]
    for j, (value, _) in enumerate(both):
        assert value == pytest.approx((alone[0][j][0] + alone[1][j][0]) / 2)
        assert value < 0
    # Each member's own: its Score's mean times its tokens, with the context as the question.
    messages = [{"role": "user", "content": QUESTION}]
    [(own, _)] = run_sync(member_loglikelihood(Member(source=llama), messages, [" 72 clips"]))
    assert alone[0][0][0] == pytest.approx(own)


def test_a_members_greedy_continuation_is_greedy(tiny_models):
    lm = SpecEMLM(members=str(tiny_models["llama"]))
    [greedy] = lm.generate_until([generation(QUESTION, max_gen_toks=4, do_sample=False)])
    assert greedy
    [(_, is_greedy), (_, other)] = lm.loglikelihood(
        [likelihood(QUESTION, greedy), likelihood(QUESTION, greedy + "zebra!?")]
    )
    assert (is_greedy, other) == (True, False)


def test_rolling_loglikelihood_says_what_to_use_instead(pair):
    with pytest.raises(NotImplementedError, match="--model hf"):
        pair.loglikelihood_rolling([Instance("loglikelihood_rolling", {}, ("text",), 0)])


def test_log_likelihoods_need_a_member_that_verifies(tiny_models):
    drafter = Member(source=str(tiny_models["llama"]), role="drafter")
    with pytest.raises(ValueError, match="verifies"):
        SpecEMLM(members=[drafter]).loglikelihood([likelihood(QUESTION, " 72")])


def test_unknown_generation_kwargs_are_named_once(pair, caplog):
    with caplog.at_level("WARNING", logger="lm_eval_specem.model"):
        for _ in range(2):
            pair.specem_request(generation(QUESTION, top_k=5, until=[]))
    warnings = [r.getMessage() for r in caplog.records]
    assert warnings == ["specem ignores these generation kwargs: ['top_k']"]
