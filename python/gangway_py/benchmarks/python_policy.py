"""Policies written in Python against gangway's own on the bundled 6,000-job Gavel trace: a FIFO
against `fifo`, and a least-attained-service policy against Gavel's LAS (`max_min_fairness`, an LP
each round); wall seconds of each run (the engine's `wall_s`), best of three.

    python python/gangway_py/benchmarks/python_policy.py
"""

from __future__ import annotations

import sys
from pathlib import Path

import gangway
from gangway import Grant, Round

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
import test_policy  # noqa: E402  (registers `test_py_fifo`)

assert test_policy.Fifo


class LeastAttained:
    """Least attained service first, every round: the jobs with the fewest GPU-seconds run, each on
    the fastest GPU type with room (Tiresias' LAS without its queues; preemptive)."""

    def allocate(self, round: Round) -> list[Grant]:
        free = list(round.capacity)
        grants = []
        for job in sorted(round.jobs, key=lambda j: (j.attained_gpu_seconds, j.arrival)):
            fits = [t for t in range(len(free)) if free[t] >= job.gpus and job.rates[t] > 0]
            if fits:
                best = max(fits, key=lambda t: job.rates[t])
                free[best] -= job.gpus
                grants.append(Grant(job.id, best, job.gpus))
        return grants


gangway.register_policy("bench_py_las", LeastAttained)


def best_wall(spec: str) -> tuple[float, float]:
    runs = [gangway.simulate(policies=[spec], fairness=False)[spec].summary for _ in range(3)]
    return min(s.wall_s for s in runs), runs[0].avg_jct_h


if __name__ == "__main__":
    rust, jct = best_wall("fifo")
    print(f"fifo (Rust)             {rust:7.3f} s  avg JCT {jct:.4f} h")
    python, jct = best_wall("test_py_fifo")
    print(f"fifo (Python)           {python:7.3f} s  avg JCT {jct:.4f} h  ({python / rust:.1f}x)")
    las, jct = best_wall("max_min_fairness")
    print(f"max_min_fairness (Rust) {las:7.3f} s  avg JCT {jct:.4f} h")
    python, jct = best_wall("bench_py_las")
    print(f"LAS (Python)            {python:7.3f} s  avg JCT {jct:.4f} h  ({python / las:.1f}x)")
