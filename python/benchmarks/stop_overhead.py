#!/usr/bin/env python3
"""How long a stop takes, phase by phase: SIGTERM to `elastic-run --spawn direct` until it exits.

    python3 python/benchmarks/stop_overhead.py --python .venv/bin/python [--bin target/release] [--runs 3]

The toy DDP job runs under `elastic-run --fake-gpus N --gpus N --spawn direct` (N = 1, then 2),
saving every 5 steps with 0.2 s between steps. After its first step and a second more, this sends
SIGTERM (what the daemon's executor sends at a resize) and times until `elastic-run` exits. The
toy's `--timing` lines split that: until the next step boundary saw the stop, the save, the
teardown (a barrier and the process group destroyed), and the rest (the workers' exit and the
launcher seeing it). Each run stops the toy both ways in turn, paired: with `gw.exit_now` (the
toy's default) and through the interpreter's teardown (`--interpreter-exit`). Prints every stop
and the medians. Only the standard library; a few seconds per stop.
"""

import argparse
import os
import re
import signal
import statistics
import subprocess
import tempfile
import time

TOY = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples", "toy_ddp.py")
PHASES = ("to_step_boundary", "save", "teardown", "exit", "total")
WAYS = {"exit_now": [], "interpreter_exit": ["--interpreter-exit"]}


def stop_once(args, ranks, way, work):
    """One stop of the toy on `ranks` workers, exiting `way`: its phases in seconds."""
    command = [os.path.join(args.bin, "elastic-run"), "--fake-gpus", str(ranks), "--gpus", str(ranks),
               "--spawn", "direct", "--python", args.python,
               "--checkpoint-dir", os.path.join(work, f"checkpoints-{ranks}-{way}"),
               TOY, "--steps", "100000", "--save-every", "5", "--step-sleep", "0.2", "--timing",
               *WAYS[way]]
    job = subprocess.Popen(command, cwd=work, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    seen = []
    for line in job.stdout:
        seen.append(line)
        if "timing: first_step=" in line:
            break
    time.sleep(1.0)
    asked = time.time()
    job.send_signal(signal.SIGTERM)
    seen.append(job.stdout.read())
    code = job.wait()
    ended = time.time()
    marks = {event: float(at) for event, at in re.findall(r"timing: (\w+)=(\d+\.\d+)", "".join(seen))}
    missing = {"stop_seen", "checkpoint_saved", "teardown_done"} - marks.keys()
    if code != 75 or missing:
        raise SystemExit(f"elastic-run exited {code} (expected 75, preempted), missing marks {sorted(missing)}:\n"
                         + "".join(seen)[-3000:])
    return {"to_step_boundary": marks["stop_seen"] - asked,
            "save": marks["checkpoint_saved"] - marks["stop_seen"],
            "teardown": marks["teardown_done"] - marks["checkpoint_saved"],
            "exit": ended - marks["teardown_done"],
            "total": ended - asked}


def describe(phases):
    return ", ".join(f"{p.replace('_', ' ')} {phases[p]:.3f}" for p in PHASES)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python", required=True, help="a Python with torch")
    parser.add_argument("--bin", default="target/release", help="where elastic-run is")
    parser.add_argument("--runs", type=int, default=3, help="stops per way and worker count")
    args = parser.parse_args()
    args.bin, args.python = os.path.abspath(args.bin), os.path.abspath(args.python)
    with tempfile.TemporaryDirectory() as work:
        for ranks in (1, 2):
            results = {way: [] for way in WAYS}
            for run in range(args.runs):
                # The two ways in turn, so that drift on a shared machine touches both alike.
                for way in WAYS:
                    phases = stop_once(args, ranks, way, work)
                    results[way].append(phases)
                    print(f"  {ranks} worker(s), {way}, run {run}: {describe(phases)}", flush=True)
            for way, seen in results.items():
                medians = {p: statistics.median(s[p] for s in seen) for p in PHASES}
                print(f"{ranks} worker(s), {way}: median {describe(medians)}", flush=True)


if __name__ == "__main__":
    main()
