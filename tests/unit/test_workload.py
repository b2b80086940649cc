"""The prompt-source ladder, written once (llmbench.drivers.workload): what the user asked for -> the source it names
-> what is known before anything loads -> the prompts the run loop sends, counted as the run counts them; and the
exact-length texts every made workload is cut with (llmbench.workloads.text), the same bytes as before they were
one module (runs recorded then pair with runs made now)."""

from __future__ import annotations

import asyncio
import hashlib
import json
from pathlib import Path

import pytest

import llmbench
from llmbench.core.errors import UserError
from llmbench.drivers import workload
from llmbench.drivers.run import make_backend
from llmbench.drivers.workload import Workload
from llmbench.options import EndpointOptions, OpenLoop, RunOptions
from llmbench.workloads import prefixes, sessions, synthetic, text, trace
from llmbench.workloads.dataset import DatasetSpec
from llmbench.workloads.prefixes import PrefixSpec
from llmbench.workloads.prompts import PromptSet
from llmbench.workloads.synthetic import SyntheticSpec

WORDS = "the plant dumps untreated water into the river at night while inspectors sleep "


@pytest.fixture(scope="module")
def tiny(tiny_model_dir):
    return llmbench.load_model(str(tiny_model_dir), device="cpu", dtype="float32", threads=1)


def _templated(tok):
    """A prompt's tokens through the tokenizer's chat template, as a chat server counts them."""

    def count(t: str) -> int:
        s = tok.apply_chat_template([{"role": "user", "content": t}], tokenize=False, add_generation_prompt=True)
        return len(tok(s, add_special_tokens=False)["input_ids"])

    return count


