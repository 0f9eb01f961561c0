"""SpecEMChatModel beyond the standard suites: isolation, stops, usage, callbacks, errors."""

from __future__ import annotations

import asyncio

import pytest
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.load import dumps, loads
from langchain_core.messages import AIMessage, ChatMessage, HumanMessage, SystemMessage
from langchain_core.tools import tool

from specem_chain import Feedback, Member, SpecEMChatModel
from specem_chain.backends.transformers import TransformersBackend
from specem_chain.chat_model import turns_from_langchain

QUESTIONS = [f"How many clips did Natalia sell in month {i}?" for i in range(8)]


@pytest.fixture
def trio(tiny_models) -> list[str]:
    return [str(tiny_models[name]) for name in ("llama", "qwen2", "plain")]


def provenance(message: AIMessage) -> tuple:
    specem = message.response_metadata["specem"]
    return message.content, specem["segments"], specem["weights"], specem["wins"]


async def test_concurrent_requests_never_share_state(trio):
    """Each of 8 concurrent requests gets exactly what it gets alone: text, weights, scores."""
    llm = SpecEMChatModel(members=trio, max_tokens=20, seed=3)
    alone = [provenance(await llm.ainvoke(q)) for q in QUESTIONS]
    together = [provenance(m) for m in await llm.abatch(QUESTIONS)]
    assert together == alone
    # three members, so the Hedge step moves weights, and differently per request
    assert len({tuple(p[2].values()) for p in alone}) > 1


@pytest.mark.models
@pytest.mark.parametrize("size", [2, pytest.param(8, marks=pytest.mark.heavy)])
async def test_default_ensemble_abatch_matches_each_request_alone(size):
    llm = SpecEMChatModel(max_tokens=12, seed=1)
    alone = [provenance(await llm.ainvoke(q)) for q in QUESTIONS[:size]]
    together = [provenance(m) for m in await llm.abatch(QUESTIONS[:size])]
    assert together == alone


def test_sync_entry_points_work_inside_a_running_event_loop(trio):
    llm = SpecEMChatModel(members=trio, max_tokens=10, seed=2)

    async def call_sync_from_async() -> tuple[str, str, list[str]]:
        invoked = llm.invoke("How many clips?")
        streamed = "".join(c.content for c in llm.stream("How many clips?"))
        batched = [m.content for m in llm.batch(["How many clips?"] * 2)]
        return invoked.content, streamed, batched

    invoked, streamed, batched = asyncio.run(call_sync_from_async())
    assert invoked == streamed == batched[0] == batched[1]


async def test_stream_gives_one_chunk_per_segment_and_marks_the_last(trio):
    llm = SpecEMChatModel(members=trio, max_tokens=30, seed=4)
    chunks = [c async for c in llm.astream("How many clips?")]
    assert chunks[-1].chunk_position == "last"
    assert all(c.chunk_position is None for c in chunks[:-1])
    # every chunk names its own segment's member; strings appear on the last chunk only
    assert all(len(c.response_metadata["specem"]["segments"]) == 1 for c in chunks)
    assert all("model_name" not in c.response_metadata for c in chunks[:-1])
    full = chunks[0]
    for chunk in chunks[1:]:
        full += chunk
    segments = full.response_metadata["specem"]["segments"]
    assert len(segments) == len(chunks)
    assert [s["member"] for s in segments] == [
        c.response_metadata["specem"]["segments"][0]["member"] for c in chunks
    ]
    assert full.response_metadata["model_name"] == llm.model_name
    assert full.content == "".join(s["text"] for s in segments)


async def test_usage_counts_prompts_once_and_every_drafted_token(trio):
    llm = SpecEMChatModel(members=trio, max_tokens=25, seed=5)
    chunks = [c async for c in llm.astream("How many clips?")]
    assert chunks[0].usage_metadata["input_tokens"] > 0
    assert all(c.usage_metadata["input_tokens"] == 0 for c in chunks[1:])
    full = chunks[0]
    for chunk in chunks[1:]:
        full += chunk
    per_member = full.response_metadata["specem"]["usage"]
    assert full.usage_metadata["input_tokens"] == sum(
        m["input_tokens"] for m in per_member.values()
    )
    assert full.usage_metadata["output_tokens"] == sum(
        m["output_tokens"] for m in per_member.values()
    )
    invoked = await llm.ainvoke("How many clips?")
    assert invoked.usage_metadata == full.usage_metadata


