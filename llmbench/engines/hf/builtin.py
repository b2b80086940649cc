"""Models whose architecture and tokenizer llmbench carries, so ``--weights random`` needs no network.

Qwen2.5-0.5B(-Instruct): its config facts are below; its tokenizer is rebuilt from the byte-level BPE
vocabulary (``qwen.tiktoken``) that the ``dashscope`` package ships. Special-token ids are checked
against the real model's.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

from llmbench.core.errors import UserError

# Qwen2.5-0.5B-Instruct's config.json, the fields that shape the arithmetic (494.0M parameters).
QWEN25_05B_CONFIG: dict[str, Any] = {
    "model_type": "qwen2",
    "hidden_size": 896,
    "intermediate_size": 4864,
    "num_hidden_layers": 24,
    "num_attention_heads": 14,
    "num_key_value_heads": 2,
    "vocab_size": 151936,
    "max_position_embeddings": 32768,
    "rope_theta": 1000000.0,
    "rms_norm_eps": 1e-6,
    "tie_word_embeddings": True,
    "hidden_act": "silu",
    "bos_token_id": 151643,
    "eos_token_id": 151645,
}

BUILTIN_CONFIGS: dict[str, dict[str, Any]] = {
    "Qwen/Qwen2.5-0.5B-Instruct": QWEN25_05B_CONFIG,
    "Qwen/Qwen2.5-0.5B": QWEN25_05B_CONFIG,
}

QWEN_SPECIAL_TOKENS = {"<|endoftext|>": 151643, "<|im_start|>": 151644, "<|im_end|>": 151645}

# Qwen2's pre-tokenizer split: like cl100k's, but digits one at a time.
QWEN_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)

# Qwen2.5's added tokens after its specials, in id order (151646-151658), each one token as the real tokenizer has
# them: the vision ones special, <tool_call> and </tool_call> (in every tool-call prompt) not (a decode keeps them)
QWEN_ADDED_SPECIAL = (
    "<|object_ref_start|>", "<|object_ref_end|>", "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>",
    "<|vision_start|>", "<|vision_end|>", "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>",
)  # fmt: skip
QWEN_ADDED_TOKENS = (*QWEN_ADDED_SPECIAL, "<tool_call>", "</tool_call>")
QWEN_FIRST_ADDED = 151646

_QWEN_DEFAULT_SYSTEM = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."

# ChatML as Qwen2.5-Instruct's template writes it, tool calls included (its tools' system prompt, an assistant's
# <tool_call> blocks, tool results as <tool_response> in a user turn), default system prompt included, so a
# random-weights run sees the same prompts as the real model
QWEN_CHAT_TEMPLATE = (
    "{%- if tools %}"
    "{{- '<|im_start|>system\\n' }}"
    "{%- if messages[0]['role'] == 'system' %}{{- messages[0]['content'] }}"
    f"{{%- else %}}{{{{- '{_QWEN_DEFAULT_SYSTEM}' }}}}{{%- endif %}}"
    "{{- '\\n\\n# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\nYou are provided "
    "with function signatures within <tools></tools> XML tags:\\n<tools>' }}"
    "{%- for tool in tools %}{{- '\\n' }}{{- tool | tojson }}{%- endfor %}"
    "{{- '\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments within "
    '<tool_call></tool_call> XML tags:\\n<tool_call>\\n{"name": <function-name>, "arguments": '
    "<args-json-object>}\\n</tool_call><|im_end|>\\n' }}"
    "{%- else %}"
    "{%- if messages[0]['role'] == 'system' %}"
    "{{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}"
    "{%- else %}"
    f"{{{{- '<|im_start|>system\\n{_QWEN_DEFAULT_SYSTEM}<|im_end|>\\n' }}}}"
    "{%- endif %}"
    "{%- endif %}"
    "{%- for message in messages %}"
    "{%- if (message.role == 'user') or (message.role == 'system' and not loop.first) or "
    "(message.role == 'assistant' and not message.tool_calls) %}"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}"
    "{%- elif message.role == 'assistant' %}"
    "{{- '<|im_start|>' + message.role }}"
    "{%- if message.content %}{{- '\\n' + message.content }}{%- endif %}"
    "{%- for tool_call in message.tool_calls %}"
    "{%- if tool_call.function is defined %}{%- set tool_call = tool_call.function %}{%- endif %}"
    '{{- \'\\n<tool_call>\\n{"name": "\' }}{{- tool_call.name }}{{- \'", "arguments": \' }}'
    "{{- tool_call.arguments | tojson }}{{- '}\\n</tool_call>' }}"
    "{%- endfor %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- elif message.role == 'tool' %}"
    "{%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != 'tool') %}{{- '<|im_start|>user' }}{%- endif %}"
    "{{- '\\n<tool_response>\\n' }}{{- message.content }}{{- '\\n</tool_response>' }}"
    "{%- if loop.last or (messages[loop.index0 + 1].role != 'tool') %}{{- '<|im_end|>\\n' }}{%- endif %}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


def builtin_config(model_id: str) -> dict[str, Any] | None:
    """The carried config facts for ``model_id``, or None when llmbench doesn't carry that model."""
    return BUILTIN_CONFIGS.get(model_id)


def qwen_vocab_file() -> Path:
    """Path of ``qwen.tiktoken`` inside the installed ``dashscope`` package (found without importing it)."""
    spec = importlib.util.find_spec("dashscope")
    if spec is None or spec.origin is None:
        raise UserError(
            "the Qwen tokenizer for --weights random needs the 'dashscope' package (it ships the vocabulary): "
            "pip install dashscope"
        )
    path = Path(spec.origin).parent / "resources" / "qwen.tiktoken"
    if not path.is_file():
        raise UserError(f"the installed dashscope package has no {path.name} (looked in {path.parent})")
    return path


def qwen_tokenizer():
    """The real Qwen2.5 tokenizer (151,643 BPE tokens + ChatML specials), built offline (~2 s)."""
    from transformers import PreTrainedTokenizerFast
    from transformers.convert_slow_tokenizer import TikTokenConverter

    converter = TikTokenConverter(
        vocab_file=str(qwen_vocab_file()),
        pattern=QWEN_PATTERN,
        extra_special_tokens=list(QWEN_SPECIAL_TOKENS),
    )
    tok = PreTrainedTokenizerFast(
        tokenizer_object=converter.converted(),
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
    )
    tok.add_tokens(list(QWEN_ADDED_SPECIAL), special_tokens=True)
    tok.add_tokens(list(QWEN_ADDED_TOKENS[len(QWEN_ADDED_SPECIAL) :]), special_tokens=False)
    tok.chat_template = QWEN_CHAT_TEMPLATE
    ids = {t: tok.convert_tokens_to_ids(t) for t in QWEN_SPECIAL_TOKENS}
    added = [tok.convert_tokens_to_ids(t) for t in QWEN_ADDED_TOKENS]
    if ids != QWEN_SPECIAL_TOKENS or added != list(range(QWEN_FIRST_ADDED, QWEN_FIRST_ADDED + len(added))):
        # A different vocabulary file would shift every id: refuse rather than measure another tokenizer.
        raise UserError(f"dashscope's qwen.tiktoken gives special-token ids {ids}, expected {QWEN_SPECIAL_TOKENS}")
    return tok
