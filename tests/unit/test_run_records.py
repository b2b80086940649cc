"""What a run records is what it measured (issue 66): every plan bounded before anything loads, config files
strict and read from their own folder, the prompts a run names the ones it measured, and a replay that refuses
prompts it can't measure again."""

from __future__ import annotations

import json
import time
import typing
from pathlib import Path

import pytest
import tomllib

import llmbench
from llmbench.core.errors import UserError
from llmbench.spec import RunSpec
from llmbench.spec.commands import SPECS
from llmbench.workloads.limits import MAX_PLANNED
from tests.helpers import cli, synthetic_run

NO_MODEL = "/nonexistent/model-folder"  # a load would fail on it: a refusal that names the plan came first


@pytest.fixture
def two_hundred(tmp_path) -> Path:
    p = tmp_path / "many.txt"
    p.write_text("".join(f"prompt number {i}\n" for i in range(200)), encoding="utf-8")
    return p


@pytest.mark.parametrize(
    ("args", "message"),
    [
        # was: a plan of 2e8 requests built after the model loaded; MemoryError after ~50 s, or the machine taken
        (("--repeats", "1000000"), "200 prompts x --repeats 1,000,000 x --turns 1: 200,000,000 requests"),
        # --turns multiplies it again: each of 20,000 rounds sends 200 conversations of 3 turns
        (("--repeats", "20000", "--turns", "3"), "200 prompts x --repeats 20,000 x --turns 3: 12,000,000 requests"),
    ],
)
def test_run_refuses_a_plan_past_the_limit_before_the_model_loads(two_hundred, tmp_path, args, message):
    t0 = time.perf_counter()
    r = cli("run", two_hundred, "-m", NO_MODEL, *args, "-o", tmp_path / "r.json")
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert message in r.stderr and f"at most {MAX_PLANNED:,}" in r.stderr, r.stderr
    assert time.perf_counter() - t0 < 10 and not (tmp_path / "r.json").exists()


def test_measure_refuses_the_same_plan_before_loading(two_hundred):
    with pytest.raises(UserError, match="200,000,000 requests, more than a plan holds"):
        llmbench.measure(two_hundred, model=NO_MODEL, repeats=1_000_000)
    with pytest.raises(UserError, match="more than a plan holds"):
        llmbench.measure(["a"] * 10, model=NO_MODEL, repeats=1_000_000, turns=2)


