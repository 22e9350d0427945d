#!/usr/bin/env python3
"""Runs Gavel's own simulator in the setup of docs/FIDELITY.md, and records every measured job's JCT.

gangway's fidelity test compares with the numbers Gavel published. Where gangway misses one of them,
this script tells whether Gavel's code, run today on the same trace, reproduces it:

    python3 scripts/gavel_rerun.py run GAVEL/scheduler allox 4.8 allox_4.8.json
    python3 scripts/gavel_rerun.py run GAVEL/scheduler isolated 4.8 isolated_4.8.json
    python3 scripts/gavel_rerun.py rho allox_4.8.json isolated_4.8.json

With `--multi`, Gavel generates its continuous-multiple trace instead (scale factors 1, 2, 4, 8 with
probability 0.7, 0.1, 0.15, 0.05: its driver's `--generate-multi-gpu-jobs`), and the JSON also maps every
measured job to its scale factor. `--trace CSV` checks, after the run, that every job Gavel generated is the
one in the shared trace (arrival, job type, scale factor, total steps):

    python3 scripts/gavel_rerun.py run --multi --trace continuous_multiple_seed0.csv GAVEL/scheduler fifo 0.4 \
        multi_fifo_0.4.json

GAVEL is a checkout of stanford-futuredata/gavel (c4fa400); its simulator needs numpy, scipy, cvxpy,
ecos and psutil, and numpy < 2 for the `*_packed` policies (they call float() on one-element arrays, which numpy 2
refuses). The setup is Gavel's: 36 V100 + 36 P100 + 36 K80, 360 s rounds, seed 0, arrivals every 3600/rate
seconds on average, jobs 4000..4999 measured, and Gavel's default of at most one reallocation per 1,920 s.
A run takes 4 to 25 minutes. Gavel's RPC and matrix-completion modules are not used in simulation; empty
stand-ins take their place, so that neither grpc nor the physical-cluster code is needed.
"""

import argparse
import contextlib
import csv
import json
import logging
import os
import statistics
import sys
import tempfile
import time

WINDOW = range(4000, 5000)


def stand_ins(root):
    """Empty modules, under `root`, for the imports the simulator never uses."""
    os.makedirs(os.path.join(root, "runtime", "rpc"))
    for name in ("matrix_completion.py", "runtime/__init__.py", "runtime/rpc/__init__.py",
                 "runtime/rpc/scheduler_server.py", "runtime/rpc/scheduler_client.py"):
        open(os.path.join(root, name), "w").close()


def check_trace(generated, path, rate):
    """Fails unless every generated (arrival s, Job) is the shared trace's job of that id (as far as the
    trace goes: Gavel generates jobs until the measured ones finish)."""
    with open(path) as f:
        trace = {int(row["job_id"]): row for row in csv.DictReader(f)}
    for job_id, (arrival, job) in enumerate(generated[:len(trace)]):
        row = trace[job_id]
        expected = (float(row["arrival_unit"]) * 3600.0 / rate, row["job_type"], int(row["scale_factor"]),
                    float(row["total_steps"]))
        got = (arrival, job.job_type, job.scale_factor, job.total_steps)
        # The CSV keeps 6 decimals of the arrival unit and 3 of the steps.
        if (got[1:3] != expected[1:3] or abs(got[0] - expected[0]) > 1e-5 * 3600.0 / rate
                or abs(got[3] - expected[3]) > 1e-3 + 1e-9 * expected[3]):
            sys.exit(f"job {job_id}: Gavel generated {got}, {path} has {expected}")
    return min(len(generated), len(trace))


