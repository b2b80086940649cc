"""The measuring loop: one request at a time, every token stamped, the run JSON rewritten after each request."""

from __future__ import annotations

import gc
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import psutil
import torch

from llmbench import __version__, envinfo, machine
from llmbench.errors import UserError
from llmbench.models import LoadedModel
from llmbench.prompts import PromptSet
from llmbench.results import SCHEMA_VERSION, MachineState, RequestResult, Run, RunConfig, Sampling, save_run
from llmbench.stats import summarize
from llmbench.timing import TokenStamper, request_result


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

    def validate(self) -> None:
        """UserError for options no run can honour."""
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


class RunInterrupted(Exception):
    """Ctrl-C/SIGTERM stopped the run; the JSON at ``path`` holds every finished request."""

    def __init__(self, run: Run, path: Path) -> None:
        super().__init__(f"interrupted after {len(run.requests)} requests")
        self.run = run
        self.path = path


ProgressFn = Callable[[RequestResult, int, int], None]


class Benchmark:
    """Sends prompts to a loaded model and records one :class:`RequestResult` per (prompt, repeat)."""

    def __init__(self, loaded: LoadedModel, options: RunOptions) -> None:
        options.validate()
        self.loaded = loaded
        self.options = options
        self.uses_template = options.chat_template and bool(getattr(loaded.tokenizer, "chat_template", None))
        self.last_raw: tuple[int, int, TokenStamper] | None = None

    # -- one request --------------------------------------------------------------------------------------

    def _encode(self, prompt: str):
        tok = self.loaded.tokenizer
        if self.uses_template:
            messages = []
            if self.options.system_prompt:
                messages.append({"role": "system", "content": self.options.system_prompt})
            messages.append({"role": "user", "content": prompt})
            text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
            enc = tok(text, return_tensors="pt", add_special_tokens=False)
        else:
            text = f"{self.options.system_prompt}\n\n{prompt}" if self.options.system_prompt else prompt
            enc = tok(text, return_tensors="pt")
        return enc

    def _generate_kwargs(self) -> dict:
        o = self.options
        kw: dict = {"max_new_tokens": o.max_new_tokens, "do_sample": o.sample}
        if o.ignore_eos:
            kw["min_new_tokens"] = o.max_new_tokens  # EOS is masked until the length is reached: fixed length
        if o.sample:
            kw.update(temperature=o.temperature, top_p=o.top_p, top_k=None)
        else:
            # A model's generation_config may carry sampling defaults (Qwen's does): greedy means none of them.
            kw.update(temperature=None, top_p=None, top_k=None)
        return kw

    def measure(self, prompt: str, prompt_index: int, repeat: int, started_s: float = 0.0) -> RequestResult:
        """Send one prompt; return its stamped result. The clock starts before templating and tokenizing."""
        model, device = self.loaded.model, self.loaded.device
        gen_kwargs = self._generate_kwargs()
        if self.options.sample:
            torch.manual_seed(self.options.seed + prompt_index * 1_000_003 + repeat)  # same draw on a resumed run
        gc.collect()  # garbage of the previous request is swept now, not inside this one's timing
        stamper = TokenStamper()

        start = time.perf_counter_ns()
        enc = self._encode(prompt)
        input_ids = enc["input_ids"].to(device)
        attention_mask = enc["attention_mask"].to(device) if "attention_mask" in enc else None
        tokenized = time.perf_counter_ns()
        prompt_tokens = int(input_ids.shape[-1])
        self._check_context(prompt_tokens, prompt_index)
        with torch.inference_mode():
            model.generate(input_ids=input_ids, attention_mask=attention_mask, streamer=stamper, **gen_kwargs)

        self.last_raw = (start, tokenized, stamper)  # raw clock readings, for checking the stopwatch
        ids = stamper.token_ids()
        text = self.loaded.tokenizer.decode(ids, skip_special_tokens=True)
        return request_result(
            prompt_index=prompt_index,
            repeat=repeat,
            start_ns=start,
            tokenized_ns=tokenized,
            stamps_ns=stamper.times_ns,
            prompt_tokens=prompt_tokens,
            token_ids=ids,
            output_text=text,
            started_s=started_s,
        )

    def _check_context(self, prompt_tokens: int, prompt_index: int) -> None:
        limit = self.loaded.max_positions
        if limit and prompt_tokens + self.options.max_new_tokens > limit:
            raise UserError(
                f"prompt {prompt_index + 1} has {prompt_tokens} tokens; with --max-new-tokens "
                f"{self.options.max_new_tokens} that exceeds the model's context of {limit} tokens"
            )

    # -- a whole run --------------------------------------------------------------------------------------

    def new_run(self, prompts: PromptSet) -> Run:
        """The run record before any request: config, environment and load facts."""
        o, lm = self.options, self.loaded
        config = RunConfig(
            model=lm.name,
            model_source=lm.source,
            weights=lm.weights,
            device=lm.device,
            dtype=lm.dtype,
            dtype_reason=lm.dtype_reason,
            threads=lm.threads,
            max_new_tokens=o.max_new_tokens,
            ignore_eos=o.ignore_eos,
            warmup=o.warmup,
            repeats=o.repeats,
            prompt_file=prompts.path,
            prompt_sha256=prompts.sha256,
            prompt_count=len(prompts.prompts),
            sampling=Sampling(
                do_sample=o.sample,
                temperature=o.temperature if o.sample else None,
                top_p=o.top_p if o.sample else None,
                seed=o.seed if o.sample else None,
            ),
            chat_template=self.uses_template,
            system_prompt=o.system_prompt,
        )
        return Run(
            schema_version=SCHEMA_VERSION,
            llmbench_version=__version__,
            run_id=uuid.uuid4().hex,
            created_at=datetime.now(timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z"),
            complete=False,
            config=config,
            environment=envinfo.collect(lm.device),
            load=lm.load,
            warnings=list(lm.warnings),
        )

    def run(
        self,
        prompts: PromptSet,
        output: Path,
        *,
        on_request: ProgressFn | None = None,
        on_warmup: Callable[[int, int], None] | None = None,
    ) -> Run:
        """Warm up, then measure every (repeat, prompt); save the JSON after each request.

        Repeats go round the whole prompt list (not one prompt N times), so slow drift of the machine
        hits every prompt alike. Raises :class:`RunInterrupted` on Ctrl-C after saving what finished.
        """
        run = self.new_run(prompts)
        save_run(run, output)
        n = len(prompts.prompts)
        sampler = machine.Sampler()
        try:
            for w in range(self.options.warmup):
                run.warmup_requests.append(self.measure(prompts.prompts[w % n], w % n, -1 - w // n))
                if on_warmup:
                    on_warmup(w + 1, self.options.warmup)
            probe_before = machine.probe(self.loaded.threads, self.loaded.device)
            dwb = self.loaded.load.decode_weight_bytes
            swap0 = psutil.swap_memory()
            total = n * self.options.repeats
            sampler.start()
            t0 = time.perf_counter()
            for repeat in range(self.options.repeats):
                for i, prompt in enumerate(prompts.prompts):
                    result = self.measure(prompt, i, repeat, started_s=time.perf_counter() - t0)
                    run.requests.append(result)
                    run.summary = summarize(run.requests, dwb, probe_before.mem_read_gbps)
                    run.machine = _machine_state(swap0, probe_before, sampler)
                    save_run(run, output)
                    if on_request:
                        on_request(result, len(run.requests), total)
            sampler.stop()
            run.machine = _machine_state(swap0, probe_before, sampler)
            run.machine.probe_after = after = machine.probe(self.loaded.threads, self.loaded.device)
            # the roofline uses the better of the two readings: the bandwidth the machine can reach
            run.summary = summarize(run.requests, dwb, max(probe_before.mem_read_gbps, after.mem_read_gbps))
        except KeyboardInterrupt:
            sampler.stop()
            save_run(run, output)
            raise RunInterrupted(run, output) from None
        run.complete = True
        if run.machine and (run.machine.swap_in_bytes or run.machine.swap_out_bytes):
            run.warnings.append(
                f"the machine swapped during the run (in {run.machine.swap_in_bytes} B, out "
                f"{run.machine.swap_out_bytes} B): timings include waiting on disk"
            )
        save_run(run, output)
        return run


def _machine_state(swap0, probe_before, sampler: machine.Sampler) -> MachineState:
    s = psutil.swap_memory()
    return MachineState(
        swap_in_bytes=max(0, s.sin - swap0.sin),
        swap_out_bytes=max(0, s.sout - swap0.sout),
        process_swap_bytes=_process_swap_bytes(),
        probe_before=probe_before,
        summary=sampler.summary(),
        samples=list(sampler.samples),
    )


def _process_swap_bytes() -> int:
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("VmSwap:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0
