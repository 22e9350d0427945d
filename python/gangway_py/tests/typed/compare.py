"""A small script typed against gangway's stubs: ``mypy --strict`` must pass on it (test_typing.py).

It compares two policies on a synthetic trace and reports an input error where it is.
"""

from __future__ import annotations

from typing import Optional

import gangway


def mean_jct_hours(run: gangway.PolicyResult) -> Optional[float]:
    """The mean JCT of a run's finished jobs, in hours, from its job records."""
    jcts = [job.jct for job in run.jobs if job.jct is not None]
    return sum(jcts) / len(jcts) / 3600 if jcts else None


def compare(policies: list[str]) -> dict[str, float]:
    results: gangway.Results = gangway.simulate(
        "synthetic:jobs=40,seed=1,rate=4",
        cluster={"v100": 4, "k80": "2x2"},
        policies=policies,
        round=60.0,
        window=(0, 40),
    )
    out: dict[str, float] = {}
    for run in results:
        summary: gangway.Summary = run.summary
        out[run.policy] = summary.avg_jct_h
        assert mean_jct_hours(run) is not None
    return out


def where(rows: list[dict[str, object]]) -> tuple[Optional[int], Optional[str]]:
    try:
        gangway.simulate(rows, cluster="v100=4", policies="fifo")
    except gangway.BadInput as e:
        return e.record, e.field
    except gangway.GangwayError:
        raise
    return None, None


if __name__ == "__main__":
    print(compare(["fifo", "tiresias"]))
    print(where([{"job_id": 0, "num_gpu": "x", "submit_time": 0, "duration": 1}]))
    print(dict(gangway.builtin_policies())["fifo"])
