"""The public Python API: what a notebook or a CI script calls, and the shape of the package behind it.

This file: the part that drives the tiny model, loopback servers in threads or short child processes
(tests/integration); the rest is in tests/unit/test_api.py."""

from __future__ import annotations

import asyncio
import gc
import signal

import llmbench
from tests.delayed_model import delayed_loaded


def test_measure_a_list_of_prompts_writes_no_file(tiny_model_dir, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    handlers = (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM))
    frozen = gc.get_freeze_count()
    run = llmbench.measure(["one", "two", "three"], model=str(tiny_model_dir), device="cpu", dtype="float32",
                           threads=1, max_new_tokens=4, ignore_eos=True)  # fmt: skip
    assert isinstance(run, llmbench.Run) and len(run.requests) == 3 and run.summary.requests == 3
    assert all(r.output_tokens == 4 for r in run.requests) and run.complete
    assert list(tmp_path.iterdir()) == []  # no output asked, none written
    # no process-wide side effect unless asked for (stop_on_signals, frozen_gc)
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == handlers
    assert gc.get_freeze_count() == frozen


def test_ameasure_inside_a_running_loop_against_serve(qwen_tokenizer, tmp_path):
    from llmbench.serve import create_app
    from tests.servers import BackgroundServer

    lm = delayed_loaded(qwen_tokenizer, prefill_ms=30.0, decode_ms=10.0)
    with BackgroundServer(create_app(lm, max_queue=2)) as url:

        async def notebook_cell():
            ticks = 0

            async def ticker():  # the notebook's own loop stays responsive while the run measures
                nonlocal ticks
                while True:
                    await asyncio.sleep(0.01)
                    ticks += 1

            t = asyncio.ensure_future(ticker())
            run = await llmbench.ameasure(["hi", "there"], endpoint=url, max_new_tokens=6, ignore_eos=True,
                                          output=tmp_path / "ep.json")  # fmt: skip
            # the blocking face works inside a running loop too (it uses a helper thread)
            again = llmbench.measure(["hi"], endpoint=url, max_new_tokens=3, ignore_eos=True, warmup=0)
            t.cancel()
            return run, again, ticks

        run, again, ticks = asyncio.run(notebook_cell())
    assert run.config.mode == "endpoint" and len(run.requests) == 2 and run.complete
    assert again.requests[0].output_tokens == 3 and ticks > 5
    assert llmbench.load_run(tmp_path / "ep.json").run_id == run.run_id


def test_an_in_process_run_leaves_the_event_loop_free(qwen_tokenizer):
    lm = delayed_loaded(qwen_tokenizer, prefill_ms=40.0, decode_ms=20.0)

    async def main():
        ticks = 0

        async def ticker():
            nonlocal ticks
            while True:
                await asyncio.sleep(0.005)
                ticks += 1

        t = asyncio.ensure_future(ticker())
        run = await llmbench.ameasure(["a prompt"], model=lm, max_new_tokens=10, ignore_eos=True, warmup=0)
        t.cancel()
        return run, ticks

    run, ticks = asyncio.run(main())
    # generate() ran on the generation thread: the loop ticked all through the ~220 ms of forward passes
    assert run.requests[0].output_tokens == 10 and ticks >= 10
