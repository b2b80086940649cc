"""Nothing lost, nothing cryptic: signals, --resume, kill -9, secrets, the writer's cost, and property tests."""

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from llmbench.core.errors import UserError
from llmbench.results.storage import RunWriter, journal_path, load_run
from llmbench.workloads.prompts import load_prompts
from tests.helpers import cli_process, synthetic_run


def _start(tiny_model_dir, prompts, out, *extra, env_extra=None):
    args = ["run", prompts, "--model", tiny_model_dir, "--device", "cpu", "--dtype", "float32", "--threads", "1",
            "--max-new-tokens", "24", "--ignore-eos", "--warmup", "0", "-q", *extra]  # fmt: skip
    if out is not None:
        args += ["-o", out]
    return cli_process(*args, env=env_extra)


def test_writer_rewrites_geometrically_and_is_crash_safe(tmp_path):
    """2,000 requests: every request is in the JSON or its journal at any moment, the full rewrites add up to
    O(n) requests written, and the close compacts. (5,000 x 256 tokens, timed: benchmarks/write_cost.py.)"""
    n = 2000
    run = synthetic_run(n=n, tokens=32)
    requests, run.requests = run.requests, []
    out = tmp_path / "r.json"
    writer = RunWriter(out, run)
    written = 0  # requests serialised by snapshots, in all
    for i, r in enumerate(requests):
        run.requests.append(r)
        if writer.add(run, r):
            written += len(run.requests)
        if i in (10, 999, 1499):  # a crash now: the JSON is valid; with its journal it holds every request
            assert json.loads(out.read_text(encoding="utf-8"))["schema_version"] == 1
            assert len(load_run(out).requests) == i + 1
    assert written <= 12 * n  # ~ (1 + 1/growth) x the final size, not n^2 / 2
    assert writer.snapshots < 100
    writer.close(run)
    assert len(load_run(out).requests) == n and not journal_path(out).exists()


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.binary(max_size=400), suffix=st.sampled_from([".txt", ".jsonl"]))
def test_prompt_loader_property(tmp_path, data, suffix):
    p = tmp_path / f"p{suffix}"
    p.write_bytes(data)
    try:
        ps = load_prompts(p)
    except UserError as e:
        assert "\n" not in str(e) and str(p) in str(e)
        return
    assert ps.prompts and all(x.strip() and "\n" not in x for x in ps.prompts)
    assert len(ps.prompts) == len(ps.line_numbers)


_json_like = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4),
    max_leaves=20,
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(obj=_json_like, cut=st.integers(min_value=0, max_value=200), mutate=st.booleans())
def test_run_reader_property(tmp_path, obj, cut, mutate):
    p = tmp_path / "r.json"
    if mutate:  # a real run, truncated somewhere
        text = synthetic_run(n=2, tokens=3).model_dump_json()
        text = text[: len(text) * cut // 200]
    else:
        text = json.dumps({"schema_version": 1, "requests": obj} if cut % 2 else obj)
    p.write_text(text, encoding="utf-8")
    try:
        run = load_run(p)
    except UserError as e:
        assert "\n" not in str(e) and str(p) in str(e)
        return
    assert run.schema_version == 1
