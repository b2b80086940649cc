"""``--ray``: the load generators as Ray tasks, against a real server, on loopback only.

Ray does not stay on loopback by itself (it finds and uses the machine's own address, and probes 8.8.8.8;
see the field notes), so the measuring test runs in a network namespace of its own that has nothing but
``lo``: ``unshare -n`` (root, as sessions and CI are). Where that is not permitted the test is skipped with
the reason.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("ray", reason="ray not installed (pip install 'llmbench[ray]')")

INSIDE = os.environ.get("LLMBENCH_NETNS") == "1"
ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.subprocess
@pytest.mark.skipif(INSIDE, reason="the outer test: it starts the inner one in its own network namespace")
def test_ray_workers_in_a_loopback_only_namespace():
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        pytest.skip("unshare/ip not available: the Ray test needs a network namespace with loopback only")
    probe = subprocess.run(["unshare", "-n", "true"], capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip(f"unshare -n not permitted here ({probe.stderr.strip()[:80]}): Ray would leave loopback")
    inner = (f"ip link set lo up && LLMBENCH_NETNS=1 RAY_AUTH_MODE=disabled {sys.executable} -m pytest -q -p "
             f"no:cacheprovider {__file__}::test_open_loop_over_ray_tasks")  # fmt: skip
    r = subprocess.run(["unshare", "-n", "bash", "-c", inner], capture_output=True, text=True, cwd=ROOT, timeout=600)
    if r.returncode != 0 and "cannot join the cluster" in r.stdout:  # Ray itself did not start on this machine
        pytest.skip("Ray could not start a local instance here: " + r.stdout.split("cannot join the cluster")[1][:200])
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    assert "1 passed" in r.stdout


@pytest.mark.skipif(not INSIDE, reason="runs inside the loopback-only namespace the outer test makes")
def test_open_loop_over_ray_tasks(qwen_tokenizer, tmp_path):
    import psutil

    from llmbench.drivers.run import run as run_driver
    from llmbench.options import EndpointOptions, OpenLoop, RunOptions
    from llmbench.results.storage import load_run
    from llmbench.serve import create_app
    from llmbench.workloads.prompts import PromptSet
    from tests.delayed_model import delayed_loaded
    from tests.servers import BackgroundServer

    # nothing but loopback exists here: whatever Ray connects to is local
    assert set(psutil.net_if_addrs()) == {"lo"}
    lm = delayed_loaded(qwen_tokenizer, prefill_ms=20.0, decode_ms=10.0)
    prompts = PromptSet.from_list(["a plant dumps water at night", "某工厂夜间偷排废水"])
    out = tmp_path / "ray.json"
    with BackgroundServer(create_app(lm, max_queue=4)) as url:
        ep = EndpointOptions(endpoint=url, open_loop=OpenLoop(rate=5.0, arrival="constant", requests=8, workers=2,
                                                              ray="local"))  # fmt: skip
        run, _ = asyncio.run(run_driver(prompts, ep, RunOptions(max_new_tokens=4, ignore_eos=True), output=out))
    saved = load_run(out)
    assert saved.config.endpoint.workers == 2 and saved.complete
    due = sorted([r.scheduled_s for r in saved.requests] + [f.scheduled_s for f in saved.failed_requests])
    assert due == pytest.approx([i / 5 for i in range(8)])
    assert len(saved.requests) >= 6 and all(0 <= r.send_lateness_ms < 500 for r in saved.requests)
    assert run.summary.achieved_rate_rps > 2.5
    # each Ray worker checks itself, and the run keeps each one's record: which machine, its loop, its stamps
    c = saved.client
    assert c is not None and c.processes == 2 and c.per_process is not None and len(c.per_process) == 2
    for part in c.per_process:
        assert part.host and part.loop_lag_p99_ms is not None and part.fell_behind is not None, part
        assert part.lag_events and part.lag_events > 0  # llmbench serve sends its send stamps
    assert sum(p.lag_events or 0 for p in c.per_process) == c.lag_events
