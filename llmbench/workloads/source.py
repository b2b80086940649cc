"""``config.prompt_source`` in one line: what a run sent, for every workload that records one (a dataset, a trace's
rows, prefix groups). Run, show and compare print it."""

from __future__ import annotations

from typing import Any


def describe(src: dict[str, Any]) -> str:
    """One line on a run's ``config.prompt_source``: the file, how entries were chosen, where output lengths
    came from; for prefix groups, the groups and the reuse they imply."""
    if src.get("kind") == "prefix-groups":
        return _prefix_groups(src)
    col = f", column {src['prompt_column']}" if src.get("prompt_column") else ""
    chosen = f"{src['kept']} of {src['entries']} entries"
    bounds = [f"≥{src['min_prompt_tokens']}" if src.get("min_prompt_tokens") else "",
              f"≤{src['max_prompt_tokens']}" if src.get("max_prompt_tokens") else ""]  # fmt: skip
    if any(bounds):
        chosen += f" ({' '.join(b for b in bounds if b)} prompt tokens; {src.get('dropped_shorter', 0)} shorter, "
        chosen += f"{src.get('dropped_longer', 0)} longer dropped)"
    if src.get("num_prompts"):
        chosen += f", {src['num_prompts']} drawn with seed {src.get('seed')}"
    lengths = src.get("output_tokens") or []
    out = (f"; output lengths from the {src['output_tokens_from']} ({min(lengths)}-{max(lengths)} tokens, EOS "
           "ignored)") if src.get("output_tokens_from") and lengths else ""  # fmt: skip
    short = src.get("lengthened_rows") or []
    note = (f"; {len(short)} rows shorter than the chat template ({src.get('template_tokens')} tokens) sent at "
            "template + 1 token") if short else ""  # fmt: skip
    return f"workload: {src['path']} ({src['format']}{col}), {chosen}{out}{note}"


def _prefix_groups(src: dict[str, Any]) -> str:
    return (f"workload: {src['count']} prompts in {src['groups_used']} of {src['groups']} prefix groups "
            f"({src['dist']}, seed {src['seed']}), each {src['prefix_tokens']} shared + {src['suffix_tokens']} own "
            f"tokens (+{src['template_tokens']} the template's); expected prefix reuse "
            f"{src['prefix_reuse_expected']:.1%}")  # fmt: skip
