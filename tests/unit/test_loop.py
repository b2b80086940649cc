"""The one run loop, driven by a backend with known timings (ground truth, no model): order, resume, failures,
stops, summaries, warnings and ``complete`` are the loop's, whatever the backend."""

from __future__ import annotations

import asyncio
import time

import pytest

from llmbench.backends import Request
from llmbench.core.errors import BackendUnavailable, RequestFailed, RunInterrupted, UserError
from llmbench.core.process import Stop
from llmbench.results.metrics import request_result, text_sha256
from llmbench.results.schema import Environment, Run, RunConfig, new_run_record
from llmbench.results.storage import journal_path, load_run
from llmbench.runner.loop import RunLoop, Track, check_resumable, execute, new_track, round_robin
from llmbench.workloads.prompts import PromptSet
from tests.helpers import Recorder

PROMPTS = PromptSet.from_list([f"prompt {i}" for i in range(4)])


class FakeBackend:
    """Answers every request after ``delay_s`` with tokens spaced ``tpot_ms`` apart; scripted failures."""

    cancel_on_stop = False

    def __init__(self, label="", tpot_ms=2.0, tokens=4, delay_s=0.0, fail=None, cancel_on_stop=False):
        self.label, self.tpot_ms, self.tokens, self.delay_s = label, tpot_ms, tokens, delay_s
        self.fail = fail or {}  # (prompt_index, repeat) -> exception to raise
        self.cancel_on_stop = cancel_on_stop
        self.calls: list[tuple[int, int]] = []
        self.activations = 0
        self.finished = False

    def early_config(self, prompts):
        return {"model": "fake", "prompt_sha256": prompts.sha256}

    async def start(self, prompts):
        pass

    def new_run(self, prompts):
        config = RunConfig(model="fake", model_source="builtin", weights="random", device="cpu", dtype="float32",
                           max_new_tokens=self.tokens, ignore_eos=True, warmup=0, repeats=1, prompt_file=prompts.path,
                           prompt_sha256=prompts.sha256, prompt_count=len(prompts.prompts))  # fmt: skip
        env = Environment(python="3", platform="test", cpu_model="test")
        return new_run_record(config, env, warnings=["a load warning"])

    async def activate(self):
        self.activations += 1

    async def measure(self, request: Request, stop: Stop, started_s: float):
        self.calls.append((request.prompt_index, request.repeat))
        error = self.fail.get((request.prompt_index, request.repeat))
        if error is not None:
            raise error
        start = time.perf_counter_ns()
        await asyncio.sleep(self.delay_s)
        stamps = [start + int((10 + k * self.tpot_ms) * 1e6) for k in range(self.tokens)]
        return request_result(prompt_index=request.prompt_index, repeat=request.repeat, start_ns=start,
                              stamps_ns=stamps, prompt_tokens=5, output_sha256=text_sha256("x"), output_text="x",
                              started_s=started_s)  # fmt: skip

    def probe_key(self):
        return None

    async def probe(self):
        return None

    def finish(self, run):
        self.finished = True
        return []

    async def close(self):
        pass


def _run(tracks, plan, **kw):
    return asyncio.run(execute(tracks, plan, PROMPTS, **kw))


def test_the_plan_is_measured_in_order_and_summarized(tmp_path):
    b = FakeBackend(tpot_ms=3.0)
    t = new_track(b, PROMPTS, tmp_path / "r.json")
    rec = Recorder()
    [run] = _run([t], round_robin([t], PROMPTS, 2), warmup=2, reporter=rec)
    # warm-ups from the list's end (a server's prefix cache never holds a measured prompt), then the plan
    assert b.calls == [(3, -1), (2, -1)] + [(i, rep) for rep in range(2) for i in range(4)]
    assert run.complete and run.summary.requests == 8 and run.summary.tpot_ms.mean == pytest.approx(3.0)
    assert [r.session for r in run.requests] == [0] * 8 and len(run.sessions) == 1 and b.finished
    assert rec.warnings == ["a load warning"] and [d for _r, d, _t in rec.requests] == list(range(1, 9))
    assert load_run(tmp_path / "r.json").summary.requests == 8 and not journal_path(tmp_path / "r.json").exists()


