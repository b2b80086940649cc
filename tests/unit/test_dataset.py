"""Datasets as prompt sources: ShareGPT, JSONL, CSV, Parquet and save_to_disk folders, columns mapped, filtered by
the run's own token count, sampled from a seed, each request asking for the data's own output length."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from llmbench.core.errors import UserError
from llmbench.workloads import dataset
from llmbench.workloads.dataset import DatasetSpec

WORDS = "the plant dumps untreated water into the river at night while inspectors sleep "


def _sharegpt(path: Path) -> list[str]:
    """Short, medium and long first turns, one with a system turn first, one turn without a reply, and entries
    without a human turn (skipped). Returns the prompts in file order."""
    entries = [
        {"conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "hello there, friend"}]},
        {"conversations": [{"from": "gpt", "value": "an answer to nothing"}]},  # no human turn
        {"conversations": [{"from": "human", "value": WORDS * 2}, {"from": "gpt", "value": "short"}]},
        {"conversations": [{"from": "system", "value": "be terse"}, {"from": "human", "value": WORDS * 6},
                           {"from": "gpt", "value": "a reply of several words " * 3}]},
        {"conversations": [{"from": "human", "value": WORDS * 12}]},  # one turn: no reply
        {"conversations": []},
        {"conversations": [{"from": "human", "value": "   "}, {"from": "gpt", "value": "x"}]},  # blank
    ]  # fmt: skip
    path.write_text(json.dumps(entries), encoding="utf-8")
    return ["hi", WORDS * 2, WORDS * 6, WORDS * 12]


def _table(n: int = 12) -> list[dict]:
    return [{"id": i, "question": f"question {i}: " + WORDS * (1 + i % 5), "out_len": 2 + i % 4} for i in range(n)]


def _write_csv(path: Path, rows: list[dict]) -> None:
    with path.open("w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)


def _run(cli, data, model, out, *args):
    return cli("run", data, "-m", model, "--device", "cpu", "--dtype", "float32", "--warmup", "0", "-o", out, "-q",
               *args)  # fmt: skip


def test_num_prompts_samples_from_the_seed_among_what_the_filters_keep(qwen_tokenizer, tmp_path):
    data = tmp_path / "t.jsonl"
    data.write_text("".join(json.dumps(x) + "\n" for x in _table(40)), encoding="utf-8")

    def count(text: str) -> int:
        return len(qwen_tokenizer(text)["input_ids"])

    rows = dataset.read(DatasetSpec(str(data), prompt_column="question"))
    a = dataset.select(DatasetSpec(str(data), prompt_column="question", num_prompts=5, seed=1), rows)
    again = dataset.select(DatasetSpec(str(data), prompt_column="question", num_prompts=5, seed=1), rows)
    other = dataset.select(DatasetSpec(str(data), prompt_column="question", num_prompts=5, seed=2), rows)
    assert a.prompts == again.prompts and a.sha256 == again.sha256 and len(a.prompts) == 5
    assert a.prompts != other.prompts
    short = DatasetSpec(str(data), prompt_column="question", num_prompts=6, seed=1, max_prompt_tokens=25)
    got = dataset.select(short, rows, count)
    assert len(got.prompts) == 6 and all(count(p) <= 25 for p in got.prompts)
    short_enough = sum(count(p) <= 25 for p in rows.prompts)
    assert 6 <= short_enough < 30
    with pytest.raises(UserError, match=f"only {short_enough} entries"):
        dataset.select(DatasetSpec(str(data), prompt_column="question", num_prompts=30, max_prompt_tokens=25),
                       rows, count)  # fmt: skip
    with pytest.raises(UserError, match="tokenizer"):
        dataset.select(short, rows)


@pytest.mark.parametrize(
    ("name", "content", "said"),
    [
        ("a.json", "{not json", "not valid JSON"),
        ("b.json", '{"prompt": "x"}', "expected a JSON list"),
        ("c.jsonl", '{"prompt": "x"}\n[1, 2]\n', "c.jsonl:2: expected a JSON object"),
        ("d.csv", "prompt,n\n,1\n", "has no prompts"),
        ("e.parquet", "not parquet at all", "not a readable Parquet file"),
        ("f.json", '[{"conversations": "nope"}]', "entry 0"),
        ("g.xml", "<a/>", "can't tell the format"),
    ],
)
def test_bad_dataset_files_are_one_line(cli, tmp_path, name, content, said):
    path = tmp_path / name
    path.write_text(content, encoding="utf-8")
    mapped = () if name.startswith("f.") else ("--prompt-column", "prompt")  # ShareGPT has no columns
    r = cli("run", path, "--weights", "random", *mapped, "-q", "-o", tmp_path / "x.json")
    assert r.returncode == 2 and said in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert not (tmp_path / "x.json").exists()


def test_bad_dataset_options_are_one_line(cli, tmp_path, prompt_file):
    for args, said in (
        (("--min-prompt-tokens", "9", "--max-prompt-tokens", "3"), "nothing could be kept"),
        (("--num-prompts", "0"), "--num-prompts must be 1 to 1,000,000"),
        (("--prompt-format", "xml"), "--prompt-format 'xml'"),
        (("--synthetic", "10x2", "--num-prompts", "2"), "not --synthetic"),
    ):
        target = () if "--synthetic" in args else (prompt_file,)
        r = cli("run", *target, "--weights", "random", "-q", *args)
        assert r.returncode == 2 and said in r.stderr and len(r.stderr.strip().splitlines()) == 1, (args, r.stderr)


@pytest.mark.parametrize(
    ("name", "content", "said"),
    [
        ("a.jsonl", '{"prompt": "x", "n": ' + "9" * 5000 + "}\n", "a.jsonl:1: not valid JSON"),  # was: internal error
        ("b.json", '[{"prompt": "x", "n": ' + "9" * 5000 + "}]", "b.json: not valid JSON"),
        ("c.csv", "prompt,n\nx,nan\n", "c.csv:2: 'n' must be a whole number of tokens"),
        ("d.csv", "prompt,n\nx,inf\n", "d.csv:2: 'n' must be a whole number of tokens"),
        ("e.jsonl", '{"prompt": "x", "n": 1000000000000}\n', "more tokens than any model reads"),
        ("f.jsonl", '{"prompt": "x", "n": 2.5}\n', "'n' must be a whole number of tokens"),
        ("g.jsonl", '{"prompt": "x", "n": true}\n', "'n' must be a whole number of tokens"),
        ("h.jsonl", '{"prompt": "x", "n": -3}\n', "'n' must be a whole number of at least 1"),
    ],
)
def test_a_bad_number_in_a_dataset_is_one_line(cli, tmp_path, name, content, said):
    path = tmp_path / name
    path.write_text(content, encoding="utf-8")
    r = cli("run", path, "--weights", "random", "--output-len-column", "n", "-q", "-o", tmp_path / "x.json")
    assert r.returncode == 2 and said in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert not (tmp_path / "x.json").exists()


def test_a_whole_float_is_a_length_as_a_parquet_column_of_floats_gives_it(tmp_path):
    path = tmp_path / "floats.jsonl"
    path.write_text('{"prompt": "x", "n": 3.0}\n{"prompt": "y", "n": "4"}\n', encoding="utf-8")
    chosen = dataset.load(DatasetSpec(str(path), output_len_column="n"))
    assert chosen.output_tokens == (3, 4)


MULTILINE = "Summarize:\nline one\nline two"


@pytest.mark.parametrize("suffix", [".csv", ".jsonl", ".json", ".parquet"])
def test_a_multi_line_prompt_keeps_its_line_breaks_in_every_format(tmp_path, suffix):
    # a quoted CSV cell with newlines was sent as "Summarize:line oneline two" (the reader was fed split lines)
    rows = [{"prompt": MULTILINE, "n": 3}, {"prompt": "crlf\r\nand\ru2028\u2028kept", "n": 4}, {"prompt": "x", "n": 5}]
    path = tmp_path / f"d{suffix}"
    if suffix == ".csv":
        _write_csv(path, rows)  # csv quotes the cells with line breaks (and writes \r\n between rows)
    elif suffix == ".jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    elif suffix == ".json":
        path.write_text(json.dumps(rows), encoding="utf-8")
    else:
        pq = pytest.importorskip("pyarrow.parquet")
        import pyarrow as pa

        pq.write_table(pa.Table.from_pylist(rows), path)
    chosen = dataset.load(DatasetSpec(str(path), output_len_column="n"))
    assert chosen.prompts == tuple(r["prompt"] for r in rows) and chosen.output_tokens == (3, 4, 5)
    if suffix == ".csv":  # each row is named by the line it starts on
        assert chosen.source["rows"] == [f"{path}:2", f"{path}:5", f"{path}:8"]
