"""How each prompt is sent: options shared by in-process and endpoint runs (no torch here)."""

from __future__ import annotations

from dataclasses import dataclass

from llmbench.errors import UserError


@dataclass
class RunOptions:
    """How each prompt is sent. Defaults follow the README."""

    max_new_tokens: int = 256
    ignore_eos: bool = False
    warmup: int = 1
    repeats: int = 1
    sample: bool = False
    seed: int = 0
    temperature: float = 1.0
    top_p: float = 1.0
    system_prompt: str | None = None
    chat_template: bool = True
    truncate: bool = False  # cut prompts longer than the context (keeping their end) instead of refusing
    cache: str = "dynamic"  # KV cache: dynamic (grows per token) or static (preallocated, compilable)
    compile: bool = False  # decode steps through torch.compile; needs the static cache

    def validate(self) -> None:
        """UserError for options no run can honour."""
        if self.cache not in ("dynamic", "static"):
            raise UserError(f"unknown --cache '{self.cache}'; expected dynamic or static")
        if self.compile and self.cache != "static":
            raise UserError("--compile needs --cache static: torch.compile can't trace a growing cache")
        if self.max_new_tokens < 1:
            raise UserError(f"--max-new-tokens must be at least 1, not {self.max_new_tokens}")
        if self.warmup < 0:
            raise UserError(f"--warmup must be 0 or more, not {self.warmup}")
        if self.repeats < 1:
            raise UserError(f"--repeats must be at least 1, not {self.repeats}")
        if self.sample and not (self.temperature > 0):
            raise UserError(f"--temperature must be above 0 when sampling, not {self.temperature}")
        if self.sample and not (0 < self.top_p <= 1):
            raise UserError(f"--top-p must be in (0, 1], not {self.top_p}")

    def config_fields(self, prompts) -> dict:
        """The run config's fields that come from these options and the prompt set (both run modes)."""
        from llmbench.results import Sampling

        return {
            "max_new_tokens": self.max_new_tokens,
            "ignore_eos": self.ignore_eos,
            "warmup": self.warmup,
            "repeats": self.repeats,
            "prompt_file": prompts.path,
            "prompt_sha256": prompts.sha256,
            "prompt_count": len(prompts.prompts),
            "sampling": Sampling(
                do_sample=self.sample,
                temperature=self.temperature if self.sample else None,
                top_p=self.top_p if self.sample else None,
                seed=self.seed if self.sample else None,
            ),
            "system_prompt": self.system_prompt,
        }
