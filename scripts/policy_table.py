#!/usr/bin/env python3
"""Compares policies family by family on the peers' own workloads, as docs/POLICIES.md's `ramp` table.

Each family is a set of workloads run on the peers' cluster and rounds; every number is over the
family: the average of the workloads' average JCTs, the p99 of all their jobs' JCTs pooled, the
average makespan, the worst finish-time fairness (rho) of any job, and restarts per job. Prints a
Markdown table, and with --json the same rows for programs.

    python3 scripts/policy_table.py [--gangway target/release/gangway] [--data ../shared/data]
        [--family sia-philly,pollux-2.0,gavel-5.6] [--policies ramp,sia] [--json]
"""

import argparse
import concurrent.futures
import csv
import json
import os
import subprocess
import sys
import tempfile

# Family: (folder under the data, workloads, cluster); the peers' clusters and each policy's round.
FAMILIES = {
    "sia-philly": ("sia/workloads/philly", 4, "aws=6x4,rtx=3x8,dgx-ext=2x8"),
    "sia-saturn": ("sia/workloads/saturn", 5, "aws=6x4,rtx=3x8,dgx-ext=2x8"),
    "sia-newtrace": ("sia/workloads/newtrace", 5, "aws=6x4,rtx=3x8,dgx-ext=2x8"),
    "pollux-1.0": ("pollux/workloads", 4, "t4=16x4"),
    "pollux-2.0": ("pollux/workloads-2.0", 4, "t4=16x4"),
}

# Gavel's continuous-single trace (bundled) at 5.6 jobs/h, as Gavel runs it: its 36/36/36 GPUs, 360 s
# rounds for every policy, jobs 4000..5000 measured. Its jobs are rigid: no goodput model, so the
# policies that need one do not run there.
GAVEL = "gavel-5.6"
GAVEL_ARGS = ["--rate", "5.6", "--round", "360"]
GAVEL_WINDOW = range(4000, 5000)
NEEDS_GOODPUT = {"sia", "pollux", "optimus"}
# The best of Gavel's policies there at Gavel's cadence, compared by default on that family only.
GAVEL_PACKED = ["max_sum_throughput_packed", "max_min_fairness_packed"]

# Policy: its round in seconds (Sia's and Pollux's comparisons: Gavel's and Themis' rounds are 360 s).
ROUNDS = {
    "ramp": 60,
    "sia": 60,
    "pollux": 60,
    "optimus": 60,
    "tiresias": 60,
    "max_sum_throughput_perf": 360,
    "themis": 360,
}


