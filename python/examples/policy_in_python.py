"""A scheduling policy in 30 lines of Python, compared with gangway's `tiresias` and `sia`.

    python policy_in_python.py [SIA_WORKLOAD.csv]

It runs on one of Sia's workloads on Sia's own heterogeneous cluster (default: Philly's first, from
../shared/data/sia beside the checkout, which is read from there, never copied); without one, on a
synthetic trace against `tiresias` alone (`sia` needs a workload with goodput profiles).
"""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import List

import gangway
from gangway import Grant, Round


class FastestLeastServed:
    """Least attained service first, in doubling classes (Tiresias' idea with queues of its own):
    jobs that have had the fewest GPU-hours go first, each on the GPU type it runs on if that still
    has room (a move costs a restart), else on the fastest with room."""

    changes_with_time = True  # attained service grows as jobs run

    def allocate(self, round: Round) -> List[Grant]:
        free = list(round.capacity)
        grants = []
        served = lambda j: (math.floor(math.log2(1 + j.attained_gpu_seconds / 3600)), j.arrival)
        for job in sorted(round.jobs, key=served):
            fits = [t for t in range(len(free)) if free[t] >= job.gpus and job.rates[t] > 0]
            if not fits:
                continue
            best = job.running_on if job.running_on in fits else max(fits, key=lambda t: job.rates[t])
            free[best] -= job.gpus
            grants.append(Grant(job.id, best, job.gpus))
        return grants


gangway.register_policy("fastest_least_served", FastestLeastServed, "LAS on the fastest type, in Python")


def main() -> int:
    default = Path(__file__).resolve().parents[3] / "shared/data/sia/workloads/philly/workload-1.csv"
    workload = Path(sys.argv[1]) if len(sys.argv) > 1 else default
    if workload.is_file():
        results = gangway.simulate(workload, policies=["fastest_least_served", "tiresias", "sia"])
    else:
        print(f"(no Sia workload at {workload}: a synthetic trace, without sia)")
        results = gangway.simulate(
            "synthetic:jobs=300,seed=2,rate=6", cluster="v100=8,p100=8,k80=8",
            policies=["fastest_least_served", "tiresias"],
        )
    for run in results:
        s = run.summary
        print(f"{run.policy:<22} avg JCT {s.avg_jct_h:6.2f} h  p99 {s.p99_jct_h:6.2f} h  "
              f"makespan {s.makespan_h:6.1f} h  wall {s.wall_s:.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
