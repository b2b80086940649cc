"""The option types the drivers run are the spec's sections (issue 60): no setting declared twice, a bad value
refused as one line whenever options are made, the rules resolved on every copy."""

from __future__ import annotations

import ast
import inspect
import math

import pytest

import llmbench
from llmbench import options as opts
from llmbench import spec as sp
from llmbench.core.errors import UserError

OPTION_TYPES = (opts.RunOptions, opts.ModelOptions, opts.EndpointOptions, opts.OpenLoop)


def _spec_fields() -> dict[str, object]:
    """Every setting of every section the spec package declares: name -> its FieldInfo."""
    sections = [
        c for c in vars(sp).values() if isinstance(c, type) and issubclass(c, sp.Section) and c is not sp.Section
    ]
    return {n: fi for c in sections for n, fi in c.model_fields.items()}


def test_options_py_declares_no_setting_of_its_own():
    settings = _spec_fields()
    tree = ast.parse(inspect.getsource(opts))
    for cls in (n for n in tree.body if isinstance(n, ast.ClassDef)):
        # a class body's annotated names, outside `if TYPE_CHECKING:` (the type a validator narrows to, not a field)
        own = [s.target.id for s in cls.body if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)]
        assert not set(own) & set(settings), (cls.name, set(own) & set(settings))


@pytest.mark.parametrize("cls", OPTION_TYPES, ids=lambda c: c.__name__)
def test_every_setting_an_option_type_has_is_the_spec_field_itself(cls):
    settings = _spec_fields()
    shared = [n for n in cls.model_fields if n in settings]
    assert shared  # each type carries settings (else this test would prove nothing)
    for name in shared:
        mine, theirs = cls.model_fields[name], settings[name]
        assert (mine.default, mine.description, mine.metadata, mine.annotation) == (
            theirs.default, theirs.description, theirs.metadata, theirs.annotation), name  # fmt: skip


def test_the_run_options_are_the_requests_levers_and_reader_sections_whole():
    want = {*sp.RequestsSection.model_fields, *sp.LeversSection.model_fields, *sp.ReaderSection.model_fields}
    assert set(opts.RunOptions.model_fields) == want
    assert set(opts.ModelOptions.model_fields) == {*sp.ModelSection.model_fields, "isolate"}


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: opts.RunOptions(max_new_tokens=0), "--max-new-tokens must be 1 to 10,000,000, not 0"),
        (lambda: opts.RunOptions(temperature=math.nan), "--temperature"),
        (lambda: opts.RunOptions(think_time_s=1.0), "--think-time is the pause between a conversation's turns"),
        (lambda: opts.ModelOptions(threads=10**20), "--threads must be 1 to 4,096"),
        (lambda: opts.ModelOptions(weights="trained"), "--weights"),
        (lambda: opts.EndpointOptions(endpoint="http://127.0.0.1:9/v1", concurrency=0), "--concurrency"),
        (lambda: opts.EndpointOptions(), "no endpoint URL given"),
        (lambda: opts.EndpointOptions(endpoint="http://h/v1", server_command="  "), "--server-command is empty"),
        (lambda: opts.OpenLoop(rate=math.inf), "--rate"),
        (lambda: opts.OpenLoop(rate=1.0, arrival="weibull", requests=3), "weibull"),
        (lambda: opts.OpenLoop(), "an open loop needs --rate"),
        (lambda: opts.RunOptions(max_new_tokens="8"), "--max-new-tokens"),  # typed: a string is no count
    ],
)
def test_a_bad_value_is_one_line_naming_the_option_when_options_are_made(make, message):
    with pytest.raises(UserError) as e:
        make()
    assert message in str(e.value) and "\n" not in str(e.value)


def test_a_copy_is_checked_and_resolved_again():
    o = opts.RunOptions()
    assert o.replaced(compile=True).cache == "static"  # --compile implies the static cache on a copy too
    with pytest.raises(UserError, match="--repeats"):
        o.replaced(repeats=0)
    o.max_new_tokens = 0  # changed in place (no check on assignment) ...
    with pytest.raises(UserError, match="--max-new-tokens"):
        o.check()  # ... is caught where a driver or backend takes the options


