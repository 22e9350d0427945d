"""What a worker sees of its process, written to `probe-LABEL-RANK.json` in its directory, so that
a test can compare a worker the warm pool forked with one started directly (tests/elastic_run.rs)."""

import json
import os
import resource
import signal
import sys

import __main__
import torch


def status(*keys):
    with open("/proc/self/status") as f:
        return {k: v.strip() for k, v in (line.split(":", 1) for line in f) if k in keys}


def open_fds():
    fds = {}
    for fd in range(256):
        try:
            os.fstat(fd)
        except OSError:
            continue
        target = os.readlink(f"/proc/self/fd/{fd}")
        fds[fd] = target.split(":")[0] if ":[" in target else target
    return fds


def handlers():
    seen = {}
    for sig in sorted(signal.valid_signals()):
        if sig in (signal.SIGKILL, signal.SIGSTOP):
            continue
        try:
            seen[signal.Signals(sig).name] = repr(signal.getsignal(sig))
        except (ValueError, OSError):
            pass
    return seen


seen = {
    "env": dict(os.environ),
    "cwd": os.getcwd(),
    "fds": open_fds(),
    "ttys": [os.isatty(fd) for fd in (0, 1, 2)],
    "limits": {name: resource.getrlimit(getattr(resource, name))
               for name in dir(resource) if name.startswith("RLIMIT_")},
    "affinity": sorted(os.sched_getaffinity(0)),
    "status": status("Umask", "SigBlk", "SigIgn", "SigCgt", "NoNewPrivs", "Seccomp", "CapInh",
                      "CapPrm", "CapEff", "CapBnd", "CapAmb", "Uid", "Gid", "Groups",
                      "Cpus_allowed_list"),
    "cgroup": open("/proc/self/cgroup").read(),
    "handlers": handlers(),
    "argv": sys.argv,
    "orig_argv": sys.orig_argv,
    "path0": sys.path[0],
    "flags": list(sys.flags),
    "executable": sys.executable,
    "main": {k: repr(getattr(__main__, k)) for k in ("__name__", "__file__", "__spec__", "__package__")},
    "main_names": sorted(k for k in vars(__main__) if k.startswith("__")),
    "stdout": [sys.stdout.line_buffering, sys.stdout.encoding, type(sys.stdout.buffer).__name__],
    "torch_threads": torch.get_num_threads(),
}
# Random in every fresh worker: the test checks that they differ, not that they match.
seeds = {"torch": torch.initial_seed(), "random": __import__("random").random()}
with open(f"probe-{sys.argv[1]}-{os.environ['RANK']}.json", "w") as f:
    json.dump(seen, f, indent=1, sort_keys=True)
with open(f"seeds-{sys.argv[1]}-{os.environ['RANK']}.json", "w") as f:
    json.dump(seeds, f)
