"""Each chat message of an agent's turns is stored once per namespace, by its id and text.

:class:`~langchain_reflective.integrations.middleware.MemoryMiddleware` puts the ids of the
messages an :class:`~langchain_reflective.strategies.base.Observation` carries in its metadata:
``query_message_id`` (the user's message) and ``reply_message_id`` (the answer), each only when
that part is in the observation, with the run's ``thread_id``. A thread re-run from an earlier
checkpoint (LangGraph time travel: a "regenerate") processes the same user message, same id,
again, and the state it forked from does not say the message was recorded; its new answer is a
new message (a new id). So the built-in strategies keep each message of a namespace once: a
part of an observation whose message they hold already is dropped (its text emptied, its id
key removed), and what is left (the new answer) is stored.

A message is known by its thread, its id, its part and its text (:func:`message_keys`): ids
are unique in LangGraph (``add_messages`` gives each message a UUID), but an application may
number its messages per conversation, and two threads' "message 1" are different messages.
An edited message keeps its id (LangGraph's edit: ``update_state`` with a message of the same
id and new content, then a re-run) but is another message, stored with its new answer, so the
key holds a digest of the text. The part (``"query"``, ``"reply"``) keeps a question and an
answer apart when an application gives both one id. A part whose message has no id is always
new (as before this check existed).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Collection, Mapping
from dataclasses import replace
from typing import Any

from langchain_reflective.strategies.base import Observation

QUERY_MESSAGE_ID = "query_message_id"
REPLY_MESSAGE_ID = "reply_message_id"
_PARTS = (("query", QUERY_MESSAGE_ID), ("reply", REPLY_MESSAGE_ID))


def _text_digest(text: str) -> str:
    """A short digest of a message's text (16 hex digits): an edit (same id, other text) makes
    another message of it."""
    data = text.encode("utf-8", "surrogatepass")  # (a lone surrogate digests too)
    return hashlib.sha256(data).hexdigest()[:16]


def message_keys(metadata: Mapping[str, Any], query: str, reply: str) -> dict[str, str]:
    """``part -> key`` for each part (``"query"``, ``"reply"``) that has text and a message id
    in ``metadata``. The key names the thread, the message id, the part and the text's digest:
    the same message committed again (a regenerate) has the same key, an edited one (same id,
    new text) another, and the two parts of one observation never share a key."""
    thread = metadata.get("thread_id")
    thread = thread if isinstance(thread, str) else ""
    keys: dict[str, str] = {}
    for (part, id_key), text in zip(_PARTS, (query, reply), strict=True):
        message_id = metadata.get(id_key)
        if text.strip() and isinstance(message_id, str) and message_id:
            keys[part] = json.dumps([thread, message_id, part, _text_digest(text)])
    return keys


def observation_keys(observation: Observation) -> dict[str, str]:
    """:func:`message_keys` of an observation."""
    return message_keys(observation.metadata, observation.query, observation.reply)


def without_held(observation: Observation, held: Collection[str]) -> Observation | None:
    """``observation`` without its parts whose message key is in ``held`` (the observation
    itself when none is; ``None`` when nothing is left to store)."""
    keys = observation_keys(observation)
    dropped = [part for part, key in keys.items() if key in held]
    if not dropped:
        return observation
    if len(dropped) == len([p for p, _ in _PARTS if getattr(observation, p).strip()]):
        return None
    metadata = dict(observation.metadata)
    for part, id_key in _PARTS:
        if part in dropped:
            metadata.pop(id_key, None)
    return replace(
        observation,
        query="" if "query" in dropped else observation.query,
        reply="" if "reply" in dropped else observation.reply,
        metadata=metadata,
    )


def message_memory_id(scope: str, namespace: str, key: str) -> str:
    """The memory id under which ``scope`` (a strategy) stores the message ``key`` of
    ``namespace``: 32 hex digits (the shape of a generated id), the same for every process, so
    the store itself refuses the message's second copy."""
    name = json.dumps([scope, namespace, key])  # (ASCII: a lone surrogate is escaped)
    return hashlib.sha256(name.encode("ascii")).hexdigest()[:32]