def run(gangway, args, policies, window=None):
    """One `gangway simulate ARGS` of `policies` on one workload; with `window`, only those jobs count."""
    with tempfile.TemporaryDirectory() as out:
        subprocess.run(
            [gangway, "simulate", *args, "--policy", ",".join(policies), "--out", out],
            check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        with open(os.path.join(out, "summary.json")) as f:
            summary = {row["policy"]: row for row in json.load(f)}
        results = {}
        for policy in policies:
            with open(os.path.join(out, f"jobs_{policy}.csv")) as f:
                jobs = [j for j in csv.DictReader(f) if window is None or int(j["job_id"]) in window]
            results[policy] = {
                "jcts": [float(j["jct_s"]) for j in jobs if j["jct_s"]],
                "jobs": len(jobs),
                "restarts": sum(int(j["preemptions"]) + int(j["migrations"]) for j in jobs),
                "summary": summary[policy],
            }
        return results


def tasks(family, data, policies):
    """The family's runs: (simulate's arguments, policies, measured window) for each."""
    if family == GAVEL:
        rigid = [p for p in policies if p.split(":")[0] not in NEEDS_GOODPUT]
        return [(GAVEL_ARGS, rigid, GAVEL_WINDOW)] if rigid else []
    folder, count, cluster = FAMILIES[family]
    by_round = {}
    for policy in policies:
        by_round.setdefault(ROUNDS.get(policy.split(":")[0], 360), []).append(policy)
    return [(["--trace", os.path.join(data, folder, f"workload-{w}.csv"), "--cluster", cluster,
              "--round", str(round_s)], group, None)
            for w in range(1, count + 1) for round_s, group in by_round.items()]


def p99(values):
    """The 99th percentile, linearly interpolated."""
    values = sorted(values)
    rank = 0.99 * (len(values) - 1)
    low = int(rank)
    high = min(low + 1, len(values) - 1)
    return values[low] + (values[high] - values[low]) * (rank - low)


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gangway", default=os.path.join(here, "..", "target", "release", "gangway"))
    parser.add_argument("--data", default=os.path.join(here, "..", "..", "shared", "data"))
    parser.add_argument("--family", default=",".join([*FAMILIES, GAVEL]))
    parser.add_argument("--policies", help="default: every policy in ROUNDS (and GAVEL_PACKED on gavel-5.6)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    policies = args.policies.split(",") if args.policies else list(ROUNDS)
    unknown = [p for p in policies if p.split(":")[0] not in [*ROUNDS, *GAVEL_PACKED]]
    if unknown:
        sys.exit(f"policy_table: no round length known for {', '.join(unknown)}")
    rows = []
    for family in args.family.split(","):
        if family not in FAMILIES and family != GAVEL:
            sys.exit(f"policy_table: unknown family {family} (known: {', '.join([*FAMILIES, GAVEL])})")
        asked = policies + (GAVEL_PACKED if family == GAVEL and not args.policies else [])
        runs_of = tasks(family, args.data, asked)
        per_policy = {}
        with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
            futures = [pool.submit(run, args.gangway, sim_args, group, window)
                       for sim_args, group, window in runs_of]
            for done, future in enumerate(concurrent.futures.as_completed(futures), 1):
                for policy, result in future.result().items():
                    per_policy.setdefault(policy, []).append(result)
                print(f"{family}: {done}/{len(futures)} runs", file=sys.stderr)
        for policy in [p for p in asked if p in per_policy]:
            runs = per_policy[policy]
            rows.append({
                "family": family,
                "policy": policy,
                "avg_jct_h": sum(r["summary"]["avg_jct_h"] for r in runs) / len(runs),
                "p99_jct_h": p99([j for r in runs for j in r["jcts"]]) / 3600,
                "makespan_h": sum(r["summary"]["makespan_h"] for r in runs) / len(runs),
                "worst_rho": max(r["summary"]["max_ftf"] or 0.0 for r in runs),
                "restarts_per_job": sum(r["restarts"] for r in runs) / sum(r["jobs"] for r in runs),
                "unfinished": sum(r["summary"]["unfinished_jobs"] for r in runs),
                "wall_s": sum(r["summary"]["wall_s"] for r in runs),
            })
    if args.json:
        json.dump(rows, sys.stdout, indent=1)
        print()
        return
    print("| family | policy | avg JCT (h) | vs sia (gavel-5.6: vs max_sum_throughput_packed) | p99 (h) | makespan (h) | worst rho | restarts/job | engine wall (s) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for row in rows:
        # The reference: `sia` where it runs, the best of Gavel's policies on Gavel's trace.
        name = GAVEL_PACKED[0] if row["family"] == GAVEL else "sia"
        ref = next((r for r in rows if r["family"] == row["family"] and r["policy"] == name), None)
        versus = f"{(row['avg_jct_h'] / ref['avg_jct_h'] - 1) * 100:+.0f}%" if ref and ref is not row else ""
        print(f"| {row['family']} | {row['policy']} | {row['avg_jct_h']:.3f} | {versus} | "
              f"{row['p99_jct_h']:.2f} | {row['makespan_h']:.2f} | {row['worst_rho']:.2f} | "
              f"{row['restarts_per_job']:.1f} | {row['wall_s']:.1f} |")

if __name__ == "__main__":
    main()