class SegmentCounter(BaseCallbackHandler):
    def __init__(self) -> None:
        self.tokens: list[str] = []
        self.chunks: list = []

    def on_llm_new_token(self, token: str, *, chunk=None, **kwargs) -> None:
        self.tokens.append(token)
        self.chunks.append(chunk)


@pytest.mark.parametrize("entry", ["invoke", "stream"])
def test_on_llm_new_token_fires_once_per_segment(trio, entry):
    counter = SegmentCounter()
    llm = SpecEMChatModel(members=trio, max_tokens=30, seed=6, callbacks=[counter])
    if entry == "invoke":
        message = llm.invoke("How many clips?")
    else:
        message = None
        for chunk in llm.stream("How many clips?"):
            message = chunk if message is None else message + chunk
    segments = message.response_metadata["specem"]["segments"]
    assert len(counter.tokens) == len(segments)
    assert "".join(counter.tokens) == message.content
    assert all(c is not None for c in counter.chunks)


@pytest.mark.parametrize("where", ["constructor", "call"])
def test_stop_sequences_are_honoured_exactly(trio, where):
    llm = SpecEMChatModel(members=trio, max_tokens=40, seed=7)
    free = llm.invoke("How many clips?")
    segments = free.response_metadata["specem"]["segments"]
    assert len(segments) > 1
    stop = segments[0]["text"][-1] + segments[1]["text"][:2]  # straddles two segments
    if where == "constructor":
        stopped = SpecEMChatModel(members=trio, max_tokens=40, seed=7, stop=[stop]).invoke(
            "How many clips?"
        )
    else:
        stopped = llm.invoke("How many clips?", stop=[stop])
    assert stopped.content == free.content[: free.content.index(stop)]
    assert stopped.response_metadata["finish_reason"] == "stop"
    assert stopped.response_metadata["specem"]["finish_reason"] == "stop_sequence"


def test_temperature_zero_makes_members_greedy(trio):
    llm = SpecEMChatModel(members=trio, max_tokens=20, temperature=0)
    assert (
        llm.invoke("How many clips?", seed=1).content
        == llm.invoke("How many clips?", seed=2).content
    )


def test_identifying_params_tell_configurations_apart(trio):
    base = SpecEMChatModel(members=trio)
    others = [
        SpecEMChatModel(members=trio, window=5),
        SpecEMChatModel(members=trio, policy="paper"),
        SpecEMChatModel(members=trio[:2]),
    ]
    assert all(o._identifying_params != base._identifying_params for o in others)
    assert "llama" in base.model_name and "qwen2" in base.model_name


def test_consecutive_turns_of_one_role_are_merged():
    conversation = turns_from_langchain(
        [
            SystemMessage("a"),
            SystemMessage("b"),
            HumanMessage("c"),
            HumanMessage([{"type": "text", "text": "d"}]),
            AIMessage("e"),
            HumanMessage("f"),
        ]
    )
    assert conversation == [
        {"role": "system", "content": "a\n\nb"},
        {"role": "user", "content": "c\n\nd"},
        {"role": "assistant", "content": "e"},
        {"role": "user", "content": "f"},
    ]


