"""Bounds of what llmbench makes, reads or plans: far above any real model or run, and far below what would
overflow, exhaust memory or spin for hours while prompts are made (a typo'd 10**20 is one line, not a hang)."""

MAX_PROMPT_TOKENS = 10_000_000  # no model reads (or writes) more: the longest contexts are 10M tokens
MAX_REQUESTS = 1_000_000  # prompts made, turns expanded, arrivals drawn, requests planned