def test_the_api_spellings_are_kept():
    assert opts.EndpointOptions(url="http://127.0.0.1:9/v1").endpoint == "http://127.0.0.1:9/v1"
    m = opts.ModelOptions(quantize=None, device_map={"lm_head": "cpu", "model": "cpu"})
    assert (m.quantize, m.quantization, m.device_map) == ("none", None, '{"lm_head": "cpu", "model": "cpu"}')
    assert m.model == sp.DEFAULT_MODEL and opts.ModelOptions(quantize="int8").quantization == "int8"


def test_a_default_is_the_spec_s_wherever_it_is_read():
    requests = sp.RequestsSection.model_fields
    assert opts.RunOptions().max_new_tokens == requests["max_new_tokens"].default
    arrival = sp.ArrivalsSection.model_fields["arrival"].default
    assert inspect.signature(llmbench.measure_load).parameters["arrival"].default == arrival
    assert opts.EndpointOptions(endpoint="http://h/v1").timeout_s == sp.ServerSection.model_fields["timeout_s"].default


def test_no_option_type_is_copied_as_a_dataclass():
    """``dataclasses.replace`` of an option type raises at run time (they are pydantic models): a copy is
    ``replaced()``, which checks and resolves it again. Read from the code, by the names options travel under."""
    from pathlib import Path

    names = {"options", "spec", "target", "endpoint", "candidate", "reference", "ol", "open_loop"}
    found = []
    for path in Path(opts.__file__).parent.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.Call)
                and node.args
                and ast.unparse(node.func) in ("replace", "dataclasses.replace")
            ):
                first = ast.unparse(node.args[0]).removeprefix("self.")
                if first in names:
                    found.append(f"{path.name}:{node.lineno} {ast.unparse(node)[:60]}")
    assert not found, found


def test_measure_load_keeps_the_options_seed_unless_one_is_given(monkeypatch):
    """The schedules are drawn from the requests' seed: ``seed`` given sets it, else the options' own stays (their
    sampling seed is not reset to the default)."""
    from llmbench.drivers import load as ld

    seen = []

    async def load(prompts, target, options, spec, output, **kw):
        seen.append((options.seed, spec.seed))
        return {}, None

    monkeypatch.setattr(ld, "load", load)
    for kw, want in (({}, (7, 7)), ({"seed": 3}, (3, 3))):
        llmbench.measure_load(["a"], "http://127.0.0.1:9/v1", ["ttft_ms:p90=100"], rates=[1.0], output="x",
                              options=opts.RunOptions(seed=7), **kw)  # fmt: skip
        assert seen[-1] == want


@pytest.mark.parametrize(("omp", "want"), [("3", 3), ("4,2", 4), (" 2 ", 2), ("", None), ("0", None), ("-1", None),
                                           ("abc", None), ("1e3", None), ("99999", None)])  # fmt: skip
def test_the_one_thread_default_reads_omp_num_threads_or_the_physical_cores(monkeypatch, omp, want):
    import psutil

    monkeypatch.setenv("OMP_NUM_THREADS", omp)
    assert sp.default_threads() == (want or psutil.cpu_count(logical=False) or 1)


def test_measure_load_hands_the_stop_and_the_probes_to_the_load(monkeypatch):
    from llmbench.drivers import load as ld

    seen = []

    async def load(prompts, target, options, spec, output, **kw):
        seen.append(spec)
        return {}, None

    monkeypatch.setattr(ld, "load", load)
    llmbench.measure_load(["a"], "http://127.0.0.1:9/v1", ["ttft_ms:p90=100"], rates=[1.0], output="x",
                          probe_rate=0.5, stop_saturated=True, stop_min_s=3.0)  # fmt: skip
    spec = seen[-1]
    assert (spec.probe_rate, spec.stops, spec.stop_min_s) == (0.5, True, 3.0)
    assert spec.stop_window_s == sp.commands.LoadPlan.model_fields["stop_window_s"].default