def test_a_system_turn_is_folded_for_templates_that_reject_it(tiny_models):
    backend = TransformersBackend.load(Member(source=str(tiny_models["nosystem"])))
    text = backend.template.render(
        [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    )
    assert "<|im_start|>system" not in text
    assert "<|im_start|>user\nBe brief.\n\nHi<|im_end|>" in text


def test_non_text_content_gets_a_clear_error(trio):
    llm = SpecEMChatModel(members=trio, max_tokens=5)
    image = HumanMessage([{"type": "image", "url": "https://example.com/cat.png"}])
    with pytest.raises(ValueError, match="'image' content block"):
        llm.invoke([image])
    with pytest.raises(ValueError, match="'chat' message"):
        llm.invoke([HumanMessage("hi"), ChatMessage("42", role="critic")])


def test_bad_settings_and_call_arguments_get_clear_errors(trio):
    with pytest.raises(ValueError, match="window"):
        SpecEMChatModel(members=trio, window=0)
    with pytest.raises(ValueError, match="at least one member"):
        SpecEMChatModel(members=[])
    with pytest.raises(TypeError, match="unsupported call arguments"):
        SpecEMChatModel(members=trio).invoke("hi", top_k=3)


@pytest.mark.parametrize(
    ("setting", "value"),
    [
        ("temperature", -1),
        ("window", 0),
        ("max_tokens", 0),
        ("answer_timeout", 0),
        ("learning_rate", -0.5),
        ("seed", -3),
        ("scoring", "mean_nonsense"),
        ("policy", "nonsense"),
    ],
)
def test_a_bad_per_call_value_is_refused_before_any_member_runs(setting, value):
    """The members cannot even be found: the per-call value is checked first."""
    llm = SpecEMChatModel(members=["/nowhere/model-a", "/nowhere/model-b"])
    with pytest.raises(ValueError, match=setting):
        llm.invoke("hi", **{setting: value})


async def test_a_timeout_ends_the_request_with_a_clear_error(trio):
    llm = SpecEMChatModel(members=trio, max_tokens=200, answer_timeout=0.05)
    with pytest.raises(TimeoutError, match=r"answer_timeout=0\.05"):
        await llm.ainvoke("How many clips?")


# -- LangChain's conventions ---------------------------------------------------------------


def test_arguments_meant_for_one_model_get_a_clear_error(trio):
    with pytest.raises(ValueError, match="takes no model=: an ensemble has no single model"):
        SpecEMChatModel(members=trio, model="gpt-4")
    with pytest.raises(ValueError, match="colour"):
        SpecEMChatModel(members=trio, colour="red")


def test_server_settings_reach_the_remote_members_that_keep_their_defaults(trio):
    own = Member.tgi("http://b:1", name="own", request_timeout=5, retries=0, api_key="mine")
    llm = SpecEMChatModel(
        members=[trio[0], "tgi+http://a:1", own], api_key="shared", timeout=9, max_retries=4
    )
    local, default, keeps = llm.members
    assert local.remote is False and local.api_key is None
    assert (default.key(), default.request_timeout, default.retries) == ("shared", 9, 4)
    assert (keeps.key(), keeps.request_timeout, keeps.retries) == ("mine", 5, 0)
    assert "shared" not in repr(llm) and "mine" not in repr(llm)


def test_model_kwargs_are_default_call_arguments_checked_up_front(trio):
    llm = SpecEMChatModel(members=trio, model_kwargs={"seed": 5, "max_tokens": 6})
    assert llm.invoke("hi").content == llm.invoke("hi", seed=5, max_tokens=6).content
    assert (
        llm.invoke("hi", seed=6).content
        == SpecEMChatModel(members=trio, seed=6, max_tokens=6).invoke("hi").content
    )
    with pytest.raises(ValueError, match="window"):
        SpecEMChatModel(members=trio, model_kwargs={"window": 0})


def test_streaming_true_makes_invoke_stream(trio):
    class Count(BaseCallbackHandler):
        tokens = 0

        def on_llm_new_token(self, token: str, **kwargs) -> None:
            Count.tokens += 1

    llm = SpecEMChatModel(members=trio, streaming=True, max_tokens=16, seed=2)
    message = llm.invoke("hi", config={"callbacks": [Count()]})
    assert Count.tokens == len(message.response_metadata["specem"]["segments"]) > 1


def test_the_profile_says_what_the_ensemble_can_do(trio):
    profile = SpecEMChatModel().profile
    assert profile["tool_calling"] and profile["tool_choice"] and not profile["structured_output"]
    assert profile["max_input_tokens"] == 32768  # the default member's, Qwen2.5-Coder's
    pair = SpecEMChatModel(members=["smollm2", "qwen2.5-coder"]).profile
    assert pair["max_input_tokens"] == 8192  # SmolLM2's, the smaller context
    assert not profile["image_inputs"]
    assert "max_input_tokens" not in SpecEMChatModel(members=trio).profile


def test_tokens_are_counted_by_the_members_own_tokenizers(trio):
    llm = SpecEMChatModel(members=trio, max_tokens=4, seed=0)
    question = [HumanMessage("How many clips did Natalia sell altogether?")]
    prompt = llm.invoke(question).response_metadata["specem"]["usage"]
    assert llm.get_num_tokens_from_messages(question) == max(
        u["input_tokens"] for u in prompt.values()
    )
    assert 0 < llm.get_num_tokens("Natalia sold clips") < len("Natalia sold clips")
    with pytest.raises(NotImplementedError, match="get_num_tokens"):
        llm.get_token_ids("Natalia")


def test_serialization_round_trips_with_secrets_kept_out(trio, monkeypatch):
    shared = Member.tgi("http://gpu-1:8080", name="shared")
    own = Member.tgi("http://gpu-2:8080", name="own", api_key="sk-member")
    llm = SpecEMChatModel(members=[trio[0], shared, own], api_key="sk-model", seed=3, window=6)
    text = dumps(llm)
    assert "sk-member" not in text and "sk-model" not in text
    monkeypatch.setenv(own.api_key_env, "sk-member")  # a member's own key: from its env var
    loaded = loads(
        text,
        secrets_map={"SPECEM_API_KEY": "sk-model"},
        allowed_objects=[SpecEMChatModel],
        valid_namespaces=["specem_chain"],
    )
    assert [m.key() for m in loaded.members] == [None, "sk-model", "sk-member"]
    assert loaded.members[:2] == llm.members[:2]
    assert (loaded.seed, loaded.window, loaded.api_key) == (3, 6, llm.api_key)


def test_a_feedback_store_carries_the_weights_from_one_answer_to_the_next(trio, tmp_path):
    llm = SpecEMChatModel(
        members=trio, max_tokens=20, seed=3, feedback=Feedback.open(tmp_path / "t.db", "clips")
    )
    first = llm.invoke(QUESTIONS[0]).response_metadata["specem"]
    assert first["start_weights"] == dict.fromkeys(first["weights"], 1 / 3)
    second = llm.invoke(QUESTIONS[1]).response_metadata["specem"]
    expected = Feedback()  # the first answer, carried over in memory
    expected.record(first["weights"], first["dropped"])
    assert second["start_weights"] == pytest.approx(expected.weights(list(first["weights"])))
    assert second["start_weights"] != first["start_weights"]
    assert Feedback.open(tmp_path / "t.db", "clips").answers == 2  # in the file
    assert "feedback" not in llm.model_dump() and "feedback" not in dumps(llm)
    assert f"feedback=Feedback(path={str(tmp_path / 't.db')!r}, task='clips'" in repr(llm)


def test_an_earlier_answers_reasoning_and_other_blocks_are_left_out(trio):
    history = [
        HumanMessage("Hi"),
        AIMessage(
            [
                {"type": "reasoning", "reasoning": "The user greets me."},
                {"type": "text", "text": "Hello!"},
            ]
        ),
        HumanMessage("And now?"),
    ]
    assert turns_from_langchain(history)[1] == {"role": "assistant", "content": "Hello!"}
    assert SpecEMChatModel(members=trio, max_tokens=4).invoke(history).content


def test_output_version_v1_gives_standard_content_blocks(trio):
    llm = SpecEMChatModel(members=trio, max_tokens=12, seed=1, output_version="v1")
    message = llm.invoke("hi")
    assert message.content and all(block["type"] == "text" for block in message.content)
    assert "".join(b["text"] for b in message.content) == message.text


@pytest.mark.models
def test_tools_bound_strictly_with_at_most_one_call():
    """``create_agent`` binds tools with ``strict=True``; ``parallel_tool_calls=False``
    ends the answer after its first call."""

    @tool
    def lookup(city: str) -> str:
        """Look a city up."""
        return city

    llm = SpecEMChatModel(max_tokens=60, seed=0)
    bound = llm.bind_tools([lookup], tool_choice="any", strict=True, parallel_tool_calls=False)
    message = bound.invoke("Where is Paris? Look it up, then look up Rome too.")
    assert len(message.tool_calls) == 1 and message.tool_calls[0]["name"] == "lookup"
    assert isinstance(message.tool_calls[0]["args"]["city"], str)
