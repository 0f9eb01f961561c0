"""An LCEL chain: prompt | SpecEMChatModel | StrOutputParser.

./run python examples/lcel_chain.py
"""

from __future__ import annotations

from langchain_core.language_models import BaseChatModel
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.runnables import Runnable

from specem_chain import SpecEMChatModel

prompt = ChatPromptTemplate.from_messages(
    [
        ("system", "You are a patient maths tutor. Answer in two or three sentences."),
        ("user", "{question}"),
    ]
)


def build_chain(llm: BaseChatModel) -> Runnable:
    return prompt | llm | StrOutputParser()


if __name__ == "__main__":
    chain = build_chain(SpecEMChatModel(seed=0))
    print(chain.invoke({"question": "What is 15% of 80, and how do you work it out?"}))
