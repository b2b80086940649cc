"""Datasets as prompt sources: ShareGPT, JSONL, CSV, Parquet and save_to_disk folders, columns mapped, filtered by
the run's own token count, sampled from a seed, each request asking for the data's own output length.

This file: the part that drives the tiny model, loopback servers in threads or short child processes
(tests/integration); the rest is in tests/unit/test_dataset.py."""

from __future__ import annotations

import json

import pytest

from llmbench.results.storage import load_run
from llmbench.serve import create_app
from llmbench.workloads import dataset
from llmbench.workloads.dataset import DatasetSpec
from tests.delayed_model import delayed_loaded
from tests.servers import BackgroundServer
from tests.unit.test_dataset import _run, _sharegpt, _table, _write_csv


def test_sharegpt_keeps_exactly_the_entries_the_filters_allow(cli, tiny_model_dir, qwen_tokenizer, tmp_path):
    data = tmp_path / "sg.json"
    prompts = _sharegpt(data)
    everything = tmp_path / "all.json"
    r = _run(cli, data, tiny_model_dir, everything, "--max-new-tokens", "4")
    assert r.returncode == 0, r.stderr
    run = load_run(everything)
    counts = {q.prompt_index: q.prompt_tokens for q in run.requests}
    src = run.config.prompt_source
    assert run.config.prompt_count == 4 and src["skipped"] == {"no human turn": 3} and src["entries"] == 7
    # replies give the output lengths (the one-turn entry: --max-new-tokens); EOS ignored, so exactly those
    reply = [len(qwen_tokenizer(t, add_special_tokens=False)["input_ids"]) for t in
             ("hello there, friend", "short", "a reply of several words " * 3)]  # fmt: skip
    assert src["output_tokens"] == [*reply, 4] and src["output_tokens_from"] == "reply"
    assert {q.prompt_index: q.output_tokens for q in run.requests} == dict(enumerate([*reply, 4]))
    assert run.config.max_new_tokens == max(*reply, 4) and run.config.ignore_eos
    lo, hi = sorted(counts.values())[1], sorted(counts.values())[2]  # keeps the middle two exactly
    filtered = tmp_path / "mid.json"
    r = _run(cli, data, tiny_model_dir, filtered, "--min-prompt-tokens", lo, "--max-prompt-tokens", hi)
    assert r.returncode == 0, r.stderr
    mid = load_run(filtered)
    want = [p for i, p in enumerate(prompts) if lo <= counts[i] <= hi]
    assert len(want) == 2 and mid.config.prompt_source["kept"] == 2
    assert mid.config.prompt_source["dropped_shorter"] == 1 and mid.config.prompt_source["dropped_longer"] == 1
    assert sorted(q.prompt_tokens for q in mid.requests) == sorted(counts[i] for i, p in enumerate(prompts)
                                                                   if p in want)  # fmt: skip
    assert mid.config.prompt_sha256 != run.config.prompt_sha256  # other requests: compare won't pair them
    shown = cli("show", filtered)
    assert f"workload: {data} (sharegpt), 2 of 7 entries (≥{lo} ≤{hi} prompt tokens" in shown.stdout
    compared = cli("compare", everything, filtered)
    assert compared.returncode == 0 and "unpaired" in compared.stdout
    assert "base workload:" in compared.stdout and "new workload:" in compared.stdout
    r = _run(cli, data, tiny_model_dir, tmp_path / "none.json", "--min-prompt-tokens", 10_000)
    assert r.returncode == 2 and "no prompt of" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_columns_map_and_each_request_asks_for_its_own_length(cli, tiny_model_dir, tmp_path):
    rows = _table(6)
    data = tmp_path / "q.csv"
    _write_csv(data, rows)
    out = tmp_path / "c.json"
    r = _run(cli, data, tiny_model_dir, out, "--prompt-column", "question", "--output-len-column", "out_len")
    assert r.returncode == 0, r.stderr
    run = load_run(out)
    assert [q.output_tokens for q in sorted(run.requests, key=lambda q: q.prompt_index)] == [x["out_len"] for x in rows]
    assert run.config.prompt_source["rows"][0] == f"{data}:2" and run.config.prompt_source["format"] == "csv"
    # the same data as JSONL, Parquet and a save_to_disk folder: the same requests (compare pairs them)
    jsonl = tmp_path / "q.jsonl"
    jsonl.write_text("".join(json.dumps(x) + "\n" for x in rows), encoding="utf-8")
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "q.parquet")
    datasets = pytest.importorskip("datasets")
    datasets.Dataset.from_list(rows).save_to_disk(str(tmp_path / "q-disk"))
    for other in (jsonl, tmp_path / "q.parquet", tmp_path / "q-disk"):
        spec = DatasetSpec(str(other), prompt_column="question", output_len_column="out_len")
        got = dataset.with_lengths(dataset.load(spec), 256)
        assert got.sha256 == run.config.prompt_sha256, other
    # a missing column, a bad length: one line each, exit 2
    for args, said in ((("--prompt-column", "nope"), "no column 'nope'"),
                       (("--prompt-column", "question", "--output-len-column", "id"), "at least 1"),
                       ((), "no column 'prompt'")):  # fmt: skip
        r = _run(cli, data, tiny_model_dir, tmp_path / "bad.json", *args)
        assert r.returncode == 2 and said in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_a_server_is_asked_for_each_entrys_own_length(cli, qwen_tokenizer, tmp_path):
    rows = _table(5)
    data = tmp_path / "q.csv"
    _write_csv(data, rows)
    lm = delayed_loaded(qwen_tokenizer, prefill_ms=5.0, decode_ms=2.0, eos_after=1)  # EOS at once unless ignored
    with BackgroundServer(create_app(lm, max_queue=0)) as url:
        out = tmp_path / "ep.json"
        r = cli("run", data, "--endpoint", url, "--prompt-column", "question", "--output-len-column", "out_len",
                "--warmup", "0", "-o", out, "-q")  # fmt: skip
        assert r.returncode == 0, r.stderr
    run = load_run(out)
    assert [q.output_tokens for q in sorted(run.requests, key=lambda q: q.prompt_index)] == [x["out_len"] for x in rows]
    assert run.config.endpoint.request_extra["ignore_eos"] is True


def test_ab_workers_ask_for_each_entrys_own_length(cli, fake_worker, tmp_path):
    rows = _table(4)
    data = tmp_path / "q.csv"
    _write_csv(data, rows)
    out = tmp_path / "ab"
    r = cli("ab", data, "--base", fake_worker(), "--head", fake_worker(), "--prompt-column",
            "question", "--output-len-column", "out_len", "--warmup", "0", "-o", out, "-q")  # fmt: skip
    assert r.returncode == 0, r.stderr
    for side in ("base", "head"):
        run = load_run(out / f"{side}.json")
        got = [q.output_tokens for q in sorted(run.requests, key=lambda q: q.prompt_index)]
        assert got == [x["out_len"] for x in rows] and run.config.prompt_source["output_tokens_from"] == "column"
