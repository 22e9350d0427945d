"""Compare scheduling policies on your own trace, and plot their JCT CDFs.

    python compare_policies.py                      # the bundled Gavel trace, gangway's default policies
    python compare_policies.py my_trace.csv --policies fifo,tiresias,las --cluster v100=16,k80=16
    python compare_policies.py synthetic:jobs=500,seed=3,rate=4 --cluster v100=8 --plot jct.png

Prints one row per policy (the figures `gangway simulate` prints) and, with matplotlib installed,
draws every policy's JCT CDF into the --plot file.
"""

from __future__ import annotations

import argparse
import sys

import gangway


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace", nargs="?", help="a trace file or synthetic:... (default: the bundled one)")
    parser.add_argument("--policies", help="comma-separated specs (default: gangway's)")
    parser.add_argument("--cluster", help="TYPE=N,... (default: the workload's own)")
    parser.add_argument("--plot", default="jct_cdf.png", help="where to draw the CDFs (PNG)")
    args = parser.parse_args()

    try:
        results = gangway.simulate(args.trace, cluster=args.cluster, policies=args.policies)
    except gangway.GangwayError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2

    print(f"{'policy':<24} {'avg JCT h':>10} {'p99 JCT h':>10} {'makespan h':>11} {'max rho':>8}")
    for run in results:
        s = run.summary
        rho = "-" if s.max_ftf is None else f"{s.max_ftf:.2f}"
        print(f"{run.policy:<24} {s.avg_jct_h:>10.2f} {s.p99_jct_h:>10.2f} {s.makespan_h:>11.1f} {rho:>8}")

    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("(install matplotlib to plot the JCT CDFs)")
        return 0
    figure, axes = plt.subplots(figsize=(7, 4))
    for run in results:
        jcts = sorted(job.jct / 3600 for job in run.jobs if job.jct is not None)
        axes.step(jcts, [(k + 1) / len(jcts) for k in range(len(jcts))], where="post", label=run.policy)
    axes.set_xscale("log")
    axes.set_xlabel("job completion time (hours)")
    axes.set_ylabel("fraction of jobs")
    axes.legend()
    figure.tight_layout()
    figure.savefig(args.plot, dpi=120)
    print(f"wrote {args.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