def test_a_resumed_run_measures_only_what_is_missing(tmp_path):
    out = tmp_path / "r.json"
    b = FakeBackend()
    stop = Stop()
    t = new_track(b, PROMPTS, out)
    with pytest.raises(RunInterrupted):
        _run([t], round_robin([t], PROMPTS, 2), stop=stop, reporter=Recorder(stop=stop, stop_after=3))
    first = load_run(out)
    assert not first.complete and len(first.requests) == 3 and first.sessions[0].interrupted_by == "test"
    b2 = FakeBackend()
    t2 = new_track(b2, PROMPTS, out, resume=first)
    [run] = _run([t2], round_robin([t2], PROMPTS, 2))
    assert b2.calls == [(i, rep) for rep in range(2) for i in range(4)][3:]
    assert run.complete and len(run.requests) == 8 and [s.interrupted_by for s in run.sessions] == ["test", None]
    assert {r.session for r in run.requests[3:]} == {1} and run.warnings.count("a load warning") == 1
    with pytest.raises(UserError, match="already complete"):
        check_resumable(run, out, {})


def test_resume_refuses_a_changed_setup_or_environment(tmp_path):
    run = new_track(FakeBackend(), PROMPTS, None).run
    with pytest.raises(UserError, match=r"max_new_tokens 4 -> 5"):
        check_resumable(run, "r.json", {**run.config.model_dump(), "max_new_tokens": 5})
    env = run.environment.model_dump()
    with pytest.raises(UserError, match=r"torch None -> '9.9'"):
        check_resumable(run, "r.json", run.config.model_dump(), {**env, "torch": "9.9"})
    check_resumable(run, "r.json", run.config.model_dump(), {**env, "platform": "after a reboot"})  # allowed
    from llmbench.results.schema import LoadInfo, Offload

    run.load = LoadInfo(seconds=1.0)
    offloaded = LoadInfo(seconds=1.0, offload=Offload(disk=["model.layers.3"], missing_bytes=10))
    with pytest.raises(UserError, match=r"offloaded weights \[\] -> \['disk'\]"):
        check_resumable(run, "r.json", run.config.model_dump(), env, offloaded)


def test_failures_are_recorded_and_the_run_goes_on_but_is_not_complete(tmp_path):
    b = FakeBackend(fail={(2, 0): RequestFailed("HTTP 503: busy", 503)})
    t = new_track(b, PROMPTS, tmp_path / "r.json")
    rec = Recorder()
    [run] = _run([t], round_robin([t], PROMPTS, 1), reporter=rec)
    assert [r.prompt_index for r in run.requests] == [0, 1, 3] and not run.complete
    assert [(f.prompt_index, f.status) for f in run.failed_requests] == [(2, 503)]
    assert run.summary.failed_requests == 1 and any("1 of 4 requests failed" in w for w in rec.warnings)


def test_a_first_request_that_fails_is_a_wrong_setup_and_writes_nothing(tmp_path):
    out = tmp_path / "r.json"
    b = FakeBackend(fail={(0, 0): RequestFailed("HTTP 404: no such model", 404)})
    t = new_track(b, PROMPTS, out)
    with pytest.raises(UserError, match="the first request failed: HTTP 404"):
        _run([t], round_robin([t], PROMPTS, 1))
    assert not out.exists() and b.calls == [(0, 0)]


def test_a_lost_backend_ends_the_run_keeping_what_finished(tmp_path):
    out = tmp_path / "r.json"
    b = FakeBackend(fail={(2, 0): BackendUnavailable("cannot connect to http://127.0.0.1:9")})
    t = new_track(b, PROMPTS, out)
    with pytest.raises(UserError, match=r"cannot connect.*2 finished requests are in"):
        _run([t], round_robin([t], PROMPTS, 1))
    kept = load_run(out)
    assert len(kept.requests) == 2 and not kept.complete


