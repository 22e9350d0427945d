"""Cooperative stop (``should_stop``, ``exit_now``) and liveness reporting (``report_progress``)."""

import json
import logging
import os
import signal
import socket
import sys
import threading
import time

from . import _dist, _env, _fs

# Set by the SIGTERM handler. A plain module flag: the handler must do nothing that could
# deadlock or raise in the middle of arbitrary training code (no I/O, no locks, no collectives).
_sigterm_received = False
_handler_installed = False
_previous_handler = None
_last_progress_write = 0.0  # time.time() of the last progress write, for min_interval


def _on_sigterm(signum, frame):
    global _sigterm_received
    _sigterm_received = True
    # Chain to a Python handler the script installed before us, so we do not silently disable it.
    if callable(_previous_handler):
        _previous_handler(signum, frame)


def install_sigterm_handler():
    """Turn SIGTERM into a stop request that ``should_stop()`` reports at the next step boundary.

    Idempotent. Call it as early as possible: until it runs, SIGTERM still kills the process.
    ``should_stop()`` also calls it, so it is installed at the latest on the first check.
    Returns False when it cannot be installed (Python only allows it in the main thread).
    """
    global _handler_installed, _previous_handler
    if _handler_installed:
        return True
    if threading.current_thread() is not threading.main_thread():
        return False
    _previous_handler = signal.signal(signal.SIGTERM, _on_sigterm)
    _handler_installed = True
    return True


def stop_requested_locally():
    """This process's own view: SIGTERM received, or the launcher's stop file exists."""
    if _sigterm_received:
        return True
    stop_file = _env.get_str(_env.STOP_FILE)
    return stop_file is not None and os.path.exists(stop_file)


def should_stop(group=None):
    """True when the job should save and exit at this step boundary.

    Cheap enough to call every step: an os.stat, plus, when torch.distributed is initialized, one
    all-reduce (MAX) of a single integer so that every rank returns the same answer. Without that
    agreement one rank could see the stop file a step before another and leave the others blocked
    in a collective. Because it is a collective, all ranks of ``group`` must call it at the same steps.
    """
    install_sigterm_handler()
    local = 1 if stop_requested_locally() else 0
    return _dist.all_max([local], group)[0] > 0


def exit_now(code=0):
    """End this worker at once with exit status ``code``: the last step of a cooperative stop.

    Flushes ``sys.stdout``, ``sys.stderr`` and the ``logging`` handlers, then leaves with
    ``os._exit``, skipping the interpreter's teardown: ``atexit`` handlers, finalizers, and
    unloading torch, which takes about a second per worker (a stop of the toy job under
    ``elastic-run --spawn direct`` went from 1.15 s to 0.31 s with one worker, and from 1.55 s to
    0.38 s with two: ``python/benchmarks/stop_overhead.py``). Call it only once everything worth
    keeping is saved and every collective is done (after ``destroy_process_group``): a peer still
    in a collective with this rank would see its connection close. Files the script opened
    itself are not flushed; close them first.
    """
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (AttributeError, OSError, ValueError):
            pass  # closed or replaced by the script: nothing left to flush
    logging.shutdown()
    os._exit(code)


def report_progress(step, total_steps=None, min_interval=0.0, goodput=None):
    """Record ``step`` and the current time in GANGWAY_PROGRESS_FILE, for hang detection and for the
    scheduler: with ``total_steps``, the daemon counts ``step / total_steps`` of the job as done (what
    a worker reports is the truth; the scheduler's model only predicts).

    Written by LOCAL_RANK 0 only: one writer per node, so the file works whether the path is on
    node-local disk (each node's launcher watches its own) or shared storage (last writer wins;
    every write is a complete file). In synchronous data-parallel training a hung rank stalls the
    collectives of all ranks, so local rank 0 stops advancing too and the hang is still visible.

    Written atomically (temp file + rename) but without fsync: readers are processes on the same
    machine, and durability across a crash does not matter for a heartbeat.
    ``min_interval`` (seconds) skips writes closer together than that, for very fast steps.
    ``goodput``: what a ``GoodputMeter`` measured (its ``summary()``), passed on to the control
    plane for its goodput models.
    Returns True when the file was written.
    """
    path = _env.get_str(_env.PROGRESS_FILE)
    if path is None or _dist.local_rank() != 0:
        return False
    now = time.time()
    global _last_progress_write
    if min_interval and now - _last_progress_write < min_interval:
        return False
    record = {
        "step": int(step),
        "time": now,  # Unix seconds (float), wall clock
        "rank": _dist.rank(),
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "job_id": _env.get_str(_env.JOB_ID),
    }
    if total_steps is not None:
        record["total_steps"] = int(total_steps)
    if goodput is not None:
        record["goodput"] = dict(goodput)
    data = (json.dumps(record) + "\n").encode()
    _fs.write_atomic(path, lambda f: f.write(data), durable=False)
    _last_progress_write = now
    return True

