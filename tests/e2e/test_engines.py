"""--engine: llama.cpp, OpenVINO GenAI and ONNX Runtime GenAI behind the one run loop, fed the same token ids.

The backend's own logic (stamps, the engine's timers, prefix-reuse and vocabulary checks) is driven by a runner
with known delays, which gives the ground truth; each real engine is then run on the trained SmolLM2 GGUF and on
a tiny real Qwen2 folder converted by the engine's own tool (skipped, with the reason, where a package or a
converter is missing; .ci/run installs them all)."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest

from llmbench.core.errors import UserError
from llmbench.engines.base import EngineModel, EngineTimers
from llmbench.results.schema import LoadInfo
from llmbench.results.storage import load_run
from tests.helpers import SMOLLM2, cli_process, needs, needs_gguf, wait_for_requests

# -------------------------------------------------------------------------------- a runner with known delays


class KnownRunner:
    """An engine whose prefill takes ``prefill_s`` and each later token ``step_s`` (sleeps: wall time the code
    controls), emitting ids 100, 101, ...; it reports ``reuse`` fewer prompt tokens evaluated than it was given."""

    def __init__(self, tokenizer, prefill_s=0.02, step_s=0.01, reuse=0, garble=False):
        self.tokenizer, self.prefill_s, self.step_s, self.reuse, self.garble = (
            tokenizer,
            prefill_s,
            step_s,
            reuse,
            garble,
        )
        self.fed: list[list[int]] = []

    def generate(self, ids, max_new_tokens, eos, on_token):
        self.fed.append(list(ids))
        time.sleep(self.prefill_s)
        for k in range(max_new_tokens):
            if k:
                time.sleep(self.step_s)
            if not on_token(100 + k):
                break
        return EngineTimers(prompt_tokens_evaluated=len(ids) - self.reuse, ttft_ms=self.prefill_s * 1000,
                            tpot_ms=self.step_s * 1000)  # fmt: skip

    def detokenize(self, ids):
        text = self.tokenizer.decode(ids, skip_special_tokens=True)
        return text + " (not the same)" if self.garble else text

    def vocab_size(self):
        return 151936

    def logprobs(self, ids):
        return None

    def facts(self):
        return {"n_threads": 1}

    def precision(self):
        return {"format": "test", "weights": "q8_0", "activations": "f32", "kv_cache": "f16"}

    def close(self):
        pass


def known_engine(tokenizer, **kw) -> EngineModel:
    from transformers import Qwen2Config

    from tests.conftest import TINY

    return EngineModel(engine="llama.cpp", version="known 1", runner=KnownRunner(tokenizer, **kw), tokenizer=tokenizer,
                       hf_config=Qwen2Config(**TINY), name="known", weights="random", source="folder", path="-",
                       dtype="q8_0", threads=1, load=LoadInfo(seconds=0.0, decode_weight_bytes=1 << 20),
                       max_positions=512)  # fmt: skip


# -------------------------------------------------------------------------------- the real engines


def _run(cli, tmp_path, name, *args):
    out = tmp_path / f"{name}.json"
    r = cli("run", *args, "--max-new-tokens", "6", "--threads", "2", "-o", out, "-q")
    assert r.returncode == 0, r.stderr
    return load_run(out)


@pytest.fixture
def one_prompt(tmp_path) -> Path:
    p = tmp_path / "one.txt"
    p.write_text("Why is the sky blue?\n", encoding="utf-8")
    return p


@pytest.fixture(scope="module")
def smollm2_reference(tmp_path_factory, smollm2_folder):
    """transformers float32 on the trained GGUF (the test run's one dequantization of it, saved as a folder) and
    the three prompts: one run that each engine is held to."""
    from tests.conftest import THREE_PROMPTS
    from tests.helpers import cli

    folder = tmp_path_factory.mktemp("smollm2-reference")
    prompts = folder / "prompts.txt"
    prompts.write_text(THREE_PROMPTS, encoding="utf-8")
    return _run(cli, folder, "hf", prompts, "-m", smollm2_folder, "--dtype", "float32", "--ignore-eos")


@pytest.mark.slow
@needs_gguf
@pytest.mark.parametrize("engine", [pytest.param("llama.cpp", marks=needs("llama.cpp")),
                                    pytest.param("openvino", marks=needs("openvino"))])  # fmt: skip
def test_a_gguf_runs_on_the_engine_with_the_same_ids_and_whole_prompts(cli, tmp_path, prompt_file, one_prompt,
                                                                        smollm2_reference, engine):  # fmt: skip
    reference = smollm2_reference
    run = _run(cli, tmp_path, engine, prompt_file, "-m", SMOLLM2, "--engine", engine, "--repeats", "2")
    assert run.config.engine == engine and run.config.precision["weights"] == "Q4_1" and run.complete
    assert {r.prompt_index: r.prompt_token_ids_sha256 for r in run.requests} == {
        r.prompt_index: r.prompt_token_ids_sha256 for r in reference.requests}  # fmt: skip
    assert all(r.engine_prompt_tokens_evaluated == r.prompt_tokens for r in run.requests)
    assert run.summary.engine_tpot_ms is not None and run.summary.tpot_vs_engine_pct is not None
    # the same prompt back to back (a warm-up of it first): each request still evaluates the whole prompt
    again = _run(cli, tmp_path, f"{engine}-again", one_prompt, "-m", SMOLLM2, "--engine", engine, "--repeats", "3")
    assert [r.engine_prompt_tokens_evaluated for r in again.requests] == [again.requests[0].prompt_tokens] * 3
    assert again.summary.prompt_reuse_requests == 0 and not any("PREFIX" in w for w in again.warnings)


@pytest.mark.slow
@needs("onnxruntime")
def test_a_folder_is_built_for_onnxruntime_once_and_the_cache_reused(cli, tmp_path, prompt_file, tiny_model_dir):
    first = _run(cli, tmp_path, "ort1", prompt_file, "-m", tiny_model_dir, "--engine", "onnxruntime",
                 "--precision", "fp32", "--ignore-eos")  # fmt: skip
    steps = first.load.converted["steps"]
    assert steps[-1]["tool"].startswith("onnxruntime_genai builder") and not steps[-1]["cached"]
    assert first.config.precision["weights"] == "fp32" and first.load.decode_weight_bytes > 0
    hf = _run(cli, tmp_path, "hf", prompt_file, "-m", tiny_model_dir, "--dtype", "float32", "--ignore-eos")
    assert [r.prompt_token_ids_sha256 for r in first.requests] == [r.prompt_token_ids_sha256 for r in hf.requests]
    # float32 weights on both sides: the same greedy tokens
    assert [r.output_token_ids_sha256 for r in first.requests] == [r.output_token_ids_sha256 for r in hf.requests]
    second = _run(cli, tmp_path, "ort2", prompt_file, "-m", tiny_model_dir, "--engine", "onnxruntime",
                  "--precision", "fp32", "--ignore-eos")  # fmt: skip
    assert all(s["cached"] for s in second.load.converted["steps"]) and second.load.convert_s == 0.0


@pytest.mark.slow
@needs("llama.cpp")
def test_random_weights_of_a_folder_are_converted_to_gguf_and_quantized(cli, tmp_path, prompt_file, tiny_model_dir):
    from llmbench.engines.convert import llama_cpp_converter

    try:
        llama_cpp_converter()
    except UserError as e:
        pytest.skip(str(e))
    run = _run(cli, tmp_path, "lc", prompt_file, "-m", tiny_model_dir, "--weights", "random", "--engine", "llama.cpp",
               "--precision", "q4_0")  # fmt: skip
    tools = [s["tool"].split()[0] for s in run.load.converted["steps"]]
    assert tools == ["transformers", "llama.cpp", "llama_model_quantize"]
    assert run.config.precision["weights"] == "Q4_0" and run.warnings[0].startswith("RANDOM WEIGHTS")
    assert all(r.engine_prompt_tokens_evaluated == r.prompt_tokens for r in run.requests)


@pytest.mark.slow
@needs("openvino")
def test_a_folder_is_exported_for_openvino(cli, tmp_path, prompt_file, tiny_model_dir):
    from llmbench.engines.convert import optimum_cli

    try:
        optimum_cli()
    except UserError as e:
        pytest.skip(str(e))
    run = _run(cli, tmp_path, "ov", prompt_file, "-m", tiny_model_dir, "--engine", "openvino", "--precision", "int8",
               "--ignore-eos")  # fmt: skip
    assert run.load.converted["steps"][-1]["tool"].startswith("optimum-intel")
    assert run.config.precision["format"] == "openvino-ir" and run.config.precision["weights"] == "int8"
    assert all(r.engine_prompt_tokens_evaluated == r.prompt_tokens for r in run.requests)


@pytest.mark.slow
@pytest.mark.subprocess
@needs_gguf
@needs("llama.cpp")
def test_an_engine_that_crashes_its_process_is_a_recorded_failure(many_prompts, tmp_path):
    import psutil

    out = tmp_path / "crash.json"
    proc = cli_process("run", many_prompts, "-m", SMOLLM2, "--engine", "llama.cpp", "--max-new-tokens", "4",
                       "--threads", "1", "-o", out, "-q")  # fmt: skip
    try:
        wait_for_requests(out, 3, proc)
        worker = next(c for c in psutil.Process(proc.pid).children() if "worker" in " ".join(c.cmdline()))
        os.kill(worker.pid, signal.SIGILL)  # what a build for another CPU does at its first AMX instruction
        _, stderr = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 2 and "Traceback" not in stderr
    line = stderr.strip().splitlines()[-1]
    assert "SIGILL" in line and "illegal instruction" in line and str(out) in line
    run = load_run(out)
    assert len(run.requests) >= 3 and not run.complete
    assert any("SIGILL" in f.error for f in run.failed_requests)


@pytest.mark.slow
@needs_gguf
@needs("llama.cpp")
def test_quality_of_an_engine_against_transformers_float32(cli, tmp_path):
    out = tmp_path / "q.json"
    r = cli("quality", "-m", SMOLLM2, "--engine", "llama.cpp", "--threads", "2", "--max-new-tokens", "8",
            "--chunk-tokens", "256", "-o", out)  # fmt: skip
    assert r.returncode == 0, r.stderr
    q = json.loads(out.read_text(encoding="utf-8"))
    assert q["candidate"]["engine"] == "llama.cpp" and q["reference"]["dtype"] == "float32"
    assert q["kld_method"] == "exact" and 0 < q["kld_mean"] < 1 and 0.5 < q["top1_agreement"] < 1
    assert q["greedy"]["prompts"] == 8 and len(q["greedy"]["first_divergence"]) == 8


@pytest.mark.slow
@needs_gguf
@needs("llama.cpp")
@needs("openvino")
def test_a_sweep_across_engines_names_a_best_per_metric_with_quality(cli, tmp_path, prompt_file):
    out = tmp_path / "sweep"
    r = cli("sweep", prompt_file, "-m", SMOLLM2, "--engine", "transformers,llama.cpp,openvino", "--dtype", "float32",
            "--threads", "2", "--max-new-tokens", "6", "--ignore-eos", "--rounds", "1", "--quality", "-o", out,
            "-q")  # fmt: skip
    assert r.returncode == 0, r.stderr
    record = json.loads((out / "sweep.json").read_text(encoding="utf-8"))
    rows = {row["engine"]: row for row in record["results"]}
    assert set(rows) == {"transformers", "llama.cpp", "openvino"} and record["complete"]
    assert (
        rows["llama.cpp"]["label"] == "llama.cpp gguf 2t" and rows["llama.cpp"]["precision_detail"]["weights"] == "Q4_1"
    )
    assert rows["transformers"]["kld_mean"] == 0.0  # the float32 setup is the reference
    assert 0 < rows["llama.cpp"]["kld_mean"] < 1 and rows["openvino"]["kld_mean"] is None  # OpenVINO: no logits
    for row in rows.values():
        assert row["greedy_identical_share"] is not None and row["tpot_ms_mean"] > 0
        run = load_run(out / row["run_file"])
        assert run.config.engine == row["engine"] and run.quality["greedy"]["prompts"] == 8
    assert {record["best"]["tpot_ms"]["label"], record["best"]["ttft_ms"]["label"]} <= {
        r["label"] for r in rows.values()
    }
    assert "KLD" in r.stdout and "best TPOT" in r.stdout


def _worker_threads(argv: list[str]) -> int | None:
    """The threads an engine's worker was started with: its spec file's (``llmbench worker --config FILE``)."""
    import tomllib

    if "--config" not in argv:
        return None
    path = Path(argv[argv.index("--config") + 1])
    return tomllib.loads(path.read_text(encoding="utf-8"))["model"].get("threads") if path.exists() else None


@pytest.mark.slow
@pytest.mark.subprocess
@needs_gguf
@needs("llama.cpp")
def test_a_sweep_goes_on_when_one_engine_crashes(many_prompts, tmp_path):
    import psutil

    out = tmp_path / "sweep"
    proc = cli_process("sweep", many_prompts, "-m", SMOLLM2, "--engine", "transformers,llama.cpp", "--dtype",
                       "float32", "--threads", "1,2", "--max-new-tokens", "2", "--ignore-eos", "--rounds", "1",
                       "--warmup", "0", "-o", out, "-q")  # fmt: skip
    try:
        wait_for_requests(out / "llamacpp-gguf-1t.json", 2, proc, timeout=300)
        victim = next(c for c in psutil.Process(proc.pid).children() if _worker_threads(c.cmdline()) == 1)
        os.kill(victim.pid, signal.SIGSEGV)
        _, stderr = proc.communicate(timeout=600)
    finally:
        proc.kill()
    assert proc.returncode == 0, stderr
    record = json.loads((out / "sweep.json").read_text(encoding="utf-8"))
    crashed = next(r for r in record["results"] if r["label"] == "llama.cpp gguf 1t")
    assert crashed["failed"] and record["best"]["tpot_ms"]["label"] != "llama.cpp gguf 1t"
    run = load_run(out / crashed["run_file"])
    assert not run.complete and any("SIGSEGV" in f.error for f in run.failed_requests)
    others = [load_run(out / r["run_file"]) for r in record["results"] if r["label"] != "llama.cpp gguf 1t"]
    assert others and all(o.complete and len(o.requests) == 60 for o in others)


@pytest.mark.slow
@pytest.mark.subprocess
@needs_gguf
@needs("llama.cpp")
def test_ab_sets_one_engine_against_another_and_compare_names_it(cli, tmp_path, prompt_file):
    import sys

    worker = f"{sys.executable} -m llmbench worker -m {SMOLLM2} --threads 2"
    r = cli("ab", prompt_file, "--base", f"{worker} --dtype float32", "--head", f"{worker} --engine llama.cpp",
            "--max-new-tokens", "6", "-o", tmp_path / "ab", "--format", "json")  # fmt: skip
    assert r.returncode == 0, r.stderr
    base, head = load_run(tmp_path / "ab" / "base.json"), load_run(tmp_path / "ab" / "head.json")
    assert (base.config.engine, head.config.engine) == ("transformers", "llama.cpp")
    assert [q.prompt_token_ids_sha256 for q in sorted(base.requests, key=lambda q: q.prompt_index)] == [
        q.prompt_token_ids_sha256 for q in sorted(head.requests, key=lambda q: q.prompt_index)]  # fmt: skip
    compared = json.loads(r.stdout)[0]
    diffs = {d["key"] for d in compared["config_diffs"]}
    assert {"engine", "precision", "dtype"} <= diffs


@pytest.mark.slow
@needs_gguf
@needs("llama.cpp")
def test_scan_measures_length_and_depth_on_an_engine(cli, tmp_path):
    out = tmp_path / "scan"
    r = cli("scan", "-m", SMOLLM2, "--engine", "llama.cpp", "--threads", "2", "--prompt-tokens", "32,96",
            "--depth", "0,128", "--rounds", "1", "--prompts-per-point", "2", "--max-new-tokens", "4", "-o", out,
            "-q")  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "no batch points" in r.stderr
    record = json.loads((out / "scan.json").read_text(encoding="utf-8"))
    assert record["engine"] == "llama.cpp" and record["grid"]["batch"] == []
    run = load_run(out / "length-96.json")
    assert all(q.prompt_tokens == 96 and q.engine_prompt_tokens_evaluated == 96 for q in run.requests)


@pytest.mark.slow
@needs("onnxruntime")
def test_a_failed_conversion_is_one_line_with_the_tools_last_words(cli, tmp_path, prompt_file, tiny_copy):
    (tiny_copy / "model.safetensors").write_bytes(b"not a safetensors file")
    r = cli("run", prompt_file, "-m", tiny_copy, "--engine", "onnxruntime", "--max-new-tokens", "2", "-q")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    line = r.stderr.strip().splitlines()[-1]
    assert len(r.stderr.strip().splitlines()) == 1 and "failed (onnxruntime_genai builder" in line and "log:" in line
    leftovers = [p.name for p in (Path(os.environ["XDG_CACHE_HOME"]) / "llmbench" / "engines" / "onnxruntime").iterdir()
                 if ".tmp-" in p.name]  # fmt: skip
    assert leftovers == []  # nothing half-built is left where the cache would reuse it
