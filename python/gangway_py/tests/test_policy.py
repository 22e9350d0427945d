"""Policies written in Python: registered under a name, they run in the simulator beside the
built-in ones, and their exceptions stop the run with the Python traceback."""

from __future__ import annotations

import unittest
from typing import Sequence

import gangway
from gangway import Grant, Round

TRACE = "synthetic:jobs=200,seed=1,rate=4"
CLUSTER = "v100=8,k80=8"


class Fifo:
    """gangway's `fifo`, in Python: running jobs keep their GPUs; waiting jobs, in arrival
    order, take the first GPU type with room; the first that does not fit blocks the rest."""

    changes_with_time = False

    def allocate(self, round: Round) -> Sequence[Grant]:
        # A simulation pauses no job (only a live control plane does, after failed starts).
        assert round.paused == [], round.paused
        free = list(round.capacity)
        grants = []
        for job in round.jobs:
            if job.running_on is not None:
                free[job.running_on] = max(0, free[job.running_on] - job.running_gpus)
                grants.append(Grant(job.id, job.running_on, job.running_gpus))
        for job in round.jobs:
            if job.running_on is not None:
                continue
            fits = [t for t, f in enumerate(free) if f >= job.gpus and job.rates[t] > 0]
            if not fits:
                break
            free[fits[0]] -= job.gpus
            grants.append(Grant(job.id, round.gpu_types[fits[0]], job.gpus))  # by name
            if not any(free):
                break
        return grants


class FailsInRound:
    """Grants nothing, and divides by zero at its third round."""

    def __init__(self) -> None:
        self.rounds = 0

    def allocate(self, round: Round) -> Sequence[Grant]:
        self.rounds += 1
        if self.rounds == 3:
            return [Grant(0, 0, 1 // (self.rounds - 3))]
        return []


def _failing_factory() -> gangway.Policy:
    raise RuntimeError("no policy today")


gangway.register_policy("test_py_fifo", Fifo, "FIFO, in Python")
gangway.register_policy("test_py_fails", FailsInRound)
gangway.register_policy("test_py_factory_fails", _failing_factory)


class PythonPolicies(unittest.TestCase):
    def test_a_python_fifo_decides_as_the_rust_fifo(self) -> None:
        results = gangway.simulate(TRACE, cluster=CLUSTER, policies=["test_py_fifo", "fifo"])
        mine, theirs = results["test_py_fifo"], results["fifo"]
        self.assertEqual(mine.jobs, theirs.jobs, "every job's record")
        a, b = mine.summary.as_dict(), theirs.summary.as_dict()
        for key in a:
            if key not in ("policy", "wall_s"):
                self.assertEqual(a[key], b[key], key)

    def test_it_runs_beside_the_builtins_and_is_listed(self) -> None:
        results = gangway.simulate(
            TRACE, cluster=CLUSTER, policies=["tiresias", "test_py_fifo", "las"]
        )
        self.assertEqual([r.policy for r in results], ["tiresias", "test_py_fifo", "las"])
        self.assertEqual(dict(gangway.builtin_policies())["test_py_fifo"], "FIFO, in Python")

    def test_an_exception_stops_the_run_with_its_traceback(self) -> None:
        with self.assertRaises(gangway.PolicyFailed) as e:
            gangway.simulate(TRACE, cluster=CLUSTER, policies=["fifo", "test_py_fails"])
        message = str(e.exception)
        self.assertIn("policy `test_py_fails` raised an exception", message)
        self.assertIn("Traceback (most recent call last)", message)
        self.assertIn("in allocate", message)
        self.assertIn("ZeroDivisionError", message)
        self.assertIsInstance(e.exception.__cause__, ZeroDivisionError)
        self.assertIsInstance(e.exception, gangway.GangwayError)

    def test_an_exception_in_its_factory_is_reported_too(self) -> None:
        with self.assertRaises(gangway.PolicyFailed) as e:
            gangway.simulate(TRACE, cluster=CLUSTER, policies=["test_py_factory_fails"])
        self.assertIn("no policy today", str(e.exception))
        self.assertIsInstance(e.exception.__cause__, RuntimeError)

    def test_a_bad_grant_is_an_exception_of_the_policy(self) -> None:
        class BadType:
            def allocate(self, round: Round) -> Sequence[Grant]:
                return [Grant(job.id, "tpu", job.gpus) for job in round.jobs]

        gangway.register_policy("test_py_bad_type", BadType)
        with self.assertRaises(gangway.PolicyFailed) as e:
            gangway.simulate(TRACE, cluster=CLUSTER, policies=["test_py_bad_type"])
        self.assertIn("no GPU type `tpu` in the cluster (v100, k80)", str(e.exception))

    def test_a_name_taken_is_refused(self) -> None:
        for name in ["fifo", "las", "test_py_fifo"]:
            with self.subTest(name=name), self.assertRaises(gangway.BadPolicy) as e:
                gangway.register_policy(name, Fifo)
            self.assertIn(f"`{name}` is already registered", str(e.exception))
        with self.assertRaises(gangway.BadPolicy):
            gangway.register_policy("has space", Fifo)


if __name__ == "__main__":
    unittest.main()