def test_a_plan_at_the_limit_is_not_refused(two_hundred):
    from llmbench.drivers import workload
    from llmbench.options import RunOptions

    pending = workload.begin(workload.as_source(two_hundred), RunOptions(repeats=MAX_PLANNED // 200))
    assert pending.check_plan(RunOptions(repeats=MAX_PLANNED // 200)) == MAX_PLANNED


def test_load_refuses_its_rates_all_told(tmp_path, prompt_file):
    # each rate's schedule is within its own bound (1,000,000); twenty of them are not within one plan's
    rates = ",".join(str(1000 + i) for i in range(20))
    r = cli("load", prompt_file, "--endpoint", "http://127.0.0.1:9/v1", "--slo", "ttft_ms:p90=1000", "--rates", rates,
            "--duration", "900", "-o", tmp_path / "l")  # fmt: skip
    assert r.returncode == 2 and "requests over 20 rates" in r.stderr and "more than a plan holds" in r.stderr, r.stderr


# ------------------------------------------------------------------------------------------------ strict files


def _wrong(annotation: typing.Any) -> typing.Any:
    """A TOML value of another type than ``annotation`` takes (what a typo in a committed file gives)."""
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    inner = args[0] if typing.get_origin(annotation) in (typing.Union, __import__("types").UnionType)\
        else annotation  # fmt: skip
    origin = typing.get_origin(inner)
    if inner is bool:
        return "yes"
    if inner in (int, float):
        return True
    if origin is list:
        return 5  # neither a list nor a comma list's text
    if origin is typing.Literal or inner in (str, Path):
        return 5
    raise AssertionError(f"no wrong value for {annotation}")


ALL_SPECS = {"run": RunSpec, **SPECS}


@pytest.mark.parametrize("command", sorted(ALL_SPECS))
def test_every_setting_of_the_wrong_type_in_a_config_file_is_one_line_naming_file_key_and_type(tmp_path, command):
    spec = ALL_SPECS[command]
    path = tmp_path / "bad.toml"
    for name, (table, fi) in spec.fields().items():
        value = _wrong(fi.annotation)
        path.write_text(f"[{table}]\n{name} = {json.dumps(value)}\n", encoding="utf-8")
        with pytest.raises(UserError) as e:
            spec.checked(tomllib.loads(path.read_text(encoding="utf-8")), where=str(path), base=tmp_path)
        line = str(e.value)
        assert "\n" not in line and line.startswith(f"{path}: [{table}] {name}: "), line
        assert "expected" in line or "input should be" in line, line
        assert repr(value) in line, line


def test_a_wrong_type_in_a_config_file_is_exit_2_on_the_command_line(tmp_path):
    path = tmp_path / "bad.toml"
    for text in ("[requests]\nmax_new_tokens = true\n", "[requests]\nrepeats = '5'\n", "[model]\nthreads = 2.0\n",
                 "[requests]\nsample = 'yes'\n", "[arrivals]\nworkers = false\n"):  # fmt: skip
        path.write_text(text, encoding="utf-8")
        r = cli("run", "--config", path, "--print-config")
        assert r.returncode == 2 and r.stdout == "" and r.stderr.count("\n") == 1 and str(path) in r.stderr, text


def test_measure_takes_no_coerced_setting():
    for bad in ({"max_new_tokens": True}, {"sample": "yes"}, {"warmup": "1"}):
        with pytest.raises(UserError, match="expected"):
            llmbench.measure(["a"], model=NO_MODEL, **bad)


def test_a_relative_path_in_a_config_file_is_read_from_the_files_folder(tmp_path, monkeypatch):
    conf = tmp_path / "bench"
    conf.mkdir()
    (conf / "prompts.txt").write_text("a prompt\n", encoding="utf-8")
    (conf / "bench.toml").write_text('[prompts]\nprompts = "prompts.txt"\n', encoding="utf-8")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    r = cli("run", "--config", conf / "bench.toml", "--print-config", cwd=elsewhere)
    assert r.returncode == 0, r.stderr
    assert tomllib.loads(r.stdout)["prompts"]["prompts"] == str(conf.resolve() / "prompts.txt")
    monkeypatch.chdir(elsewhere)
    assert llmbench.load_spec(conf / "bench.toml").prompts.prompts == conf.resolve() / "prompts.txt"


# ------------------------------------------------------------------------------------------------ replays


def _recorded(tmp_path: Path, **config: typing.Any) -> Path:
    run = synthetic_run()
    for k, v in config.items():
        setattr(run.config, k, v)
    path = tmp_path / "run.json"
    llmbench.save_run(run, path)
    return path


def test_config_from_refuses_a_prompt_file_that_changed_since(tmp_path, prompt_file):
    from llmbench.workloads.prompts import load_prompts

    spec = {"prompts": {"prompts": str(prompt_file.resolve())}, "model": {"model": NO_MODEL}}
    run = _recorded(tmp_path, spec=spec, prompt_file=str(prompt_file),
                    prompt_sha256=load_prompts(prompt_file).sha256)  # fmt: skip
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    # unchanged, from another folder: the replay passes its check and goes on to load the (missing) model
    same = cli("run", "--config-from", run, "-o", tmp_path / "a.json", cwd=elsewhere)
    assert same.returncode == 2 and "has changed" not in same.stderr and NO_MODEL in same.stderr, same.stderr
    prompt_file.write_text(prompt_file.read_text(encoding="utf-8") + "one more\n", encoding="utf-8")
    changed = cli("run", "--config-from", run, "-o", tmp_path / "b.json", cwd=elsewhere)
    assert changed.returncode == 2 and changed.stderr.count("\n") == 1, changed.stderr
    assert "has changed since the run measured it" in changed.stderr and str(run) in changed.stderr
    # the file given on the command line: measured as asked
    given = cli("run", prompt_file, "--config-from", run, "-o", tmp_path / "c.json", cwd=elsewhere)
    assert "has changed" not in given.stderr and NO_MODEL in given.stderr, given.stderr


def test_config_from_refuses_prompts_that_were_passed_in_memory(tmp_path, prompt_file):
    from llmbench.workloads.prompts import IN_MEMORY

    run = _recorded(tmp_path, spec={"requests": {"max_new_tokens": 4}}, prompt_file=IN_MEMORY)
    r = cli("run", "--config-from", run, "-o", tmp_path / "a.json")
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert "prompts passed in memory" in r.stderr and "give PROMPTS" in r.stderr, r.stderr
    given = cli("run", prompt_file, "--config-from", run, "-m", NO_MODEL, "-o", tmp_path / "b.json")
    assert "in memory" not in given.stderr and NO_MODEL in given.stderr, given.stderr


def test_the_recorded_spec_names_the_prompts_measured(tmp_path, prompt_file):
    from llmbench.drivers.workload import recorded
    from llmbench.workloads.prompts import PromptSet, load_prompts
    from llmbench.workloads.synthetic import SyntheticSpec

    other = tmp_path / "other.txt"
    other.write_text("x\n", encoding="utf-8")
    config_spec = RunSpec.of({"prompts": other, "max_new_tokens": 4}).setup()
    # a file given over the config's: the file measured, absolute
    assert recorded(config_spec, load_prompts(prompt_file))["prompts"]["prompts"] == str(prompt_file.resolve())
    # a list in memory: no file named (a replay refuses it), the rest of the setup kept
    in_memory = recorded(config_spec, PromptSet.from_list(["a", "b"]))
    assert "prompts" not in in_memory["prompts"] and in_memory["requests"]["max_new_tokens"] == 4
    # a shipped set: by its name, which loads from any folder
    assert recorded(config_spec, load_prompts("env_violations"))["prompts"]["prompts"] == "env_violations"
    assert recorded(config_spec, SyntheticSpec(16, 3))["prompts"] == {"group_dist": "uniform", "synthetic": "16x3"}


# ------------------------------------------------------------------------------------------------ what it shows


def _endpoint_run():
    from llmbench.results.schema import EndpointConfig

    run = synthetic_run()
    c = run.config
    c.mode, c.weights, c.device, c.dtype, c.threads = "endpoint", "unknown", "endpoint", "unknown", None
    c.endpoint = EndpointConfig(url="http://127.0.0.1:9/v1/chat/completions", concurrency=4)
    return run


def test_an_endpoint_runs_setup_line_says_only_what_applies_alike_in_the_terminal_and_the_report():
    from llmbench.present.html import summary_html
    from llmbench.present.terminal import setup_title, summary_rows, summary_table

    run = _endpoint_run()
    title = setup_title(run)
    assert "via http://127.0.0.1:9" in title and "concurrency 4" in title, title
    page = summary_html("endpoint", run)
    for wrong in ("unknown weights", "None threads", "· endpoint ·", "· unknown"):
        assert wrong not in title and wrong not in page, (wrong, title)
    # the same rows in both: the reader's (stall, stalls, QoE, fluidity) included
    labels = [label for label, _stats, _digits in summary_rows(run)]
    assert {"reader stall (ms)", "reader stalls", "Andes QoE", "fluidity"} <= set(labels), labels
    assert all(f"<th>{label}</th>" in page for label in labels)
    terminal = [str(cell) for cell in summary_table(run).columns[0].cells]
    assert terminal == labels
    # a model in this process: its weights, device, dtype and threads are the run's own facts
    here = setup_title(synthetic_run())
    assert here == "synthetic · random weights · cpu · bfloat16 · 2 threads", here


# ------------------------------------------------------------------------------------------------ read back typed

# each was an internal error in a reading command (the audit's fuzzer, one field of a real run at a time)
MALFORMED = {
    "reader-negative": (("config", "reader"), {"words_per_minute": -1}),
    "reader-not-a-number": (("config", "reader"), {"words_per_minute": "x"}),
    "prompt-source-keys": (("config", "prompt_source"), {"a": 1}),
    "prompt-groups-half": (("config", "prompt_source"), {"kind": "prefix-groups"}),
    "speculative-half": (("config", "speculative"), {"method": "prompt-lookup"}),
    "cpu-text": (("cpu",), {"cpu_s": 1.0, "busy_s": 1.0, "freq_mhz_mean": "fast"}),
    "index-huge": (("requests", 0, "prompt_index"), 10**30),
    "session-huge": (("requests", 0, "session"), 10**30),
    "started-nan": (("requests", 0, "started_s"), float("nan")),
    "stamp-inf": (("requests", 0, "token_times_ms", -1), float("inf")),
    "tpot-negative": (("requests", 0, "tpot_ms"), -1.0),
    "git-commit-number": (("environment", "git"), {"commit": 10**30}),
    "gauge-empty": (("server_metrics",), {"scrapes": 1, "gauges": {"running": {}}}),
}


@pytest.mark.parametrize("case", MALFORMED)
def test_a_malformed_field_is_one_line_on_every_reading_command(cli, tmp_path, case):
    path, value = MALFORMED[case]
    good = tmp_path / "good.json"
    llmbench.save_run(synthetic_run(), good)
    data = json.loads(good.read_text(encoding="utf-8"))
    at = data
    for key in path[:-1]:
        at = at[key]
    at[path[-1]] = value
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(data), encoding="utf-8")  # NaN and inf as Python's json writes them
    for args in (("show", bad), ("compare", good, bad), ("export", bad, "-o", tmp_path / "t.csv", "--overwrite"),
                 ("export", bad, "--tokens", "-o", tmp_path / "k.csv", "--overwrite"),
                 ("export", bad, "--format", "trace", "-o", tmp_path / "t.json", "--overwrite")):  # fmt: skip
        r = cli(*args)
        assert "internal error" not in r.stderr and "Traceback" not in r.stderr, (args, r.stderr)
        if r.returncode == 0 and args[0] in ("show", "compare"):
            continue  # a field the scalar read leaves out (a request's session): unread there, so unchecked
        if r.returncode == 0 and "--tokens" in args and path[-1] == "session":
            continue  # the token table reads the stamps and their keys alone (issue 61): no session column
        assert r.returncode == 2 and r.stderr.count("\n") == 1 and str(bad) in r.stderr, (args, r.stderr)


def test_a_key_a_newer_version_adds_is_kept_and_never_a_crash(cli, tmp_path):
    run = synthetic_run()
    run.config.reader = {"words_per_minute": 300.0, "chars_per_s": None, "added_later": True}
    path = tmp_path / "run.json"
    llmbench.save_run(run, path)
    assert llmbench.load_run(path).config.reader["added_later"] is True
    for args in (("show", path), ("export", path, "--tokens", "-o", tmp_path / "k.csv")):
        r = cli(*args)
        assert r.returncode == 0, (args, r.stderr)
