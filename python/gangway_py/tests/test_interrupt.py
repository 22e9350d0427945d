"""Ctrl-C stops a simulation at its next event: the call raises KeyboardInterrupt instead of running
to the end (a policy written in Python counts the rounds it is asked, slowly)."""

from __future__ import annotations

import os
import signal
import threading
import time
import unittest
from typing import List, Sequence

import gangway
from gangway import Grant, Round

TRACE = "synthetic:jobs=200,seed=1,rate=4"
CLUSTER = "v100=8,k80=8"


class Counted:
    """Grants nothing to new jobs beyond what FIFO would, slowly: 5 ms a round, counted."""

    rounds: List[int] = [0]

    def allocate(self, round: Round) -> Sequence[Grant]:
        Counted.rounds[0] += 1
        time.sleep(0.005)
        free = list(round.capacity)
        grants = []
        for job in sorted(round.jobs, key=lambda j: j.arrival):
            fits = [t for t, f in enumerate(free) if f >= job.gpus and job.rates[t] > 0]
            if fits:
                free[fits[0]] -= job.gpus
                grants.append(Grant(job.id, fits[0], job.gpus))
        return grants


gangway.register_policy("test_py_counted", Counted)


class CtrlC(unittest.TestCase):
    def test_ctrl_c_stops_the_run_before_its_end(self) -> None:
        Counted.rounds[0] = 0
        gangway.simulate(TRACE, cluster=CLUSTER, policies=["test_py_counted"])
        whole = Counted.rounds[0]
        self.assertGreater(whole, 100, "a run long enough to interrupt")

        Counted.rounds[0] = 0
        # Python makes SIGINT a KeyboardInterrupt only where it was not ignored when it started (a
        # suite run in the background by a shell inherits it ignored): as in a terminal, here.
        inherited = signal.signal(signal.SIGINT, signal.default_int_handler)
        self.addCleanup(signal.signal, signal.SIGINT, inherited)
        timer = threading.Timer(0.2, lambda: os.kill(os.getpid(), signal.SIGINT))
        timer.start()
        with self.assertRaises(KeyboardInterrupt):
            gangway.simulate(TRACE, cluster=CLUSTER, policies=["test_py_counted"])
        timer.join()
        self.assertLess(Counted.rounds[0], whole // 2, "stopped early, not at its end")


if __name__ == "__main__":
    unittest.main()
