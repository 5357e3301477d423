"""Each chat message of an agent's turns is stored once per namespace, by its id.

:class:`~langchain_reflective.integrations.middleware.MemoryMiddleware` puts the ids of the
messages an :class:`~langchain_reflective.strategies.base.Observation` carries in its metadata:
``query_message_id`` (the user's message) and ``reply_message_id`` (the answer), each only when
that part is in the observation, with the run's ``thread_id``. A thread re-run from an earlier
checkpoint (LangGraph time travel: a "regenerate") processes the same user message, same id,
again, and the state it forked from does not say the message was recorded; its new answer is a
new message (a new id). So the built-in strategies keep each message of a namespace once: a
part of an observation whose message they hold already is dropped (its text emptied, its id
key removed), and what is left (the new answer) is stored.

A message is known by its thread and its id (:func:`message_keys`): ids are unique in
LangGraph (``add_messages`` gives each message a UUID), but an application may number its
messages per conversation, and two threads' "message 1" are different messages. A part whose
message has no id is always new (as before this check existed).
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


def message_keys(metadata: Mapping[str, Any], query: str, reply: str) -> dict[str, str]:
    """``part -> key`` for each part (``"query"``, ``"reply"``) that has text and a message id
    in ``metadata`` (the key names the thread and the message)."""
    thread = metadata.get("thread_id")
    thread = thread if isinstance(thread, str) else ""
    keys: dict[str, str] = {}
    for (part, id_key), text in zip(_PARTS, (query, reply), strict=True):
        message_id = metadata.get(id_key)
        if text.strip() and isinstance(message_id, str) and message_id:
            keys[part] = json.dumps([thread, message_id])
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
