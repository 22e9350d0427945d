#!/usr/bin/env python3
"""Decision to first step of a resize through `gangway serve`, with torchrun's agent and without.

    python3 python/benchmarks/resize_overhead.py --python .venv/bin/python \\
        --profiles ../shared/data/sia/profiles [--bin target/release] [--restarts 6]

For each of `elastic-run --spawn torchrun` and `--spawn direct`: a daemon under `sia` on 4 fake `rtx`
GPUs runs the toy DDP job (`--gpus 1:4`, typed cifar10); GPUs 2 and 3 are cordoned and put back in
turn, so that the job shrinks to 2 GPUs and grows again. The daemon measures every restart from its
decision to the workers' first reported step after it (`last_restart_seconds` in the API); this
prints each mode's restarts and their median. Only the standard library; a few minutes per mode.
"""

import argparse
import json
import os
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


def measure(args, spawn, work):
    journal = os.path.join(work, f"journal-{spawn}")
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
             "--job-id", f"overhead-{spawn}", "--grace", "30",
             TOY, "--steps", "1000000", "--save-every", "20", "--step-sleep", "0.05"],
            cwd=work, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        seen = []
        cordoned = False
        while len(seen) < args.restarts:
            # At 4 GPUs, take two away; at 2, give them back: each is one resize.
            info = wait("a job training on all its GPUs", lambda: (lambda j: j if (
                j.get("measured") and j["measured"]["replicas"] == len(j["placement"]) > 0
                and j["phase"] == "running" and (len(j["placement"]) == (2 if cordoned else 4)))
                else None)(api.call("GET", "/jobs/0")), 300)
            restart = info.get("last_restart_seconds")
            if restart is not None and info["resizes"] > len(seen):
                seen.append(restart)
                print(f"  --spawn {spawn}: restart {len(seen)} ({info['last_resize']['from']} -> "
                      f"{info['last_resize']['to']} GPUs): {restart:.2f} s", flush=True)
            cordoned = not cordoned
            api.call("POST", "/gpus/cordon" if cordoned else "/gpus/uncordon", {"gpus": [2, 3]})
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


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python", required=True, help="a Python with torch")
    parser.add_argument("--profiles", required=True, help="Sia's profiles directory")
    parser.add_argument("--bin", default="target/release", help="where gangway and elastic-run are")
    parser.add_argument("--restarts", type=int, default=6, help="restarts measured per mode")
    args = parser.parse_args()
    results = {}
    with tempfile.TemporaryDirectory() as work:
        for spawn in ("torchrun", "direct"):
            results[spawn] = measure(args, spawn, work)
    for spawn, seen in results.items():
        print(f"--spawn {spawn}: median decision to first step {statistics.median(seen):.2f} s "
              f"over {len(seen)} restarts (min {min(seen):.2f}, max {max(seen):.2f})")
    print(f"ratio direct / torchrun: "
          f"{statistics.median(results['direct']) / statistics.median(results['torchrun']):.3f}")


if __name__ == "__main__":
    main()
