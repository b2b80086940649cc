"""Open-loop schedules that can't be drawn, or would never end, are one line before anything is sent."""

from __future__ import annotations

import pytest

from llmbench.core.errors import UserError
from llmbench.workloads.arrivals import plan_arrivals


@pytest.mark.parametrize(
    ("kw", "said"),
    [
        # was: OverflowError squaring the CV
        ({"rate_rps": 1.0, "arrival": "gamma:1e200", "requests": 5}, "--arrival gamma:CV needs 0 < CV <= 1e+06"),
        ({"rate_rps": 1.0, "arrival": "gamma:nan", "requests": 5}, "--arrival gamma:CV needs 0 < CV"),
        # was: offsets of infinity, a request the run waited for forever
        ({"rate_rps": 1e-320, "requests": 3}, "longer than a run keeps"),
        # was: numpy's ValueError drawing 10**20 gaps, or 2 * 10**18 of them
        ({"rate_rps": 1.0, "requests": 10**20}, "--requests 100000000000000000000: more than llmbench"),
        ({"rate_rps": 1e6, "duration_s": 6e5}, "6e+11 requests: more than llmbench can plan"),
        ({"rate_rps": 1.0, "requests": 0}, "--requests must be at least 1"),
    ],
)
def test_a_schedule_that_can_not_be_kept_is_refused(kw, said):
    with pytest.raises(UserError, match=said.replace("+", r"\+").replace("(", r"\(")):
        plan_arrivals(**kw)


def test_the_cli_refuses_it_in_one_line(cli, prompt_file):
    r = cli("run", prompt_file, "--endpoint", "http://127.0.0.1:9/v1", "--rate", "1", "--requests", str(10**20), "-q")
    assert (
        r.returncode == 2
        and "--requests must be 1 to 1,000,000" in r.stderr
        and len(r.stderr.strip().splitlines()) == 1
    ), r.stderr
    assert plan_arrivals(2.0, "gamma:1e6", requests=3)[1][0] == 0.0  # the largest CV still draws