def test_an_unexpected_error_is_recorded_saved_and_raised_never_dropped(tmp_path):
    out = tmp_path / "r.json"
    b = FakeBackend(fail={(1, 0): KeyError("a defect")})
    t = new_track(b, PROMPTS, out)
    with pytest.raises(KeyError, match="a defect"):
        _run([t], round_robin([t], PROMPTS, 1))
    kept = load_run(out)
    assert [r.prompt_index for r in kept.requests] == [0] and not kept.complete
    assert kept.failed_requests[0].prompt_index == 1 and "internal error: KeyError" in kept.failed_requests[0].error
    assert b.calls == [(0, 0), (1, 0)]  # nothing after the defect


def test_a_hard_stop_drops_the_request_in_flight_at_once(tmp_path):
    b = FakeBackend(delay_s=30.0)  # a request that would take 30 s
    t = new_track(b, PROMPTS, tmp_path / "r.json")
    stop = Stop()

    async def main():
        loop = asyncio.get_running_loop()
        loop.call_later(0.2, stop.request, "SIGINT")  # first: after the token in flight (would wait 30 s)
        loop.call_later(0.4, stop.request, "SIGINT")  # second: at once
        await execute([t], round_robin([t], PROMPTS, 1), PROMPTS, stop=stop)

    t0 = time.monotonic()
    with pytest.raises(RunInterrupted) as e:
        asyncio.run(main())
    assert time.monotonic() - t0 < 10 and e.value.signal_name == "SIGINT"
    assert load_run(tmp_path / "r.json").sessions[0].interrupted_by == "SIGINT"


def test_concurrency_keeps_several_in_flight(tmp_path):
    b = FakeBackend(delay_s=0.2, cancel_on_stop=True)
    t = new_track(b, PROMPTS, None)
    t0 = time.monotonic()
    [run] = _run([t], round_robin([t], PROMPTS, 1), concurrency=4)
    assert time.monotonic() - t0 < 0.2 * 4 * 0.75 and run.complete  # overlapped, not one after another
    starts = sorted(r.started_s for r in run.requests)
    assert starts[-1] - starts[0] < 0.1


def test_several_backends_take_turns_as_the_plan_says(tmp_path):
    a, b = FakeBackend(label="a: "), FakeBackend(label="b: ")
    ta, tb = new_track(a, PROMPTS, tmp_path / "a.json"), new_track(b, PROMPTS, tmp_path / "b.json")
    plan = []
    for i, p in enumerate(PROMPTS.prompts):  # ABBA
        first, second = (ta, tb) if i % 2 == 0 else (tb, ta)
        plan += [(first, Request(p, i, 0)), (second, Request(p, i, 0))]
    runs = _run([ta, tb], plan)
    assert all(r.complete and len(r.requests) == 4 for r in runs)
    order = [(r.started_s, "a") for r in runs[0].requests] + [(r.started_s, "b") for r in runs[1].requests]
    assert "".join(x for _s, x in sorted(order)) == "abbaabba"
    assert (a.activations, b.activations) == (1 + 3, 1 + 2)  # warm-up, then once per turn: a|bb|aa|bb|a


def test_a_run_loop_is_reusable_only_per_plan():
    b = FakeBackend()
    run: Run = new_track(b, PROMPTS, None).run
    loop = RunLoop([Track(b, run, run)], PROMPTS)
    assert asyncio.run(loop.run(round_robin(loop.tracks, PROMPTS, 1)))[0].complete


def test_a_failing_save_ends_the_run_and_the_error_is_raised(tmp_path, monkeypatch):
    from llmbench.results import storage

    b = FakeBackend(delay_s=0.05)
    t = new_track(b, PROMPTS, tmp_path / "r.json")
    calls = {"n": 0}
    real_add = storage.RunWriter.add

    def add(self, run, item, summarize=None):
        calls["n"] += 1
        if calls["n"] == 2:
            raise OSError(28, "No space left on device")
        return real_add(self, run, item, summarize)

    monkeypatch.setattr(storage.RunWriter, "add", add)
    with pytest.raises(UserError, match="cannot save to .*r.json: No space left on device") as e:
        _run([t], round_robin([t], PROMPTS, 2), concurrency=2)
    assert len(b.calls) < 8  # the workers stopped
    kept = load_run(tmp_path / "r.json")
    assert not kept.complete and len(kept.requests) >= 2
    # the count it states is what the file holds: the request whose save failed is not claimed as kept
    assert f"; {len(kept.requests)} finished requests are in" in str(e.value)
