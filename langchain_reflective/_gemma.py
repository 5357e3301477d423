"""What the embedded Gemma 3 270M GGUF needs from llama.cpp that the file does not carry: a
chat template for Gemma's turn format, and the ids of its whitespace-only tokens, banned so the
base model's JSON stays compact and its replies end."""

from __future__ import annotations

__all__ = ["EMBEDDED_BLANK_TOKEN_IDS", "EMBEDDED_GGUF_SHA256", "GEMMA_CHAT_TEMPLATE"]

# SHA-256 of the embedded GGUF whose vocabulary the token ids below belong to.
EMBEDDED_GGUF_SHA256 = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
# Every token of that vocabulary made only of spaces and tabs (runs of 1-31, plus the byte
# tokens <0x09> and <0x20>); pure-newline tokens are not included. llama.cpp's JSON grammar
# lets whitespace ("\n"{1,2} [ \t]{0,20}) follow every brace, comma and colon, and the base
# model fills those slots with long runs of tabs and spaces until the token limit. Banning
# these tokens through ``logit_bias`` leaves at most two newlines per slot: JSON stays compact
# and replies end. Found by detokenizing the whole vocabulary of the embedded GGUF.
EMBEDDED_BLANK_TOKEN_IDS: tuple[int, ...] = (
    *range(138, 168),
    247,
    270,
    236743,
    *range(255968, 255999),
)

# The GGUF of the base model carries no chat template, so llama.cpp would fall back to ChatML,
# which Gemma does not know. This is Gemma's turn format, made lenient: system messages are
# folded into the next user turn (Gemma has no system role), tool results become user turns,
# roles need not alternate, and list-shaped content keeps only its text parts.
GEMMA_CHAT_TEMPLATE = """\
{{- bos_token -}}
{%- set ns = namespace(system='') -%}
{%- for message in messages -%}
{%- if message['content'] is string -%}
{%- set content = message['content'] -%}
{%- elif message['content'] -%}
{%- set content = message['content'] | selectattr('type', 'equalto', 'text') \
| map(attribute='text') | join('\\n') -%}
{%- else -%}
{%- set content = '' -%}
{%- endif -%}
{%- if message['role'] == 'system' or message['role'] == 'developer' -%}
{%- set ns.system = ns.system + (content | trim) + '\\n\\n' -%}
{%- else -%}
{%- set role = 'model' if message['role'] == 'assistant' else 'user' -%}
{{- '<start_of_turn>' + role + '\\n' -}}
{%- if role == 'user' and ns.system -%}
{{- ns.system -}}
{%- set ns.system = '' -%}
{%- endif -%}
{{- content | trim -}}
{{- '<end_of_turn>\\n' -}}
{%- endif -%}
{%- endfor -%}
{%- if ns.system -%}
{{- '<start_of_turn>user\\n' + (ns.system | trim) + '<end_of_turn>\\n' -}}
{%- endif -%}
{%- if add_generation_prompt -%}
{{- '<start_of_turn>model\\n' -}}
{%- endif -%}
"""
