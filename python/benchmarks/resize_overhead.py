#!/usr/bin/env python3
"""Decision to first step of a resize through `gangway serve`, by each way of starting workers.

    python3 python/benchmarks/resize_overhead.py --python .venv/bin/python \\
        --profiles ../shared/data/sia/profiles [--bin target/release] [--runs 3] \\
        [--modes torchrun,direct,pool]

For each `elastic-run --spawn` mode in turn, --runs times: a fresh daemon
under `sia` on 4 fake `rtx` GPUs runs the toy DDP job (`--gpus 1:4`, typed cifar10), which Sia
grows from 1 GPU to 2, then to 4. The daemon measures each restart from its decision to the
workers' first reported step after it (`last_restart_seconds` in the API), split into phases
(`last_restart_phases`: until the old workers exited with their checkpoint, until the new ones
were launched, until their first step), read here once the job trains at its new size. The first
step's part that is the workers' own (torch's import and the rendezvous, then the restore and one
step) comes from the toy's `--timing` lines. This prints every restart and each mode's medians.
Only the standard library; about a minute per run.
"""

import argparse
import json
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

TOY = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples", "toy_ddp.py")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Api:
    def __init__(self, base, journal):
        self.base, self.journal = base, journal

    def call(self, method, path, body=None):
        with open(os.path.join(self.journal, "api-token")) as f:
            token = f.read().strip()
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.base + path, data=data, method=method)
        request.add_header("Authorization", f"Bearer {token}")
        request.add_header("Content-Type", "application/json")
        with urllib.request.urlopen(request, timeout=30) as answer:
            return json.loads(answer.read() or b"null")


def wait(what, check, seconds):
    deadline = time.time() + seconds
    while time.time() < deadline:
        try:
            value = check()
            if value:
                return value
        except OSError:
            pass
        time.sleep(0.2)
    sys.exit(f"resize_overhead: {what} did not happen within {seconds} s")


def measure(args, spawn, work, run):
    """The restarts 1 -> 2 and 2 -> 4 GPUs of one job on a fresh daemon: seconds, and phases."""
    journal = os.path.join(work, f"journal-{spawn}-{run}")
    port = free_port()
    daemon = subprocess.Popen(
        [os.path.join(args.bin, "gangway"), "serve", "--fake-gpus", "4", "--fake-gpu-type", "rtx",
         "--workers", "processes", "--policy", "sia", "--round", "2",
         "--goodput-profiles", args.profiles, "--listen", f"127.0.0.1:{port}", "--journal", journal],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    api = Api(f"http://127.0.0.1:{port}", journal)
    job = None
    try:
        wait("the daemon answering", lambda: os.path.exists(os.path.join(journal, "api-token"))
             and api.call("GET", "/jobs") is not None, 30)
        env = dict(os.environ, GANGWAY_TOKEN_FILE=os.path.join(journal, "api-token"))
        job = subprocess.Popen(
            [os.path.join(args.bin, "elastic-run"), "--daemon", f"127.0.0.1:{port}", "--gpus", "1:4",
             "--job-type", "cifar10", "--spawn", spawn, "--python", args.python,
             "--job-id", f"overhead-{spawn}-{run}", "--grace", "30",
             TOY, "--steps", "1000000", "--save-every", "5", "--step-sleep", "0.2",
             "--timing"],
            cwd=work, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

        log = os.path.join(work, "checkpoints", f"overhead-{spawn}-{run}", "elastic-run.log")

        def training_on(gpus):
            info = api.call("GET", "/jobs/0")
            measured = info.get("measured") or {}
            ready = (len(info["placement"]) == gpus and measured.get("replicas") == gpus
                     and info.get("last_restart_phases") is not None)
            # The toy's timing lines reach its log a moment after its report.
            return info if ready and worker_phases(log) else None

        seen = []
        for gpus in (2, 4):
            info = wait(f"the job training on {gpus} GPUs", lambda: training_on(gpus), 300)
            phases = dict(info["last_restart_phases"], **worker_phases(log))
            seen.append((info["last_restart_seconds"], phases))
            print(f"  --spawn {spawn}, run {run}: {info['last_resize']['from']} -> {gpus} GPUs: "
                  f"{seen[-1][0]:.2f} s ({describe(phases)})", flush=True)
        return seen
    finally:
        if job is not None:
            job.send_signal(signal.SIGINT)
            try:
                job.wait(timeout=90)
            except subprocess.TimeoutExpired:
                job.kill()
        daemon.terminate()
        daemon.wait()


PHASES = ("stop", "launch", "first_step", "import_and_rendezvous", "restore_and_step")


def describe(phases):
    return ", ".join(f"{p.replace('_', ' ')} {phases[p]:.2f}" for p in PHASES)


def worker_phases(log):
    """The new workers' own part of the first step, from the toy's `--timing` lines in the job's log
    (rank 0, the latest launch): importing torch and the rendezvous, then restoring the checkpoint
    and the first step."""
    marks = {}
    if not os.path.exists(log):
        return None
    with open(log, errors="replace") as f:
        # Other ranks' output can run into a line: match the marks, not whole lines.
        for event, at in re.findall(r"timing: (\w+)=(\d+\.\d+)", f.read()):
            if event == "worker_started":
                marks = {}
            marks[event] = float(at)
    if not {"worker_started", "rendezvous_done", "first_step"} <= marks.keys():
        return None
    return {"import_and_rendezvous": marks["rendezvous_done"] - marks["worker_started"],
            "restore_and_step": marks["first_step"] - marks["rendezvous_done"]}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python", required=True, help="a Python with torch")
    parser.add_argument("--profiles", required=True, help="Sia's profiles directory")
    parser.add_argument("--bin", default="target/release", help="where gangway and elastic-run are")
    parser.add_argument("--runs", type=int, default=3, help="daemons per mode (two restarts each)")
    parser.add_argument("--modes", default="torchrun,direct,pool",
                        help="elastic-run --spawn modes to compare, in turn (the first is the baseline)")
    args = parser.parse_args()
    modes = args.modes.split(",")
    # The job runs in a directory of its own.
    args.bin, args.profiles = os.path.abspath(args.bin), os.path.abspath(args.profiles)
    results = {}
    with tempfile.TemporaryDirectory() as work:
        # The modes in turn, so that drift on a shared machine touches both alike.
        for run in range(args.runs):
            for spawn in modes:
                results.setdefault(spawn, []).extend(measure(args, spawn, work, run))
    medians = {}
    for spawn, seen in results.items():
        totals = [total for total, _ in seen]
        medians[spawn] = statistics.median(totals)
        phases = {p: statistics.median(ph[p] for _, ph in seen) for p in PHASES}
        print(f"--spawn {spawn}: median decision to first step {medians[spawn]:.2f} s "
              f"over {len(seen)} restarts (min {min(totals):.2f}, max {max(totals):.2f}); "
              f"median phases: {describe(phases)}")
    for spawn in modes[1:]:
        print(f"ratio {spawn} / {modes[0]}: {medians[spawn] / medians[modes[0]]:.3f}")


if __name__ == "__main__":
    main()
