"""A causal LM whose forward pass takes a known time: the ground truth for llmbench's stopwatch.

It is a real transformers model (PreTrainedModel + GenerationMixin) driven by the real generate(), with
one real parameter; only its arithmetic is replaced by a wait of ``prefill_ms`` for the first forward pass
of a request and ``decode_ms`` for every later one. It records when each forward pass started and ended, so
a test can compare llmbench's stamps with the moment each token was really produced.
"""

from __future__ import annotations

import time

import torch
from transformers import GenerationMixin, PretrainedConfig, PreTrainedModel
from transformers.modeling_outputs import CausalLMOutputWithPast


class DelayedConfig(PretrainedConfig):
    model_type = "llmbench-delayed"

    def __init__(
        self,
        vocab_size: int = 151936,
        prefill_ms: float = 40.0,
        decode_ms: float = 15.0,
        eos_after: int | None = None,
        eos_id: int = 151645,
        **kw,
    ):
        self.vocab_size = vocab_size
        self.prefill_ms = prefill_ms
        self.decode_ms = decode_ms
        self.eos_after = eos_after  # the token of this number (1-based) is the end-of-sequence token
        self.eos_id = eos_id
        self.num_hidden_layers = 1  # generate() sizes a (never filled) cache by it
        kw.setdefault("use_cache", False)
        super().__init__(**kw)


def wait_until(deadline_ns: int) -> None:
    """Sleep most of the way, then spin: accurate to a few microseconds on an idle core."""
    remaining = deadline_ns - time.perf_counter_ns()
    if remaining > 2_000_000:
        time.sleep((remaining - 1_500_000) / 1e9)
    while time.perf_counter_ns() < deadline_ns:
        pass


class DelayedLM(PreTrainedModel, GenerationMixin):
    config_class = DelayedConfig
    main_input_name = "input_ids"

    def __init__(self, config: DelayedConfig):
        super().__init__(config)
        self.token_bias = torch.nn.Parameter(torch.zeros(config.vocab_size))
        self.starts_ns: list[int] = []
        self.ends_ns: list[int] = []
        self.kinds: list[str] = []
        self._last_len = -1
        self._prompt_len = 0
        self.post_init()

    def _init_weights(self, module):  # nothing random to initialise
        pass

    def forward(self, input_ids=None, attention_mask=None, **kwargs):
        start = time.perf_counter_ns()
        n = int(input_ids.shape[-1])
        decode = n == 1 or n == self._last_len + 1
        self._last_len = n
        if not decode:
            self._prompt_len = n
        delay_ms = self.config.decode_ms if decode else self.config.prefill_ms
        wait_until(start + int(delay_ms * 1e6))
        logits = self.token_bias.detach().clone()[None, None, :]
        logits[..., 1000 + n % 500] = 1.0  # a different token each step, never a special token
        if self.config.eos_after is not None and n - self._prompt_len + 1 == self.config.eos_after:
            logits[..., self.config.eos_id] = 2.0
        self.starts_ns.append(start)
        self.kinds.append("decode" if decode else "prefill")
        self.ends_ns.append(time.perf_counter_ns())
        return CausalLMOutputWithPast(logits=logits)

    def prepare_inputs_for_generation(self, input_ids, attention_mask=None, **kwargs):
        return {"input_ids": input_ids, "attention_mask": attention_mask}


def delayed_loaded(tokenizer, prefill_ms: float, decode_ms: float, eos_after: int | None = None):
    """A DelayedLM behind the real tokenizer, as llmbench's loader would hand it over. With ``eos_after`` it
    ends every answer with the tokenizer's end-of-sequence token (which decodes to no text) at that token."""
    from llmbench.engines.hf.models import LoadedModel, _prepare_generation
    from llmbench.results.schema import LoadInfo

    vocab = 4096 if eos_after is None else 151936  # the real EOS id needs the real vocabulary's size
    config = DelayedConfig(vocab_size=vocab, prefill_ms=prefill_ms, decode_ms=decode_ms, eos_after=eos_after,
                           eos_id=tokenizer.eos_token_id)  # fmt: skip
    model = DelayedLM(config).eval()
    _prepare_generation(model, tokenizer)
    return LoadedModel(
        model=model,
        tokenizer=tokenizer,
        name="delayed",
        weights="random",
        source="folder",
        device="cpu",
        dtype="float32",
        dtype_reason="",
        threads=1,
        load=LoadInfo(seconds=0),
        max_positions=None,
    )


def delayed_backend(tokenizer, prefill_ms: float, decode_ms: float, tokens: int):
    """(model, llmbench's in-process backend) for a DelayedLM behind the real tokenizer, warmed up once. The
    backend keeps each request's raw clock readings (``backend.raw``)."""
    from llmbench.backends import Request
    from llmbench.backends.inprocess import InProcessBackend
    from llmbench.options import RunOptions

    lm = delayed_loaded(tokenizer, prefill_ms, decode_ms)
    backend = InProcessBackend(None, RunOptions(max_new_tokens=tokens, ignore_eos=True, warmup=0), loaded=lm,
                               keep_raw=True)  # fmt: skip
    backend.measure_now(Request("warm up", 0, -1))
    return lm.model, backend
