"""The daemon's client against a real ``gangway serve`` on simulated GPUs (the binary from
``$GANGWAY_SERVE_BIN``, else ``target/debug/gangway`` of the checkout, which ``cargo build`` makes
with the daemon in it)."""

import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
import unittest
from pathlib import Path

from gangway import Client, GangwayError, Refused, Unreachable
from gangway.client import Node

def gangway_binary() -> str:
    given = os.environ.get("GANGWAY_SERVE_BIN")
    if given:
        return given
    # The checkout this file is in.
    for root in Path(__file__).resolve().parents:
        candidate = root / "target" / "debug" / "gangway"
        if candidate.is_file():
            return str(candidate)
    raise unittest.SkipTest("no gangway binary with serve: run cargo build or set GANGWAY_SERVE_BIN")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Daemon:
    """``gangway serve`` on 16 simulated GPUs (two servers of 4 V100s, one of 8 K80s), FIFO."""

    def __init__(self, listen: str) -> None:
        self.dir = tempfile.mkdtemp()
        self.journal = Path(self.dir) / "journal"
        self.process = subprocess.Popen(
            [gangway_binary(), "serve", "--cluster", "v100=2x4,k80=1x8", "--policy", "fifo",
             "--round", "1", "--time-scale", "20", "--listen", listen, "--journal", str(self.journal)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    def wait(self, client: Client) -> None:
        deadline = time.monotonic() + 30
        while True:
            try:
                client.stats()
                return
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.02)

    def stop(self) -> None:
        self.process.kill()
        self.process.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


class NodeFromJson(unittest.TestCase):
    def test_gpus_whose_health_is_no_longer_checked_are_read_with_why(self) -> None:
        raw = {"name": "server-0", "gpu_type": "v100", "gpus": [0, 1], "free": 2, "jobs": []}
        self.assertEqual(Node.from_json(raw).unwatched, {}, "none listed, none unwatched")
        why = "its health probe failed (it panicked) and is not called again"
        node = Node.from_json({**raw, "unwatched": [[1, why]]})
        self.assertEqual(node.unwatched, {1: why})
        self.assertEqual(node.out_of_service, {}, "unwatched is not out of service")


class OverTcp(unittest.TestCase):
    @classmethod
    def setUpClass(cls) -> None:
        port = free_port()
        cls.daemon = Daemon(f"127.0.0.1:{port}")
        deadline = time.monotonic() + 30
        token = cls.daemon.journal / "api-token"
        while not token.is_file():
            if time.monotonic() > deadline:
                raise AssertionError("gangway serve wrote no token")
            time.sleep(0.02)
        cls.client = Client(f"127.0.0.1:{port}", token_file=token)
        cls.daemon.wait(cls.client)

    @classmethod
    def tearDownClass(cls) -> None:
        cls.daemon.stop()

    def wait_for(self, job: int, phase: str) -> None:
        deadline = time.monotonic() + 20
        while self.client.job(job).phase != phase:
            self.assertLess(time.monotonic(), deadline, f"job {job} never {phase}")
            time.sleep(0.02)

    def test_a_job_submitted_runs_on_the_gpus_the_servers_show(self) -> None:
        job = self.client.submit(gpus=4, work=20_000, tenant="alice", job_type="default")
        self.wait_for(job, "running")
        seen = self.client.job(job)
        self.assertEqual((seen.tenant, seen.gpus, len(seen.placement)), ("alice", 4, 4))
        on_nodes = {g for n in self.client.nodes() if job in n.jobs for g in n.gpus}
        self.assertTrue(set(seen.placement) <= on_nodes)
        self.assertIn(job, [j.id for j in self.client.jobs(["running"])])
        self.client.cancel(job)
        self.wait_for(job, "cancelled")

    def test_the_api_s_refusals_are_exceptions_naming_the_field(self) -> None:
        with self.assertRaises(GangwayError):
            self.client.submit(gpus=0, work=60)
        with self.assertRaises(Refused) as caught:
            self.client.submit(gpus=0, work=60)
        self.assertEqual(caught.exception.status, 422)
        self.assertIn("gpus", caught.exception.message)
        with self.assertRaises(Refused) as caught:
            self.client.submit(gpus=1, work=60, tenat="typo")
        self.assertEqual(caught.exception.status, 400)
        self.assertIn("tenat", caught.exception.message)
        with self.assertRaises(Refused) as caught:
            self.client.job(999_999)
        self.assertEqual(caught.exception.status, 404)
        with self.assertRaises(Refused) as caught:
            self.client.cordon([10_000])
        self.assertEqual(caught.exception.status, 422)

    def test_a_retried_submission_with_its_key_is_one_job(self) -> None:
        first = self.client.submit(gpus=1, work=60, idempotency_key="python-retry")
        again = self.client.submit(gpus=1, work=60, idempotency_key="python-retry")
        self.assertEqual(first, again)

    def test_pages_are_followed_and_a_limit_is_kept(self) -> None:
        ids = [self.client.submit(gpus=1, work=30) for _ in range(5)]
        every = [j.id for j in self.client.jobs()]
        self.assertTrue(set(ids) <= set(every))
        self.assertEqual(every, sorted(every))
        self.assertEqual(len(self.client.jobs(limit=2)), 2)
        after = self.client.jobs(after=ids[1], limit=2)
        self.assertEqual([j.id for j in after], sorted(j for j in every if j > ids[1])[:2])

    def test_cordoned_gpus_show_their_reason(self) -> None:
        self.client.cordon([15])
        try:
            reasons = {g: why for n in self.client.nodes() for g, why in n.out_of_service.items()}
            self.assertEqual(reasons.get(15), "cordoned")
        finally:
            self.client.uncordon([15])
        reasons = {g for n in self.client.nodes() for g in n.out_of_service}
        self.assertNotIn(15, reasons)

    def test_events_arrive_as_jobs_move(self) -> None:
        got = []

        def listen() -> None:
            for event in self.client.events(timeout=20):
                got.append(event)
                if event.to_phase == "running":
                    return

        listener = threading.Thread(target=listen)
        listener.start()
        time.sleep(0.3)
        job = self.client.submit(gpus=1, work=20_000)
        listener.join(20)
        self.assertFalse(listener.is_alive(), "no move heard")
        self.assertIn(job, [e.job for e in got])
        self.client.cancel(job)

    def test_the_queue_is_in_the_policys_order(self) -> None:
        self.assertIsInstance(self.client.queue(), list)

    def test_a_wrong_token_or_no_daemon_is_said(self) -> None:
        wrong = Client(self.client.address, token="ab" * 32)
        with self.assertRaises(Refused) as caught:
            wrong.stats()
        self.assertEqual(caught.exception.status, 401)
        with self.assertRaises(Unreachable):
            Client(f"127.0.0.1:{free_port()}", token="ab" * 32, timeout=2).stats()


class OverUnixSocket(unittest.TestCase):
    def test_a_socket_needs_no_token(self) -> None:
        path = Path(tempfile.mkdtemp()) / "gangway.sock"
        daemon = Daemon(f"unix:{path}")
        try:
            client = Client(f"unix:{path}")
            daemon.wait(client)
            job = client.submit(gpus=2, work=60, tenant="bob")
            self.assertEqual(client.job(job).tenant, "bob")
        finally:
            daemon.stop()
            shutil.rmtree(path.parent, ignore_errors=True)


if __name__ == "__main__":
    unittest.main()
