"""One spec (llmbench.spec) declares every setting of a run: the command line is generated from it, measure() takes
it, config files are read into it and written from it, and a bad setting anywhere is one line naming it."""

from __future__ import annotations

import inspect
import json
import re
import types

import pytest
import tomli_w
import tomllib
import typer.main

import llmbench
from llmbench.cli import app
from llmbench.spec import RunSpec, option_of
from llmbench.spec.commands import SPECS, ServeSpec, WorkerSpec
from tests.helpers import cli, synthetic_run


def _command(name: str):
    return typer.main.get_command(app).commands[name]  # type: ignore[attr-defined]


CONFIG_OPTIONS = {"config", "print_config", "config_from", "quiet"}
# what a command takes that is not a setting: the commits a bisect is between (its arguments)
NOT_SETTINGS = {"bisect": {"good", "bad"}, "bisect-step": {"good", "bad"}}
SPEC_OF = {"run": RunSpec, **SPECS, "worker": WorkerSpec, "serve": ServeSpec}


@pytest.mark.parametrize("command", sorted(SPEC_OF))
def test_every_option_is_a_spec_field_with_its_default_and_help(command):
    spec = SPEC_OF[command]
    params = {p.name: p for p in _command(command).params}
    fields = spec.fields()
    assert set(params) - CONFIG_OPTIONS - NOT_SETTINGS.get(command, set()) == set(fields)
    for name, (_table, fi) in fields.items():
        p = params[name]
        assert p.required == fi.is_required(), name
        if not fi.is_required():  # a comma list's default is shown as it is typed: float32,bfloat16
            comma = (fi.json_schema_extra or {}).get("comma") and isinstance(fi.default, list)
            assert p.default == (",".join(map(str, fi.default)) if comma else fi.default), name
        assert p.help == fi.description, name
        assert option_of(name, fi) in ([*p.opts, p.name.upper()]), name
    # a measuring command reads a committed config file and prints its own
    assert {"config", "print_config"} <= set(params) or command in ("worker", "serve")


