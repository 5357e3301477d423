"""The chat client of the embedded local server: ``ChatOpenAI``, marked as a base model.

:meth:`~langchain_reflective.local.LocalChatServer.chat_model` returns a
:class:`LocalChatOpenAI` so that ``prompt_style="auto"`` (see
:mod:`langchain_reflective.completion`) knows to prompt it with few-shot documents under a JSON
schema rather than with instructions. It talks to the server exactly like ``ChatOpenAI``.
"""

from __future__ import annotations

from langchain_openai import ChatOpenAI

__all__ = ["LocalChatOpenAI"]


class LocalChatOpenAI(ChatOpenAI):
    """``ChatOpenAI`` bound to the embedded llama.cpp server (a tiny *base* model).

    Importance rating and reflection prompt it completion-style by default
    (``prompt_style="auto"``); everything else is ``ChatOpenAI``'s behaviour.
    """
