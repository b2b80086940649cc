"""What ``llmbench --help`` lists for each command: the first paragraph of its help, generated from the commands
themselves with the help baseline (``python -m tests.unit.test_help``, which holds them to the commands), so the
root help imports no command module and no spec."""

# ruff: noqa: E501  (generated: one summary a line)
from __future__ import annotations

SUMMARIES: dict[str, str] = {
    "run": "Stream every prompt through a model in this process (or a server: --endpoint), stamp every token, write a\nrun JSON.",
    "sweep": "Find the fastest setup: every combination of engine, precision, dtype, threads, attention, cache, compile,\nquantization, speculative decoding and prefix cache, measured in interleaved rounds; TTFT and TPOT ranked\napart.",
    "scan": "TTFT against prompt length, TPOT against context depth, throughput against batch size: controlled prompts,\ninterleaved rounds, fitted curves.",
    "load": "A server under open-loop load, rate by rate: latency percentiles, 429s, goodput under SLOs, fluidity and\nstalls, the saturation point and the fluid capacity.",
    "quality": "Faster, but still the same model? KL divergence, top-1 agreement and perplexity against a reference setup\n(teacher-forced on a text), and where greedy answers part.",
    "serve": "Serve a model over an OpenAI-compatible SSE endpoint, with a page at / that shows tokens, TTFT and TPOT live.",
    "paint": "Time to the first painted character: each prompt streamed in headless Chromium (fetch + ReadableStream, a page\nat the endpoint's origin), every event stamped when read, appended and painted (requestAnimationFrame), with the\nbuffering detector on the same streams.",
    "compare": "Tell a real change from machine noise: change, 95% CI and verdict per metric; CI gates.",
    "ab": "Base and head side by side, request by request (ABBA), so machine drift cancels; compare's verdict and\ngate on the pair.",
    "worker": "A model in a process of its own, measuring on command over stdin/stdout (JSON lines): one side of\n`llmbench ab`. Not for typing at: ab starts it.",
    "bisect": "Find the commit between GOOD and BAD that made METRIC slower: each step an ab against GOOD, looked at\nagain while its interval straddles half of BAD's change; a commit that can't be built or run is skipped.",
    "bisect-step": "For `git bisect run llmbench bisect-step GOOD ...`: the checked-out commit against GOOD; exit 0 good, 1\nbad, 125 when it can't be built or run or stays unsure (git tries a neighbour), 128 on any other error.",
    "engines": "The engines --engine can use here: installed versions, what each reads, its converter, and whether\nllama.cpp's build runs on this CPU.",
    "trend": "A metric over time: the series with its intervals, commits on the axis, change points; against an anchor,\nthe creep a change of runner can't hide.",
    "show": "The summary table of a saved run (or a scan's curves and fits, a load test's rates, a paint's requests).",
    "export": "A tidy table of a run (pandas): one row per request, or per token with --tokens; or a trace.",
    "report": "One self-contained HTML file: tables, token timelines, ITL histogram, TTFT vs prompt length, compare; for a\nscan.json, its curves with their fits.",
    "convert": "Write a run as one JSON file (for sharing and older readers), or as JSON plus an Arrow columns file.",
    "prompts": "The prompt sets llmbench ships: give a name as PROMPTS (run, sweep, load, ab...) instead of a file. A file\nof that name in the current folder wins.",
    "history": "The history database: results over time, per machine (see --history).",
}