@pytest.mark.parametrize("command", sorted(SPECS))
def test_each_measuring_command_prints_a_config_it_reads_back(tmp_path, command):
    required = {"ab": ["p.txt", "--base", "http://127.0.0.1:9/v1", "--head", "http://127.0.0.1:9/v1"],
                "load": ["p.txt", "--endpoint", "http://127.0.0.1:9/v1"], "sweep": ["p.txt"],
                "paint": ["p.txt", "--endpoint", "http://127.0.0.1:9/v1"],
                "bisect": ["v1"], "bisect-step": ["v1"]}  # fmt: skip
    (tmp_path / "p.txt").write_text("a prompt\n", encoding="utf-8")
    # run from the prompt file's folder, read back from another: the printed path is absolute
    r = cli(command, *required.get(command, []), "--max-new-tokens", "7", "--print-config", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    if "p.txt" in required.get(command, []):
        assert tomllib.loads(r.stdout)["prompts"]["prompts"] == str(tmp_path.resolve() / "p.txt")
    path = tmp_path / "conf" / f"{command}.toml"
    path.parent.mkdir()
    path.write_text(r.stdout, encoding="utf-8")
    printed = tomllib.loads(r.stdout)
    assert printed["requests"]["max_new_tokens"] == 7
    again = cli(command, *[a for a in required.get(command, []) if not a.startswith(("p.txt", "--", "http"))],
                "--config", str(path), "--print-config")  # fmt: skip
    assert again.returncode == 0 and tomllib.loads(again.stdout) == printed, again.stderr


def test_measure_takes_every_setting_run_does():
    """measure()'s keywords are the spec's (**settings) beside what only Python can pass (a loaded model, ...)."""
    sig = inspect.signature(llmbench.measure)  # generated from the spec: every setting with its default
    run_options = {p.name for p in _command("run").params} - CONFIG_OPTIONS
    assert run_options <= set(sig.parameters), run_options - set(sig.parameters)
    assert sig.parameters["turns"].default == 1 and sig.parameters["think_time_s"].default == 0.0
    spec = RunSpec.of({name: fi.default for name, (_t, fi) in RunSpec.fields().items()})
    assert spec == RunSpec()
    made = RunSpec.of({"turns": 3, "think_time_s": 0.5, "endpoint": "http://127.0.0.1:9/v1", "rate": 2.0})
    assert (made.requests.turns, made.requests.think_time_s, made.arrivals.rate) == (3, 0.5, 2.0)
    with pytest.raises(llmbench.UserError, match="no setting named 'max_new_tokns' \\(did you mean 'max_new_tokens'"):
        llmbench.measure(["hi"], max_new_tokns=3)
    with pytest.raises(llmbench.UserError, match="--turns must be 1 to 1,000, not 0"):
        llmbench.measure(["hi"], turns=0)


def test_a_default_changed_in_the_spec_reaches_the_option_types():
    from llmbench.options import ModelOptions, RunOptions
    from llmbench.spec import ModelSection, RequestsSection

    assert RunOptions().max_new_tokens == RequestsSection.model_fields["max_new_tokens"].default
    assert ModelOptions().dtype == ModelSection.model_fields["dtype"].default


def _printed(*args: str) -> dict:
    r = cli("run", *args, "--print-config")
    assert r.returncode == 0, r.stderr
    return tomllib.loads(r.stdout)


def test_print_config_then_config_gives_the_same_settings_and_a_flag_overrides_the_file(tmp_path, prompt_file):
    flags = (str(prompt_file), "--weights", "random", "--dtype", "bfloat16", "--max-new-tokens", "12", "--turns", "2",
             "--think-time", "0.25", "--no-chat-template", "--seed", "7")  # fmt: skip
    printed = _printed(*flags)
    assert printed["requests"]["max_new_tokens"] == 12 and printed["requests"]["chat_template"] is False
    assert printed["model"]["dtype"] == "bfloat16" and "outputs" not in printed
    path = tmp_path / "bench.toml"
    path.write_text(cli("run", *flags, "--print-config").stdout, encoding="utf-8")
    assert _printed("--config", str(path)) == printed
    assert _printed("--config", str(path), "--max-new-tokens", "5")["requests"]["max_new_tokens"] == 5


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[requests]\nmax_new_tokns = 3\n", "[requests] max_new_tokns: no such key (did you mean 'max_new_tokens'?)"),
        ("[request]\nmax_new_tokens = 3\n", "[request]: no such table (did you mean 'requests'?)"),
        ("[requests]\nmax_new_tokens = 'many'\n", "[requests] max_new_tokens: expected an integer, not 'many'"),
        # were coerced: a typo in a committed file silently changed what was measured (true -> 1, false -> 0)
        ("[requests]\nmax_new_tokens = true\n", "[requests] max_new_tokens: expected an integer, not True"),
        ("[requests]\nwarmup = false\n", "[requests] warmup: expected an integer, not False"),
        ("[requests]\nsample = 'yes'\n", "[requests] sample: expected true or false, not 'yes'"),
        ("[requests]\nmax_new_tokens = '5'\n", "[requests] max_new_tokens: expected an integer, not '5'"),
        ("[requests]\nmax_new_tokens = 5.0\n", "[requests] max_new_tokens: expected an integer, not 5.0"),
        ("[requests]\ntemperature = '0.5'\n", "[requests] temperature: expected a number, not '0.5'"),
        ("[prompts]\nprompts = 5\n", "[prompts] prompts: expected a path (a string), not 5"),
        ("[requests]\nmax_new_tokens = 0\n", "[requests] max_new_tokens: must be at least 1"),
        ("[model]\ndtype = 'float8'\n", "[model] dtype: input should be 'auto', 'float32', 'bfloat16' or 'float16'"),
        ("max_new_tokens = 3\n", "'max_new_tokens' is outside a table"),
        ("[requests\n", "not TOML"),
    ],
)
def test_a_bad_config_file_is_one_line_naming_the_file_and_key(tmp_path, text, message):
    path = tmp_path / "bad.toml"
    path.write_text(text, encoding="utf-8")
    r = cli("run", "--config", str(path), "--print-config")
    assert r.returncode == 2 and r.stdout == "", r.stderr
    assert r.stderr.count("\n") == 1 and str(path) in r.stderr and message in r.stderr, r.stderr


def test_a_missing_config_file_is_one_line(tmp_path):
    r = cli("run", "--config", str(tmp_path / "nope.toml"))
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "nope.toml: No such file" in r.stderr, r.stderr


def test_a_config_for_another_mode_is_refused_like_the_flags(tmp_path, prompt_file):
    path = tmp_path / "c.toml"
    path.write_text("[server]\nconcurrency = 4\n", encoding="utf-8")
    r = cli("run", str(prompt_file), "--config", str(path), "--weights", "random")
    assert r.returncode == 2 and "--concurrency: options of --endpoint runs only" in r.stderr, r.stderr


def test_config_from_a_run_repeats_its_recorded_settings(tmp_path, prompt_file):
    printed = _printed(str(prompt_file), "--weights", "random", "--max-new-tokens", "9", "--repeats", "3")
    run = synthetic_run()
    run.config.spec = printed
    path = tmp_path / "run.json"
    llmbench.save_run(run, path)
    assert _printed("--config-from", str(path)) == printed
    assert _printed("--config-from", str(path), "--repeats", "4")["requests"]["repeats"] == 4
    old = tmp_path / "old.json"
    llmbench.save_run(synthetic_run(), old)
    r = cli("run", "--config-from", str(old))
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "recorded no settings" in r.stderr, r.stderr


