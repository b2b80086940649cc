"""The command line: parse options, call the core, render. Heavy modules are imported inside commands."""

from __future__ import annotations

import os
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Optional

import typer

from llmbench import __version__
from llmbench.errors import UserError

app = typer.Typer(
    help="Measure how long a language model makes a person wait: time to first token (TTFT) and time per "
    "output token (TPOT).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


# Options that several commands share, declared once.
Device = Annotated[str, typer.Option(help="auto, cpu, cuda, cuda:N or mps.")]
Weights = Annotated[str, typer.Option(help="pretrained or random.")]
TrustRemoteCode = Annotated[bool, typer.Option("--trust-remote-code", help="Run the repo's own code.")]
SystemPrompt = Annotated[Optional[str], typer.Option(help="System message for every prompt.")]
Quiet = Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar.")]
NoChatTemplate = Annotated[bool, typer.Option("--no-chat-template", help="Send the raw prompt text.")]


def _version(value: bool) -> None:
    if value:
        typer.echo(f"llmbench {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    """llmbench: TTFT and TPOT you can defend."""


@contextmanager
def _user_errors():
    """UserError -> one line on stderr, exit 2."""
    try:
        yield
    except UserError as e:
        _die(str(e), 2)


def _die(message: str, code: int) -> None:
    typer.echo(f"llmbench: error: {message}", err=True)
    raise typer.Exit(code)


@app.command()
def run(
    prompts: Annotated[
        Path,
        typer.Argument(
            help='Prompt file: one prompt a line (.txt) or {"prompt": ...} a line '
            "(.jsonl). Blank lines and # comments are skipped."
        ),
    ],
    model: Annotated[
        Optional[str],
        typer.Option(
            "--model",
            "-m",
            help="Hub id, local folder or .gguf file [default: Qwen/Qwen2.5-0.5B-Instruct]. With --endpoint: the "
            "model name to send (default: the server's first in GET /v1/models).",
        ),
    ] = None,
    weights: Annotated[
        str,
        typer.Option(
            help="pretrained, or random: the real architecture with random weights "
            "(no download; outputs meaningless, timings real)."
        ),
    ] = "pretrained",
    endpoint: Annotated[
        Optional[str],
        typer.Option(
            help="Measure an OpenAI-compatible server instead (vLLM, llama.cpp, Ollama, llmbench serve): its "
            "base URL, e.g. http://127.0.0.1:8000/v1. Streams over SSE, stamps each event on arrival."
        ),
    ] = None,
    api_key_env: Annotated[
        Optional[str], typer.Option(help="With --endpoint: the environment variable holding the API key.")
    ] = None,
    concurrency: Annotated[int, typer.Option(help="With --endpoint: requests in flight at once.")] = 1,
    tokenizer: Annotated[
        Optional[str],
        typer.Option(
            help="With --endpoint: tokenizer (hub id, folder or .gguf) to count tokens if the server sends no usage."
        ),
    ] = None,
    device: Device = "auto",
    dtype: Annotated[
        str, typer.Option(help="auto, float32, bfloat16 or float16. auto = fastest on the device.")
    ] = "auto",
    threads: Annotated[Optional[int], typer.Option(help="torch intra-op threads (default: torch's choice).")] = None,
    max_new_tokens: Annotated[int, typer.Option(help="Tokens to generate per request at most.")] = 256,
    ignore_eos: Annotated[
        Optional[bool],
        typer.Option(
            "--ignore-eos/--stop-at-eos", help="Generate exactly --max-new-tokens. Default: on with random weights."
        ),
    ] = None,
    warmup: Annotated[int, typer.Option(help="Unmeasured requests before the measured ones.")] = 1,
    repeats: Annotated[int, typer.Option(help="Times to go round the whole prompt list.")] = 1,
    sample: Annotated[bool, typer.Option("--sample", help="Sample instead of greedy decoding.")] = False,
    seed: Annotated[int, typer.Option(help="Seed for --sample.")] = 0,
    temperature: Annotated[float, typer.Option(help="Temperature for --sample.")] = 1.0,
    top_p: Annotated[float, typer.Option(help="Top-p for --sample.")] = 1.0,
    system_prompt: SystemPrompt = None,
    no_chat_template: NoChatTemplate = False,
    device_map: Annotated[
        Optional[str],
        typer.Option(
            help="Let accelerate place the weights: auto, balanced, "
            "sequential or a JSON object. Offloading is still refused."
        ),
    ] = None,
    allow_offload: Annotated[
        bool,
        typer.Option("--allow-offload", help="Run even when weights are offloaded to disk/CPU (recorded in the JSON)."),
    ] = False,
    allow_pickle: Annotated[bool, typer.Option("--allow-pickle", help="Allow pickle (.bin) weights.")] = False,
    trust_remote_code: Annotated[
        bool, typer.Option("--trust-remote-code", help="Run the model repo's own code.")
    ] = False,
    output: Annotated[
        Optional[Path],
        typer.Option("--output", "-o", help="Run JSON path (default: results/<UTC time>-<model>-<device>.json)."),
    ] = None,
    overwrite: Annotated[bool, typer.Option("--overwrite", help="Replace an existing output file.")] = False,
    resume: Annotated[
        Optional[Path],
        typer.Option(
            help="Continue this incomplete run JSON: only its missing "
            "requests are run (same options and prompts required)."
        ),
    ] = None,
    truncate: Annotated[
        bool,
        typer.Option(
            "--truncate", help="Cut prompts longer than the context (keeping their end) instead of refusing them."
        ),
    ] = False,
    attn: Annotated[
        Optional[str], typer.Option(help="Attention kernel: eager, sdpa, ... (default: the model's).")
    ] = None,
    cache: Annotated[str, typer.Option(help="KV cache: dynamic or static (preallocated).")] = "dynamic",
    compile_: Annotated[
        bool,
        typer.Option(
            "--compile",
            help="torch.compile the decode step (implies --cache static); compile time is reported on its own.",
        ),
    ] = False,
    quantize: Annotated[
        Optional[str], typer.Option(help="int8: dynamic int8 weights for every linear layer (CPU, float32).")
    ] = None,
    quiet: Quiet = False,
) -> None:
    """Stream every prompt through a model in this process (or a server: --endpoint), stamp every token, write a
    run JSON."""
    from llmbench import display, results
    from llmbench.errors import RunInterrupted
    from llmbench.options import RunOptions
    from llmbench.prompts import load_prompts

    with _user_errors():
        prompt_set = load_prompts(prompts)
        options = RunOptions(
            max_new_tokens=max_new_tokens,
            ignore_eos=(weights == "random") if ignore_eos is None else ignore_eos,
            warmup=warmup,
            repeats=repeats,
            sample=sample,
            seed=seed,
            temperature=temperature,
            top_p=top_p,
            system_prompt=system_prompt,
            chat_template=not no_chat_template,
            truncate=truncate,
            cache="static" if compile_ else cache,
            compile=compile_,
        )
        options.validate()
        if endpoint is not None:
            in_process_only = {
                "--weights": weights != "pretrained",
                "--device": device != "auto",
                "--dtype": dtype != "auto",
                "--threads": threads is not None,
                "--resume": resume is not None,
                "--device-map": device_map is not None,
                "--compile": compile_,
                "--quantize": quantize is not None,
                "--attn": attn is not None,
                "--cache": cache != "dynamic",
                "--truncate": truncate,
                "--no-chat-template": no_chat_template,
            }
            _run_endpoint(
                prompt_set, options, endpoint, model, api_key_env, concurrency, tokenizer, output, overwrite, quiet,
                refused=in_process_only,
            )  # fmt: skip
            return
        from llmbench import models, runner  # torch and transformers: the in-process path only

        model = model or models.DEFAULT_MODEL
        spec = models.ModelSpec(
            model=model,
            weights=weights,
            device=device,
            dtype=dtype,
            threads=threads,
            device_map=device_map,
            allow_offload=allow_offload,
            allow_pickle=allow_pickle,
            trust_remote_code=trust_remote_code,
            attn=attn,
            quantize=None if quantize in (None, "none") else quantize,
        )
        resolved = spec.validate()  # bad --device/--dtype/--threads/--weights fail now, not after loading
        previous = None
        if resume is not None:
            if output is not None and output.resolve() != resume.resolve():
                raise UserError("--resume writes into the run it continues: drop -o/--output")
            # what can be compared before loading the model is compared now; the rest before any request
            early = {
                "model": model,
                "weights": weights,
                "device": resolved,
                "max_new_tokens": max_new_tokens,
                "ignore_eos": options.ignore_eos,
                "repeats": repeats,
                "prompt_sha256": prompt_set.sha256,
                "system_prompt": system_prompt,
                "truncate": truncate,
            }
            previous = runner.load_resumable(resume, early)
            path = resume
        else:
            path = results.prepare_output(output or results.default_output_path(model, resolved), overwrite)

        # A spinner on a terminal only: a failed load then prints its one error line and nothing else.
        with display.err.status(f"loading {model} ({weights} weights) on {resolved} ..."):
            loaded = models.load_model(spec)
        for w in loaded.warnings:
            display.warn(w)
        display.info(
            f"loaded in {loaded.load.seconds:.1f} s: {loaded.dtype} ({loaded.dtype_reason}), "
            f"{loaded.threads} threads, {(loaded.load.parameters or 0) / 1e6:.1f}M parameters"
        )
        bench = runner.Benchmark(loaded, options)
        total = len(prompt_set.prompts) * options.repeats
        try:
            with display.run_progress(total, options.warmup, quiet) as (on_warmup, on_request):
                result = bench.run(prompt_set, path, resume=previous, on_request=on_request, on_warmup=on_warmup)
        except RunInterrupted as e:
            display.err.print(
                f"interrupted by {e.signal_name}: {len(e.run.requests)} of {total} requests saved in {e.path} "
                f"(complete: false). Resume with:\n  {_resume_command(e.path)}",
                soft_wrap=True,
            )
            raise typer.Exit(e.exit_code) from None
    if result.load and result.load.compile_s is not None:
        display.info(f"compiled in {result.load.compile_s:.1f} s, before the first request (load.compile_s)")
    for w in result.warnings[len(loaded.warnings) :]:
        display.warn(w)
    display.out.print(display.summary_table(result))
    display.out.print(f"wrote {path}")


def _run_endpoint(
    prompt_set, options, url, model, api_key_env, concurrency, tokenizer, output, overwrite, quiet, refused
):
    """``run --endpoint``: the same run JSON, measured over HTTP (no torch imported)."""
    from llmbench import display, endpoint, results
    from llmbench.errors import RunInterrupted

    given = [name for name, on in refused.items() if on]
    if given:
        raise UserError(f"{', '.join(given)}: in-process run options only; with --endpoint the server decides them")
    bench = endpoint.EndpointBenchmark(
        endpoint.EndpointOptions(url=url, model=model, api_key_env=api_key_env, concurrency=concurrency,
                                 tokenizer=tokenizer),
        options,
    )  # fmt: skip
    path = results.prepare_output(
        output or results.default_output_path(bench.model or "endpoint", "endpoint"), overwrite
    )
    if not quiet:
        display.info(
            f"streaming to {endpoint.redact(bench.url)} (model {bench.model or 'not named'}), {concurrency} at a time"
        )
    total = len(prompt_set.prompts) * options.repeats
    try:
        with display.run_progress(total, options.warmup, quiet) as (on_warmup, on_request):
            result = bench.run(prompt_set, path, on_request=on_request, on_warmup=on_warmup)
    except RunInterrupted as e:
        display.err.print(
            f"interrupted by {e.signal_name}: {len(e.run.requests)} of {total} requests saved in {e.path} "
            "(complete: false)",
            soft_wrap=True,
        )
        raise typer.Exit(e.exit_code) from None
    for w in result.warnings:
        display.warn(w)
    display.out.print(display.summary_table(result))
    if result.client:
        c = result.client
        display.info(
            f"client: {c.cpu_s:.2f} s CPU in {c.wall_s:.1f} s ({c.cpu_pct_of_one_core:.1f}% of one core"
            + (f", {c.cpu_ms_per_event:.3f} ms per event)" if c.cpu_ms_per_event is not None else ")")
        )
    display.out.print(f"wrote {path}")


@app.command()
def sweep(
    prompts: Annotated[Path, typer.Argument(help="Prompt file (as for run).")],
    dtype: Annotated[str, typer.Option(help="Comma-separated dtypes: float32,bfloat16,float16.")] = "float32,bfloat16",
    threads: Annotated[
        Optional[str], typer.Option(help="Comma-separated thread counts, e.g. 1,2 (default: torch's choice).")
    ] = None,
    attn: Annotated[Optional[str], typer.Option(help="Comma-separated attention kernels, e.g. eager,sdpa.")] = None,
    cache: Annotated[str, typer.Option(help="Comma-separated KV caches: dynamic,static.")] = "dynamic",
    compile_: Annotated[
        bool, typer.Option("--compile", help="Also sweep torch.compile'd decoding (static cache) of each setup.")
    ] = False,
    quantize: Annotated[str, typer.Option(help="Comma-separated: none,int8 (int8 with float32 only).")] = "none",
    model: Annotated[
        str, typer.Option("--model", "-m", help="Hub id, local folder or .gguf file.")
    ] = "Qwen/Qwen2.5-0.5B-Instruct",
    weights: Weights = "pretrained",
    device: Device = "auto",
    max_new_tokens: Annotated[int, typer.Option(help="Tokens to generate per request at most.")] = 64,
    ignore_eos: Annotated[
        Optional[bool],
        typer.Option("--ignore-eos/--stop-at-eos", help="Generate exactly --max-new-tokens. Default: on with random."),
    ] = None,
    warmup: Annotated[int, typer.Option(help="Unmeasured requests per setup before the rounds.")] = 1,
    rounds: Annotated[int, typer.Option(help="Rounds; each runs every setup once over all prompts.")] = 3,
    rank_by: Annotated[str, typer.Option(help="Statistic that picks the best: mean, or p50 (robust).")] = "mean",
    system_prompt: SystemPrompt = None,
    no_chat_template: NoChatTemplate = False,
    trust_remote_code: TrustRemoteCode = False,
    output: Annotated[
        Optional[Path],
        typer.Option("--output", "-o", help="Folder for the runs and sweep.json (default: results/sweep-<time>)."),
    ] = None,
    quiet: Quiet = False,
) -> None:
    """Find the fastest setup: every combination of dtype, threads, attention, cache, compile and quantization,
    measured in interleaved rounds; TTFT and TPOT ranked apart."""
    from llmbench import display, models, runner
    from llmbench import sweep as sw
    from llmbench.prompts import load_prompts

    with _user_errors():
        prompt_set = load_prompts(prompts)
        options = runner.RunOptions(
            max_new_tokens=max_new_tokens,
            ignore_eos=(weights == "random") if ignore_eos is None else ignore_eos,
            warmup=warmup,
            repeats=rounds,
            system_prompt=system_prompt,
            chat_template=not no_chat_template,
        )
        spec = models.ModelSpec(model=model, weights=weights, device=device, trust_remote_code=trust_remote_code)
        setups, skipped = sw.plan(spec, options, dtype=dtype, threads=threads, attn=attn, cache=cache,
                                  compile_=compile_, quantize=quantize)  # fmt: skip
        for why in skipped:
            display.warn(f"left out {why}")
        if rank_by not in ("mean", "p50"):
            raise UserError(f"unknown --rank-by '{rank_by}'; expected mean or p50")
        out_dir = sw.prepare_dir(output)
        sweep_ = sw.Sweep(setups, spec, options, out_dir, on_status=display.info, rank_by=rank_by)
        display.info(f"{len(setups)} setups x {rounds} rounds x {len(prompt_set.prompts)} prompts -> {out_dir}")
        sweep_.load(prompt_set)
        total = len(setups) * rounds * len(prompt_set.prompts)
        try:
            with display.run_progress(total, 0, quiet) as (_, on_request):
                record = sweep_.run(prompt_set, on_request=lambda e, done, n: on_request(e.run.requests[-1], done, n))
        except runner.RunInterrupted as e:
            display.err.print(f"interrupted by {e.signal_name}: finished requests saved in {out_dir}")
            raise typer.Exit(e.exit_code) from None
    for e in sweep_.entries:
        for w in e.run.warnings:
            if not w.startswith("RANDOM WEIGHTS"):
                display.warn(f"{e.setup.label()}: {w}")
    for t in display.sweep_tables(record):
        display.out.print(t, width=max(display.out.width, 100))  # setups don't wrap, even in a CI log
    for line in display.sweep_verdicts(record):
        display.out.print(line, soft_wrap=True)
    display.out.print(f"wrote {out_dir / 'sweep.json'} and {len(setups)} run files")


@app.command()
def serve(
    model: Annotated[
        str, typer.Option("--model", "-m", help="Hub id, local folder or .gguf file.")
    ] = "Qwen/Qwen2.5-0.5B-Instruct",
    weights: Weights = "pretrained",
    device: Device = "auto",
    dtype: Annotated[str, typer.Option(help="auto, float32, bfloat16 or float16.")] = "auto",
    threads: Annotated[Optional[int], typer.Option(help="torch intra-op threads.")] = None,
    attn: Annotated[Optional[str], typer.Option(help="Attention kernel: eager, sdpa, ...")] = None,
    quantize: Annotated[Optional[str], typer.Option(help="int8: dynamic int8 linear weights (CPU).")] = None,
    host: Annotated[
        str, typer.Option(help="Address to listen on (loopback by default: no one else can reach it).")
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8000,
    max_queue: Annotated[int, typer.Option(help="Requests that may wait while one generates; more get 429.")] = 4,
    max_tokens: Annotated[int, typer.Option(help="max_tokens when a request gives none.")] = 256,
    trust_remote_code: TrustRemoteCode = False,
) -> None:
    """Serve a model over an OpenAI-compatible SSE endpoint, with a page at / that shows tokens, TTFT and TPOT live."""
    from llmbench import display, models
    from llmbench import serve as sv

    with _user_errors():
        if max_queue < 0:
            raise UserError(f"--max-queue must be 0 or more, not {max_queue}")
        if max_tokens < 1:
            raise UserError(f"--max-tokens must be at least 1, not {max_tokens}")
        spec = models.ModelSpec(model=model, weights=weights, device=device, dtype=dtype, threads=threads, attn=attn,
                                quantize=quantize, trust_remote_code=trust_remote_code)  # fmt: skip
        spec.validate()
        sv.check_port(host, port)
        executor = sv.generation_executor()
        with display.err.status(f"loading {model} ({weights} weights) ..."):
            # on the thread that will generate: one OpenMP thread team, not two fighting for the cores
            loaded = executor.submit(models.load_model, spec).result()
        for w in loaded.warnings:
            display.warn(w)
        app_ = sv.create_app(loaded, max_queue=max_queue, max_tokens=max_tokens, executor=executor)
    url_host = f"[{host}]" if ":" in host else host
    display.err.print(
        f"serving {model} on {loaded.device} ({loaded.dtype}, {loaded.threads} threads) at http://{url_host}:{port}\n"
        f"  page: http://{url_host}:{port}/   API: POST /v1/chat/completions (stream: true for SSE)   GET /health\n"
        f"  one request generates at a time, {max_queue} may wait, more get 429. Ctrl-C stops.",
        soft_wrap=True,
    )
    sv.run_server(app_, host, port)


@app.command()
def compare(
    runs: Annotated[
        list[Path], typer.Argument(help="BASE.json NEW.json [MORE.json ...]: each NEW is compared with BASE.")
    ],
    fail_on_regression: Annotated[
        Optional[float], typer.Option(help="Exit 1 when TTFT, TPOT or E2E regresses significantly by more than PCT %.")
    ] = None,
    fail_on: Annotated[Optional[list[str]], typer.Option(help="METRIC=PCT, e.g. tpot_ms=5 (repeatable).")] = None,
    gate_stat: Annotated[str, typer.Option(help="Statistic the gates test: mean, p50 or p90.")] = "mean",
    strict: Annotated[
        bool, typer.Option("--strict", help="Exit 2 when the setups differ (model, dtype, threads, prompts...).")
    ] = False,
    fmt: Annotated[str, typer.Option("--format", help="table, markdown or json.")] = "table",
) -> None:
    """Tell a real change from machine noise: change, 95% CI and verdict per metric; CI gates."""
    import json

    from llmbench import compare as cmp
    from llmbench import display
    from llmbench.results import load_run

    code = 0
    with _user_errors():
        if len(runs) < 2:
            raise UserError("compare needs at least two run files: BASE.json NEW.json [MORE.json ...]")
        if fmt not in ("table", "markdown", "json"):
            raise UserError(f"unknown --format '{fmt}'; expected table, markdown or json")
        if gate_stat not in cmp.STATS:
            raise UserError(f"unknown --gate-stat '{gate_stat}'; expected mean, p50 or p90")
        gates = cmp.parse_thresholds(fail_on_regression, fail_on)
        loaded = [load_run(p, scalars_only=True) for p in runs]
        comps = [
            cmp.compare_runs(
                loaded[0], new, base_name=str(runs[0]), new_name=str(path), gates=gates, gate_stat=gate_stat
            )
            for new, path in zip(loaded[1:], runs[1:], strict=True)
        ]
        if strict:
            for c in comps:
                if c.config_diffs:
                    diffs = ", ".join(f"{k} {b} -> {n}" for k, b, n in c.config_diffs)
                    raise UserError(f"--strict: {c.new} was run with a different setup than {c.base}: {diffs}")
    if fmt == "json":
        typer.echo(json.dumps([c.to_dict() for c in comps], indent=2, default=str))
    for c in comps:
        if fmt == "table":
            display.print_comparison(c)
        elif fmt == "markdown":
            typer.echo(display.comparison_markdown(c))
        if c.regressions:
            code = 1
    raise typer.Exit(code)


@app.command()
def show(run_file: Annotated[Path, typer.Argument(help="A run JSON.")]) -> None:
    """The summary table of a saved run."""
    from llmbench import display
    from llmbench.results import load_run

    with _user_errors():
        run = load_run(run_file)
    for w in run.warnings:
        display.warn(w)
    display.out.print(display.summary_table(run))


@app.command()
def export(
    run_file: Annotated[Path, typer.Argument(help="A run JSON.")],
    output: Annotated[Path, typer.Option("--output", "-o", help="The file to write.")],
    fmt: Annotated[str, typer.Option("--format", help="csv or parquet.")] = "csv",
    tokens: Annotated[bool, typer.Option("--tokens", help="One row per token instead of per request.")] = False,
    overwrite: Annotated[bool, typer.Option("--overwrite", help="Replace an existing file.")] = False,
) -> None:
    """A tidy table of a run (pandas): one row per request, or per token with --tokens."""
    from llmbench import export as ex
    from llmbench.results import load_run, prepare_output

    with _user_errors():
        if fmt not in ("csv", "parquet"):
            raise UserError(f"unknown --format '{fmt}'; expected csv or parquet")
        run = load_run(run_file)
        path = prepare_output(output, overwrite)
        rows = ex.export(run, path, fmt, tokens)
    typer.echo(f"wrote {rows} rows to {path}")


@app.command()
def report(
    runs: Annotated[list[Path], typer.Argument(help="RUN.json [MORE.json ...]; the first is the base.")],
    output: Annotated[Path, typer.Option("--output", "-o", help="The HTML file to write.")] = Path("report.html"),
    overwrite: Annotated[bool, typer.Option("--overwrite", help="Replace an existing file.")] = False,
) -> None:
    """One self-contained HTML file: tables, token timelines, ITL histogram, TTFT vs prompt length, compare."""
    from llmbench.report import build_report
    from llmbench.results import load_run, prepare_output

    with _user_errors():
        loaded = [(str(p), load_run(p)) for p in runs]
        for name, run in loaded:
            if not run.requests:
                raise UserError(f"{name} has no finished requests: nothing to report")
        path = prepare_output(output, overwrite)
        path.write_text(build_report(loaded), encoding="utf-8")
    typer.echo(f"wrote {path} ({path.stat().st_size / 1024:.0f} KiB)")


def _resume_command(path: Path) -> str:
    """This invocation's command line with --resume PATH instead of -o/--overwrite/--resume."""
    import shlex

    args, skip = [], False
    for a in sys.argv[1:]:
        if skip:
            skip = False
            continue
        if a in ("-o", "--output", "--resume"):
            skip = True
            continue
        if a == "--overwrite" or a.startswith(("--output=", "--resume=")):
            continue
        args.append(a)
    return shlex.join(["llmbench", *args, "--resume", str(path)])


def main() -> None:
    """Console entry point: click's usage errors become one line too (exit 2)."""
    try:
        code = app(standalone_mode=False)
    except typer.Abort:
        typer.echo("llmbench: aborted", err=True)
        sys.exit(130)
    except typer.TyperException as e:  # click's usage errors (typer vendors click): bad option, bad value
        ctx = getattr(e, "ctx", None)
        command = f"llmbench {ctx.info_name} --help" if ctx is not None and ctx.parent else "llmbench --help"
        message = e.format_message() if hasattr(e, "format_message") else str(e)
        typer.echo(f"llmbench: error: {' '.join(message.split())} (see {command})", err=True)
        sys.exit(getattr(e, "exit_code", 2))
    except KeyboardInterrupt:
        typer.echo("llmbench: interrupted", err=True)
        sys.exit(130)
    except Exception as e:  # a bug, not a user error: one line, traceback on request
        if os.environ.get("LLMBENCH_DEBUG"):
            raise
        typer.echo(
            f"llmbench: internal error: {type(e).__name__}: {e} (set LLMBENCH_DEBUG=1 for the traceback)", err=True
        )
        sys.exit(1)
    sys.exit(code if isinstance(code, int) else 0)
