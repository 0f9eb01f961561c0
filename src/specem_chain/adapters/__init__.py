"""Ways to use the ensemble from outside LangChain."""
