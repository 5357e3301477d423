"""LangChain integrations: retriever, agent middleware, tools, legacy memory adapter."""