def test_a_url_credential_never_reaches_a_printed_config():
    printed = _printed("--endpoint", "http://user:s3cret@127.0.0.1:9/v1?token=abc", "--metrics-url",
                       "http://u:pw@127.0.0.1:9/metrics")  # fmt: skip
    text = json.dumps(printed)
    assert "s3cret" not in text and "token=abc" not in text and "pw@" not in text
    assert printed["server"]["endpoint"] == "http://127.0.0.1:9/v1"


def test_the_config_reference_page_is_the_specs(tmp_path):
    from pathlib import Path

    from llmbench.spec.reference import reference

    page = Path(__file__).resolve().parents[2] / "docs" / "config.md"
    assert page.read_text(encoding="utf-8") == reference(), "remake it: python -m llmbench.spec > docs/config.md"


def test_the_regression_jobs_committed_config_is_abs_and_the_sides_come_from_the_command_line():
    from pathlib import Path

    job = Path(__file__).resolve().parents[2] / "benchmarks" / "regression.toml"
    r = cli("ab", "--config", str(job), "--base", "B", "--head", "H", "--print-config")
    assert r.returncode == 0, r.stderr
    printed = tomllib.loads(r.stdout)
    assert printed["sides"] == {"base": "B", "head": "H"} and printed["gate"]["fail_on"] == ["ttft_ms=2", "tpot_ms=1"]
    assert printed["design"]["budget"] == "5m" and printed["requests"]["max_new_tokens"] == 32
    r = cli("ab", "--config", str(job), "--print-config")
    assert r.returncode == 2 and "--base" in r.stderr, r.stderr  # a side is still required, said in one line


def test_load_spec_reads_a_printed_config_and_refuses_a_bad_one_in_one_line(tmp_path, prompt_file):
    path = tmp_path / "bench.toml"
    path.write_text(cli("run", str(prompt_file), "--turns", "3", "--think-time", "0.5", "--print-config").stdout,
                    encoding="utf-8")  # fmt: skip
    spec = llmbench.load_spec(path)
    assert (spec.requests.turns, spec.requests.think_time_s, spec.prompts.prompts) == (3, 0.5, prompt_file)
    path.write_text("[requests]\nturns = -1\n", encoding="utf-8")
    with pytest.raises(llmbench.UserError, match=r"bench.toml: \[requests\] turns: must be at least 1, not -1"):
        llmbench.load_spec(path)


def test_a_secret_in_a_sides_command_line_never_reaches_a_printed_config():
    r = cli("ab", "p.txt", "--base", "env HF_TOKEN=abc llmbench worker --token s3cr3t --weights random", "--head",
            "http://u:pw@127.0.0.1:9/v1?key=z", "--print-config")  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "abc" not in r.stdout and "s3cr3t" not in r.stdout and "pw@" not in r.stdout and "key=z" not in r.stdout
    assert (
        tomllib.loads(r.stdout)["sides"]["base"] == "env HF_TOKEN=redacted llmbench worker --token redacted "
        "--weights random"
    )


# the cross-field rules (llmbench.spec.rules): one message for every way a spec is made
REFUSED = [
    (("--endpoint", "http://127.0.0.1:9/v1", "--dtype", "bfloat16", "--threads", "2"),
     {"endpoint": "http://127.0.0.1:9/v1", "dtype": "bfloat16", "threads": 2},
     "--dtype, --threads: in-process run options only; with --endpoint the server decides them"),
    (("--concurrency", "4"), {"concurrency": 4}, "--concurrency: options of --endpoint runs only"),
    (("--think-time", "2"), {"think_time_s": 2.0},
     "--think-time is the pause between a conversation's turns: give --turns 2 or more"),
    (("--endpoint", "http://127.0.0.1:9/v1", "--arrival", "constant"),
     {"endpoint": "http://127.0.0.1:9/v1", "arrival": "constant"}, "--arrival: options of an open loop (--rate)"),
    (("--endpoint", "http://127.0.0.1:9/v1", "--rate", "2", "--server-command", "vllm serve x"),
     {"endpoint": "http://127.0.0.1:9/v1", "rate": 2.0, "server_command": "vllm serve x"},
     "--server-command measures the first request of a closed loop"),
    (("--speculative", "prompt-lookup", "--prefix-cache", "system"),
     {"speculative": "prompt-lookup", "prefix_cache": "system"},
     "--speculative and --prefix-cache system can't be combined"),
]  # fmt: skip


