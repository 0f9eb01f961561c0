"""Ensembles from local, remote and mixed members, as the guides show them.

Building a SpecEMChatModel loads nothing: members load (or connect) on the first request.

    ./run python examples/members.py
"""

from __future__ import annotations

from specem_chain import Member, Sampling, SpecEMChatModel


def local_ensemble(folder: str, gguf: str) -> SpecEMChatModel:
    # --8<-- [start:local]
    return SpecEMChatModel(
        members=[
            "smollm2",  # a built-in name (see `specem models list`)
            Member.local(folder, name="mine"),  # a model folder (config + weights + tokenizer)
            Member.local(gguf),  # a .gguf file, converted in memory on load
            Member.local("Qwen/Qwen2.5-0.5B-Instruct", device="cuda:0", dtype="bfloat16"),
            Member(source="gemma3", role="verifier", sampling=Sampling(temperature=0.3)),
        ]
    )
    # --8<-- [end:local]


def remote_ensemble() -> SpecEMChatModel:
    # --8<-- [start:remote]
    return SpecEMChatModel(
        members=[
            Member.vllm("http://gpu-host-1:8000"),  # vLLM: its address is all it needs
            "vllm+http://gpu-host-2:8000",  # the same, as a spec string
            Member.tgi("http://gpu-host-3:8080"),  # Text Generation Inference
            "openai+http://gpu-host-4:8081/v1#llama-3.2-3b",  # another completions server
        ],
        scoring="mean_logprob",  # the default, and the only rule servers support
    )
    # --8<-- [end:remote]


def vllm_ensemble() -> SpecEMChatModel:
    # --8<-- [start:vllm]
    return SpecEMChatModel(
        members=[
            "vllm+http://gpu-1:8000",  # a spec string
            Member.vllm("http://gpu-2:8000"),  # the same, in Python
            Member.vllm("http://gpu-3:8000", model="org/served-name", request_timeout=30),
        ]
    )
    # --8<-- [end:vllm]


def mixed_ensemble() -> SpecEMChatModel:
    # --8<-- [start:mixed]
    return SpecEMChatModel(
        members=[
            "qwen2.5-coder",  # in this process
            Member.vllm("http://gpu-host-1:8000", request_timeout=30, retries=2),
            Member.openai_completions(
                "http://gpu-host-2:8000/v1",
                model="llama-3.2-3b",
                tokenizer="/models/llama-3.2-3b",  # whose chat template renders the prompt
            ),
        ],
        answer_timeout=120,  # seconds one whole answer may take
    )
    # --8<-- [end:mixed]


if __name__ == "__main__":
    for llm in (
        local_ensemble("/models/my-model", "/models/phi.gguf"),
        remote_ensemble(),
        vllm_ensemble(),
        mixed_ensemble(),
    ):
        print(llm.model_name)