def run(args):
    scheduler_dir = os.path.abspath(args.scheduler_dir)
    # Paths given relative to where the script was started, before the chdir below.
    args.out = os.path.abspath(args.out)
    if args.trace:
        args.trace = os.path.abspath(args.trace)
    stand_in_dir = tempfile.TemporaryDirectory(prefix="gavel-stand-ins-")
    stand_ins(stand_in_dir.name)
    sys.path.insert(0, stand_in_dir.name)
    sys.path.append(scheduler_dir)
    os.chdir(scheduler_dir)  # Gavel opens its throughput table by a relative path
    import scheduler  # noqa: E402  (Gavel's)
    import utils  # noqa: E402
    from job_id_pair import JobIdPair  # noqa: E402

    logging.disable(logging.CRITICAL)
    policy = utils.get_policy(args.policy, solver="ECOS", seed=0)
    sim = scheduler.Scheduler(policy, throughputs_file="simulation_throughputs.json", seed=0,
                              time_per_iteration=360, simulate=True)
    measured = {JobIdPair(i, None) for i in WINDOW}
    started = time.time()
    # Gavel prints every job's completion; keep stdout for the summary.
    with open(os.devnull, "w") as quiet, contextlib.redirect_stdout(quiet), \
            contextlib.redirect_stderr(quiet):
        sim.simulate({"v100": 36, "p100": 36, "k80": 36}, lam=3600.0 / args.rate,
                     jobs_to_complete=measured, generate_multi_gpu_jobs=args.multi)
    # Gavel keeps per-job JCTs only in this private map (get_average_jct averages it).
    jcts = {str(job[0]): sim._job_completion_times[job] for job in measured}
    record = {"policy": args.policy, "rate": args.rate, "jct_s": jcts}
    if args.multi:
        # Gavel forgets a job once it completes, except in this list of every generated (arrival, Job).
        record["scale_factor"] = {str(i): sim._all_jobs[i][1].scale_factor for i in WINDOW}
    checked = ""
    if args.trace:
        checked = f", {check_trace(sim._all_jobs, args.trace, args.rate)} jobs as in {args.trace}"
    with open(args.out, "w") as out:
        json.dump(record, out)
    # Gavel records None for a job it gave up on (MAX_FAILED_ATTEMPTS failed rounds).
    failed = [j for j, jct in jcts.items() if jct is None]
    if failed:
        checked += f"; Gavel gave up on jobs {', '.join(failed)} (no JCT)"
    done = [jct for jct in jcts.values() if jct is not None]
    print(f"{args.policy} at {args.rate} jobs/h: average JCT {statistics.mean(done) / 3600:.2f} h "
          f"({time.time() - started:.0f} s{checked})")
    stand_in_dir.cleanup()


def rho(args):
    with open(args.policy_json) as f:
        policy = json.load(f)
    with open(args.isolated_json) as f:
        isolated = json.load(f)
    ratios = [policy["jct_s"][j] / isolated["jct_s"][j] for j in policy["jct_s"]]
    print(f"{policy['policy']} at {policy['rate']} jobs/h: average JCT "
          f"{statistics.mean(policy['jct_s'].values()) / 3600:.2f} h, mean rho {statistics.mean(ratios):.2f} "
          f"(isolated: {statistics.mean(isolated['jct_s'].values()) / 3600:.2f} h)")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    p = commands.add_parser("run", help="simulate one policy at one rate")
    p.add_argument("scheduler_dir", help="Gavel's scheduler/ directory")
    p.add_argument("policy", help="Gavel's policy name, e.g. allox or isolated")
    p.add_argument("rate", type=float, help="jobs per hour")
    p.add_argument("out", help="where to write the measured jobs' JCTs (JSON)")
    p.add_argument("--multi", action="store_true",
                   help="generate multi-GPU jobs (Gavel's continuous-multiple trace)")
    p.add_argument("--trace", help="a continuous_*.csv to check every generated job against")
    p.set_defaults(func=run)
    p = commands.add_parser("rho", help="average JCT and mean rho from two runs")
    p.add_argument("policy_json")
    p.add_argument("isolated_json")
    p.set_defaults(func=rho)
    args = parser.parse_args()
    args.func(args)


if __name__ == "__main__":
    main()