@pytest.mark.parametrize(("flags", "keywords", "message"), REFUSED)
def test_a_refused_combination_is_refused_alike_by_every_way_in(flags, keywords, message, prompt_file, tmp_path):
    printed = cli("run", str(prompt_file), *flags, "--print-config")
    assert printed.returncode == 2 and printed.stderr.count("\n") == 1 and message in printed.stderr, printed.stderr
    assert printed.stdout == ""
    with pytest.raises(llmbench.UserError, match=re.escape(message)):
        llmbench.measure(["hi"], **keywords)
    with pytest.raises(llmbench.UserError, match=re.escape(message)):
        RunSpec.of(keywords)
    config = tmp_path / "bench.toml"
    tables: dict = {}
    for name, value in keywords.items():
        tables.setdefault(RunSpec.fields()[name][0], {})[name] = value
    config.write_text(tomli_w.dumps(tables), encoding="utf-8")
    with pytest.raises(llmbench.UserError, match=re.escape(message)):
        llmbench.load_spec(config)
    r = cli("run", str(prompt_file), "--config", str(config), "--print-config")
    assert r.returncode == 2 and message in r.stderr, r.stderr


def test_a_printed_config_with_every_default_is_no_combination_of_modes(prompt_file, tmp_path):
    """A printed config lists every setting, the other mode's defaults too: only a value other than its default
    counts as given."""
    path = tmp_path / "bench.toml"
    r = cli("run", str(prompt_file), "--endpoint", "http://127.0.0.1:9/v1", "--concurrency", "4", "--print-config")
    assert r.returncode == 0, r.stderr
    path.write_text(r.stdout, encoding="utf-8")
    spec = llmbench.load_spec(path)
    assert spec.server.concurrency == 4 and spec.given() >= {"endpoint", "concurrency"}


def test_resolutions_are_recorded_as_the_values_used():
    spec = RunSpec.of({"compile": True, "weights": "random"})
    assert spec.levers.cache == "static" and spec.requests.ignore_eos is True
    assert RunSpec.of({"weights": "random", "ignore_eos": False}).requests.ignore_eos is False  # asked: kept


def test_the_mode_lists_are_the_sections_fields():
    from llmbench.spec import ArrivalsSection, LeversSection, ModelSection, ServerSection
    from llmbench.spec.rules import ENDPOINT_ONLY, IN_PROCESS_ONLY

    assert set(IN_PROCESS_ONLY) == {*ModelSection.model_fields, *LeversSection.model_fields, "truncate",
                                    "chat_template"} - {"model"}  # fmt: skip
    assert set(ENDPOINT_ONLY) == {*ServerSection.model_fields, *ArrivalsSection.model_fields} - {"endpoint"}


def test_a_grid_of_lists_is_no_setting_the_rules_read():
    """sweep's grid holds comma lists under the settings' names: no rule resolves or refuses them."""
    crossed = cli("sweep", "p.txt", "--speculative", "none,prompt-lookup", "--prefix-cache", "none,system",
                  "--compile", "--cache", "dynamic,static", "--print-config")  # fmt: skip
    assert crossed.returncode == 0, crossed.stderr
    grid = tomllib.loads(crossed.stdout)["grid"]
    assert grid["cache"] == ["dynamic", "static"] and grid["speculative"] == ["none", "prompt-lookup"]
    assert grid["compile"]
    assert tomllib.loads(cli("run", "p.txt", "--compile", "--print-config").stdout)["levers"]["cache"] == "static"


def test_a_setting_has_one_type_in_every_command():
    """sweep's grid lists a setting's values: a list of the very type the setting has elsewhere (``--threads 1,2``
    is ``[1, 2]``, each 1 to 4,096), typed the same on the command line and in a config file."""
    import typing

    def item(annotation):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        inner = args[0] if typing.get_origin(annotation) in (typing.Union, types.UnionType) else annotation
        if typing.get_origin(inner) is list:
            inner = typing.get_args(inner)[0]
        return typing.get_args(inner)[0] if typing.get_origin(inner) is typing.Annotated else inner

    # one word, two settings (each command's help says which): run --resume takes the run file to continue, ab's
    # and bisect's go on in -o's folder; bisect's prompts may name a shipped set instead of a file
    two_settings = {("resume", "ab"), ("resume", "bisect"), ("prompts", "bisect"), ("prompts", "bisect-step")}
    seen: dict[str, tuple[str, object]] = {}
    for command, spec in SPEC_OF.items():
        for name, (_table, fi) in spec.fields().items():
            if (name, command) in two_settings:
                continue
            kind = item(fi.annotation)
            first = seen.setdefault(name, (command, kind))
            assert first[1] == kind, (name, first, (command, kind))
    assert item(SPEC_OF["sweep"].fields()["threads"][1].annotation) is int
    printed = cli("sweep", "p.txt", "--threads", "1, 2", "--dtype", "bfloat16", "--print-config")
    assert tomllib.loads(printed.stdout)["grid"]["threads"] == [1, 2], printed.stderr
    with pytest.raises(llmbench.UserError, match=r"\[grid\] threads: an empty list; leave the key out"):
        SPEC_OF["sweep"].checked({"grid": {"threads": []}}, where="g.toml")
