"""A control plane started from Python runs a policy written in Python: jobs submitted through its
API run where the policy says; an exception in the policy fails its round only, and the daemon goes
on serving with its running jobs running."""

from __future__ import annotations

import shutil
import socket
import tempfile
import time
import unittest
from typing import List, Sequence

import gangway
from gangway import Client, Grant, Round


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class SmallestFirst:
    """Running jobs keep their GPUs; waiting jobs go smallest gang first, on the first type with room."""

    def allocate(self, round: Round) -> Sequence[Grant]:
        free = list(round.capacity)
        grants: List[Grant] = []
        for job in round.jobs:
            if job.running_on is not None:
                free[job.running_on] -= job.running_gpus
                grants.append(Grant(job.id, job.running_on, job.running_gpus))
        for job in sorted((j for j in round.jobs if j.running_on is None), key=lambda j: (j.gpus, j.id)):
            fits = [t for t, f in enumerate(free) if f >= job.gpus and job.rates[t] > 0]
            if fits:
                free[fits[0]] -= job.gpus
                grants.append(Grant(job.id, fits[0], job.gpus))
        return grants


class BreaksOnceAJobWaits(SmallestFirst):
    """SmallestFirst, until a job asks for 3 GPUs: then every round raises."""

    def allocate(self, round: Round) -> Sequence[Grant]:
        if any(j.gpus == 3 for j in round.jobs):
            raise ValueError("three GPUs? not today")
        return super().allocate(round)


gangway.register_policy("test_py_smallest_first", SmallestFirst)
gangway.register_policy("test_py_breaks", BreaksOnceAJobWaits)


class ServedFromPython(unittest.TestCase):
    def setUp(self) -> None:
        self.dir = tempfile.mkdtemp()

    def tearDown(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)

    def start(self, policy: str) -> gangway.Daemon:
        return gangway.serve(
            policy=policy, cluster="v100=4", listen=f"127.0.0.1:{free_port()}",
            journal=f"{self.dir}/journal", round=1, time_scale=20,
        )

    def wait(self, what: str, done) -> None:  # type: ignore[no-untyped-def]
        deadline = time.monotonic() + 20
        while not done():
            self.assertLess(time.monotonic(), deadline, what)
            time.sleep(0.02)

    def test_a_python_policy_schedules_the_daemons_jobs(self) -> None:
        with self.start("test_py_smallest_first") as daemon:
            client = Client(daemon.address, token_file=daemon.token_file)
            big = client.submit(gpus=4, work=20_000)
            self.wait("the 4-GPU job runs", lambda: client.job(big).phase == "running")
            # Behind it, a 3-GPU job and then a 1-GPU job wait; smallest first puts the 1-GPU one
            # ahead once the 4-GPU job is cancelled.
            three = client.submit(gpus=3, work=20_000)
            one = client.submit(gpus=1, work=20_000)
            client.cancel(big)
            self.wait("both run", lambda: {client.job(three).phase, client.job(one).phase} == {"running"})
            self.assertEqual(client.stats()["round_failures"], 0)

    def test_an_exception_in_the_policy_fails_its_round_and_the_daemon_goes_on(self) -> None:
        with self.start("test_py_breaks") as daemon:
            client = Client(daemon.address, token_file=daemon.token_file)
            running = client.submit(gpus=1, work=20_000)
            self.wait("the 1-GPU job runs", lambda: client.job(running).phase == "running")
            waiting = client.submit(gpus=3, work=600)
            self.wait("a round fails", lambda: client.stats()["round_failures"] > 0)
            failure = client.stats()["last_round_failure"]
            self.assertIn("three GPUs? not today", failure["message"])
            self.assertIn("Traceback", failure["message"])
            self.assertIn("ValueError", failure["message"])
            # Still serving; the running job keeps its GPU; the one asking for 3 waits.
            self.assertEqual(client.job(running).phase, "running")
            self.assertEqual(client.job(waiting).phase, "pending")
            client.cancel(waiting)
            stats = client.stats()
            failures, rounds = stats["round_failures"], stats["rounds"]
            self.wait("more rounds", lambda: client.stats()["rounds"] > rounds + 3)
            # At most the round under way when the job left failed after it.
            self.assertLessEqual(client.stats()["round_failures"], failures + 1, "the next rounds succeed")


if __name__ == "__main__":
    unittest.main()