def _sharegpt(path: Path) -> None:
    entries = [
        {"conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "hello there, friend"}]},
        {"conversations": [{"from": "human", "value": WORDS * 3}, {"from": "gpt", "value": "short"},
                           {"from": "human", "value": "and then?"}]},
        {"conversations": [{"from": "human", "value": WORDS * 12}]},  # no reply: the run's own length
    ]  # fmt: skip
    path.write_text(json.dumps(entries), encoding="utf-8")


def _mooncake(path: Path) -> None:
    rows = [{"timestamp": 10 * i, "input_length": 40 + 300 * i, "output_length": 3, "hash_ids": [i % 2, 50 + i]}
            for i in range(5)]  # fmt: skip
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


# ------------------------------------------------------------------------------------ what the user asked for


def test_each_source_is_named_by_its_options(prompt_file, tmp_path):
    csv = tmp_path / "d.csv"
    csv.write_text("prompt,n\nhello there,3\n", encoding="utf-8")
    listed = workload.source(Workload(prompts=prompt_file))
    assert isinstance(listed, PromptSet) and len(listed.prompts) == 3
    assert workload.source(Workload(prompts=csv, seed=4)) == DatasetSpec(str(csv), seed=4)
    # a dataset option makes a .txt a dataset, and --prompt-format txt reads a .csv a line a prompt
    assert workload.source(Workload(prompts=prompt_file, num_prompts=2)) == DatasetSpec(str(prompt_file),
                                                                                        num_prompts=2)  # fmt: skip
    assert workload.source(Workload(prompts=csv, prompt_format="txt")).prompts == ("prompt,n", "hello there,3")
    assert workload.source(Workload(synthetic="32x4", seed=2)) == SyntheticSpec(32, 4, 2)
    groups = Workload(prefix_groups=2, prefix_tokens=16, suffix_tokens=4, num_prompts=5, group_dist="zipf", seed=1)
    assert workload.source(groups) == PrefixSpec(2, 16, 4, 5, "zipf", 1)
    # a command's spec, its sections' settings of the workload's names: the others are not the workload's
    from llmbench.spec import RunSpec

    spec = RunSpec.of({"prompts": csv, "seed": 3, "num_prompts": 1, "model": "x"})
    assert Workload.of(spec) == Workload(prompts=csv, seed=3, num_prompts=1)
    assert workload.as_source(["a", "b"]).prompts == ("a", "b")
    assert workload.as_source(str(prompt_file)) == listed
    spec = DatasetSpec(str(csv))
    assert workload.as_source(spec) is spec


@pytest.mark.parametrize(
    ("w", "message"),
    [
        (Workload(), "give either a prompt file or --synthetic TOKENSxCOUNT (or --endpoint with --trace)"),
        (Workload(prompts="p.txt", synthetic="8x2"), "give either a prompt file or --synthetic"),
        (Workload(synthetic="8x2", min_prompt_tokens=3), "--min-prompt-tokens is for a prompt file or dataset, not "
         "--synthetic"),
        (Workload(prompts="p.txt", prefix_tokens=3), "--prefix-tokens goes with --prefix-groups"),
        (Workload(prompts="p.txt", group_dist="zipf"), "--group-dist goes with --prefix-groups"),
        (Workload(prompts="p.txt", prefix_groups=2), "--prefix-groups makes the prompts: drop PROMPTS and --synthetic"),
        (Workload(prefix_groups=2, prefix_tokens=3), "--prefix-groups needs --suffix-tokens, --num-prompts"),
        (Workload(prefix_groups=2, prefix_tokens=3, suffix_tokens=1, num_prompts=2, prompt_column="q",
                  max_prompt_tokens=9), "--prompt-column, --max-prompt-tokens: options of a dataset; --prefix-groups"),
        (Workload(prefix_groups=0, prefix_tokens=3, suffix_tokens=1, num_prompts=2), "--prefix-groups must be at "
         "least 1, not 0"),
        (Workload(synthetic="8y2"), "--synthetic '8y2': expected TOKENSxCOUNT"),
        (Workload(time_scale=2.0, prompts="p.txt"), "--time-scale goes with --trace"),
        (Workload(trace="t.jsonl"), "a trace is replayed against a server: give --endpoint URL"),
        (Workload(trace="t.jsonl", endpoint="http://x", rate=2.0), "--trace makes the prompts and the schedule"),
        (Workload(trace="t.jsonl", endpoint="http://x", num_prompts=3, repeats=2, group_dist="zipf"),
         "--num-prompts, --group-dist, --repeats: not with --trace, whose rows are the prompts"),
        (Workload(trace="t.jsonl", endpoint="http://x"), "--trace needs --trace-format (mooncake, burstgpt, azure)"),
    ],
)  # fmt: skip
def test_what_no_source_can_be_is_refused_in_one_line(w, message):
    with pytest.raises(UserError) as e:
        workload.source(w)
    assert message in str(e.value)


def test_a_trace_is_read_once_and_is_its_own_source(tmp_path):
    path = tmp_path / "t.jsonl"
    _mooncake(path)
    w = Workload(trace=path, trace_format="mooncake", time_scale=0.5, endpoint="http://127.0.0.1:9/v1")
    rows = workload.read_trace(w)
    assert rows is not None and len(rows.rows) == 5 and rows.offsets[1] == 0.005  # ms, times 0.5
    assert workload.source(w, rows) is rows  # the rows the open loop's schedule was made of
    assert workload.read_trace(Workload(prompts="p.txt")) is None


# --------------------------------------------------------------------------------- before anything loads


def test_a_dataset_is_read_before_anything_loads_and_chosen_where_no_count_is_needed(tmp_path):
    data = tmp_path / "d.csv"
    data.write_text("prompt,n\nfirst prompt,3\nsecond prompt,7\n", encoding="utf-8")
    options = RunOptions(max_new_tokens=16)
    pending = workload.begin(DatasetSpec(str(data), output_len_column="n"), options)
    assert pending.known is not None and pending.known.output_tokens == (3, 7)
    assert options.max_new_tokens == 7 and options.ignore_eos  # the data's own lengths, EOS ignored
    assert not pending.counted_here and pending.fixed() is pending.known
    filtered = workload.begin(DatasetSpec(str(data), max_prompt_tokens=40), RunOptions())
    assert filtered.known is None and filtered.counted_here and filtered.rows is not None
    with pytest.raises(UserError, match="a dataset chosen by the tokenizer is not available with --workers or --ray"):
        filtered.fixed()
    with pytest.raises(UserError, match="^--synthetic is not available with --workers or --ray: write the prompts"):
        workload.begin(SyntheticSpec(8, 2), RunOptions()).fixed()
    with pytest.raises(UserError, match="^dataset .* does not exist"):
        workload.begin(DatasetSpec(str(tmp_path / "missing.csv")), RunOptions())


def test_a_trace_is_sent_only_by_the_open_loop_it_schedules(tmp_path):
    path = tmp_path / "t.jsonl"
    _mooncake(path)
    rows = trace.read(trace.TraceSpec(str(path), "mooncake"))
    pending = workload.begin(rows, RunOptions())
    pending.check_target(EndpointOptions(endpoint="http://127.0.0.1:9/v1", open_loop=OpenLoop(replay=rows)))
    for target in (EndpointOptions(endpoint="http://127.0.0.1:9/v1"), llmbench.ModelOptions(model="m")):
        with pytest.raises(UserError, match="^a trace is replayed against a server: run --endpoint URL --trace FILE"):
            pending.check_target(target)


# ------------------------------------------------------------------------------------ the prompts the loop sends


def _prepare(src, backend, options):
    return asyncio.run(workload.prepare(workload.begin(src, options), backend, options))


def test_synthetic_prompts_are_counted_as_the_run_counts_them(tiny):
    options = RunOptions(system_prompt="Be brief.")
    backend = make_backend(tiny, options)
    made = _prepare(SyntheticSpec(48, 3, 5), backend, options)
    assert [backend.count_prompt_tokens(p) for p in made.prompts.prompts] == [48, 48, 48]
    count, tokenizer = asyncio.run(backend.counting())
    assert made.prompts == synthetic.make(SyntheticSpec(48, 3, 5), tokenizer, count)  # one way to make them
    assert made.synthetic == SyntheticSpec(48, 3, 5) and made.turns == 1


def test_prefix_groups_and_turns_through_the_one_ladder(tiny):
    options = RunOptions(turns=2)
    backend = make_backend(tiny, options)
    spec = PrefixSpec(2, 24, 6, 4, "uniform", 3)
    made = _prepare(spec, backend, options)
    count, tokenizer = asyncio.run(backend.counting())
    once = prefixes.make(spec, tokenizer, count, workload.text_counter(tokenizer))
    assert made.prompts == sessions.expand(once, 2)  # each prompt opens a conversation of 2 turns
    assert [backend.count_prompt_tokens(p) for p in once.prompts] == [once.source["template_tokens"] + 30] * 4
    assert made.turns == 2 and made.synthetic is None and not made.followups


def test_a_dataset_is_filtered_by_the_backends_own_count(tiny, tmp_path):
    data = tmp_path / "share.json"
    _sharegpt(data)
    options = RunOptions(max_new_tokens=9)
    backend = make_backend(tiny, options)
    made = _prepare(DatasetSpec(str(data), max_prompt_tokens=100), backend, options)
    kept = made.prompts
    assert kept.prompts == ("hi", WORDS * 3) and all(backend.count_prompt_tokens(p) <= 100 for p in kept.prompts)
    # the replies' lengths as the tokenizer counts them, without the template; a turn without one asks for 9
    tok = tiny.tokenizer
    assert kept.output_tokens == (len(tok("hello there, friend", add_special_tokens=False)["input_ids"]), 1)
    assert options.max_new_tokens == max(kept.output_tokens) and kept.followups == ((), ("and then?",))


def test_a_server_without_its_tokenizer_is_refused_what_needs_one(tmp_path):
    options = RunOptions()
    server = make_backend(EndpointOptions(endpoint="http://127.0.0.1:9/v1"), options)
    for src, option in ((SyntheticSpec(8, 2), "--synthetic"), (PrefixSpec(2, 8, 2, 3), "--prefix-groups")):
        with pytest.raises(UserError, match=f"^{option} with --endpoint needs --tokenizer"):
            _prepare(src, server, options)
    data = tmp_path / "share.json"
    _sharegpt(data)
    with pytest.raises(UserError, match="^--min-prompt-tokens/--max-prompt-tokens with --endpoint needs --tokenizer"):
        _prepare(DatasetSpec(str(data), min_prompt_tokens=2), server, options)
    plain = _prepare(DatasetSpec(str(data)), server, options)  # no filter: chosen without a count
    assert plain.prompts.output_tokens is None and len(plain.prompts.prompts) == 3


# ------------------------------------------------------------------------------------- the texts, written once


# prompt sets made before the texts were one module (PromptSet.sha256: what compare pairs runs by)
PINNED = {
    "synthetic": "43d62c3cd0525a7f6c0c255294a352591596f53e8dbb0f56334d4d44dfd85572",
    "synthetic-7": "0476a882bb7714fed53fda31123322cb083892182abf0921b77eb528142c36a4",
    "prefixes": "d884c0533ad63a5e00d247ebbe50e0d3fba82b53c782899dc041a88df38a02e8",
    "trace": "051cd87589694dcc303da79e95b33bcda472b8ecd83cfccc9ba6bf5f0dc5dcec",
    "trace-warm-up": "fb72c5b2c85c940f67095db48b557d25d8ae3f258af6382af134250efbbbcafc",
}


def test_made_prompts_are_the_same_bytes_as_before(qwen_tokenizer, tmp_path):
    tok, count = qwen_tokenizer, _templated(qwen_tokenizer)
    text_count = workload.text_counter(tok)
    assert synthetic.make(SyntheticSpec(64, 3, 0), tok, count).sha256 == PINNED["synthetic"]
    assert synthetic.make(SyntheticSpec(200, 2, 7), tok, count).sha256 == PINNED["synthetic-7"]
    assert prefixes.make(PrefixSpec(3, 40, 9, 6, "zipf", 2), tok, count, text_count).sha256 == PINNED["prefixes"]
    path = tmp_path / "t.jsonl"
    _mooncake(path)
    made = trace.synthesize(trace.read(trace.TraceSpec(str(path), "mooncake")), tok, count, text_count)
    assert made.sha256 == PINNED["trace"]
    assert made.warmup is not None and hashlib.sha256(made.warmup[0].encode()).hexdigest() == PINNED["trace-warm-up"]


def test_blocks_and_fits_are_exact_and_keyed(qwen_tokenizer):
    corpus = text.Corpus.of(qwen_tokenizer, one_line=True)
    count = workload.text_counter(qwen_tokenizer)
    cache: dict = {}
    a = text.block("a", cache, corpus, count, 37)
    assert count(a) == 37 and a.endswith("\n") and not a[0].isspace() and "\n" not in a[:-1]
    assert text.block("a", {}, corpus, count, 37) == a and text.block("b", cache, corpus, count, 37) != a
    whole = text.fit(a, "tail", 5, 42, "here", corpus, count)
    assert whole.startswith(a) and count(whole) == 42
    with pytest.raises(UserError, match="^could not make a block of exactly 40 tokens for 'k'$"):
        text.block("k", {}, corpus, lambda t: len(t) * 100, 40)  # no text is 40 of these
    with pytest.raises(UserError, match="^here: could not make a prompt of exactly 3 tokens$"):
        text.fit("", "k", 1, 3, "here", corpus, lambda t: len(t) * 100)
    # a count no window reaches: no text, the caller says why
    assert text.exact(corpus, 0, 3, lambda t: 7, 1, shifts=2) is None
