"""End to end: examples/toy_ddp.py under ``torchrun --standalone --nproc-per-node=2``.

An uninterrupted run and a run that is stopped midway and resumed must end with bit-identical
parameters. Needs torch: runs with the current interpreter if it has torch, else with the one
named by GANGWAY_TEST_PYTHON (e.g. a virtualenv's python); skipped otherwise. About a minute.
"""

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import unittest

import support

TOY = os.path.join(support.PYTHON_DIR, "examples", "toy_ddp.py")
PYTHON = sys.executable if support.HAVE_TORCH else os.environ.get("GANGWAY_TEST_PYTHON")
STEPS, SAVE_EVERY = 60, 25


@support.needs(PYTHON, "torch is not installed (set GANGWAY_TEST_PYTHON to a python that has it)")
class TorchrunEndToEndTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls._tmp = tempfile.TemporaryDirectory()
        cls.tmp = cls._tmp.name
        # The reference: one uninterrupted run.
        proc, log = cls.start("reference")
        try:
            rc = proc.wait(timeout=300)
        finally:
            cls.terminate(proc)
        assert rc == 0, f"reference run failed with {rc}:\n{cls.read(log)}"
        cls.reference = cls.read(os.path.join(cls.tmp, "reference", "out.json"))

    @classmethod
    def tearDownClass(cls):
        cls._tmp.cleanup()

    @classmethod
    def start(cls, name, *extra_args, resume_from=None):
        """Start torchrun for run ``name`` (its own checkpoint dir, stop and progress files)."""
        run_dir = os.path.join(cls.tmp, name)
        os.makedirs(run_dir, exist_ok=True)
        env = support.clean_environ()
        env.update(
            GANGWAY_JOB_ID=name,
            GANGWAY_CHECKPOINT_DIR=os.path.join(run_dir, "ckpt"),
            GANGWAY_STOP_FILE=os.path.join(run_dir, "stop"),
            GANGWAY_PROGRESS_FILE=os.path.join(run_dir, "progress.json"),
            PYTHONDONTWRITEBYTECODE="1",
        )
        if resume_from:
            env["GANGWAY_RESUME_FROM"] = resume_from
        log_path = os.path.join(run_dir, f"log-{time.monotonic_ns()}.txt")
        # --log-dir in the run's folder: else torchrun leaves a /tmp/torchelastic_* folder per run.
        cmd = [PYTHON, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
               "--log-dir", os.path.join(run_dir, "torchrun-logs"), TOY,
               "--steps", str(STEPS), "--save-every", str(SAVE_EVERY),
               "--out", os.path.join(run_dir, "out.json"), *extra_args]
        with open(log_path, "w") as log:
            # Own session, so that cleanup can signal torchrun without touching the test runner.
            proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        return proc, log_path

    @staticmethod
    def terminate(proc):
        """Cleanup for a failed test. SIGTERM, not SIGKILL: torchrun's workers live in their own
        sessions, and only the agent's own shutdown (on SIGTERM) stops them; SIGKILL orphans them."""
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=40)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    @staticmethod
    def read(path):
        with open(path) as f:
            return json.load(f) if path.endswith(".json") else f.read()

    def wait_for_step(self, proc, name, step, timeout=120):
        path = os.path.join(self.tmp, name, "progress.json")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if self.read(path)["step"] >= step:
                    return
            except (FileNotFoundError, ValueError):
                pass
            if proc.poll() is not None:
                self.fail(f"{name}: exited with {proc.returncode} before step {step}")
            time.sleep(0.02)
        self.fail(f"{name}: no progress to step {step} within {timeout}s")

    def interrupt_then_resume(self, name, interrupt):
        """Run with a slow step, interrupt after step 8, check the saved state, resume, compare."""
        proc, log = self.start(name, "--step-sleep", "0.05")
        self.addCleanup(self.terminate, proc)
        self.wait_for_step(proc, name, 8)
        t0 = time.monotonic()
        interrupt(proc)
        rc = proc.wait(timeout=120)
        stop_seconds = time.monotonic() - t0
        output = self.read(log)

        ckpt_dir = os.path.join(self.tmp, name, "ckpt")
        manifest = self.read(os.path.join(ckpt_dir, "manifest.json"))
        stopped_at = manifest["checkpoints"][-1]["step"]
        self.assertIn(f"stop requested: saved step {stopped_at}", output)
        self.assertTrue(8 <= stopped_at < STEPS, stopped_at)
        self.assertFalse(os.path.exists(os.path.join(self.tmp, name, "out.json")), "it ran to completion")

        # Resume from the newest checkpoint named explicitly, as the launcher does.
        stop_file = os.path.join(self.tmp, name, "stop")
        if os.path.exists(stop_file):
            os.unlink(stop_file)  # the launcher must remove it before relaunching
        proc2, log2 = self.start(name, resume_from=os.path.join(ckpt_dir, manifest["checkpoints"][-1]["file"]))
        self.addCleanup(self.terminate, proc2)
        self.assertEqual(proc2.wait(timeout=300), 0, self.read(log2))
        self.assertIn(f"resumed from step {stopped_at}", self.read(log2))

        result = self.read(os.path.join(self.tmp, name, "out.json"))
        self.assertEqual(result["params"], self.reference["params"])  # float.hex strings: bit for bit
        self.assertEqual(result["final_loss"], self.reference["final_loss"])
        return rc, stopped_at, stop_seconds

    def test_the_progress_file_carries_what_goodput_needs(self):
        progress = self.read(os.path.join(self.tmp, "reference", "progress.json"))
        self.assertEqual(progress["step"], STEPS)
        goodput = progress["goodput"]
        self.assertEqual(goodput["steps"], STEPS)
        self.assertEqual((goodput["replicas"], goodput["replica_batch"]), (2, 8))
        self.assertGreater(goodput["sync_seconds"], 0.0)
        self.assertLessEqual(goodput["sync_seconds"], goodput["step_seconds"])
        self.assertAlmostEqual(goodput["compute_seconds"] + goodput["sync_seconds"], goodput["step_seconds"])
        # Dropout and label noise: the gradient has a variance, and the estimate sees it.
        self.assertGreater(goodput["grad_var"], 0.0)
        self.assertGreater(goodput["noise_scale"], 0.0)

    def test_stop_file_then_resume_is_bit_identical(self):
        def touch_stop_file(proc):
            open(os.path.join(self.tmp, "stopfile", "stop"), "w").close()

        rc, _, _ = self.interrupt_then_resume("stopfile", touch_stop_file)
        # Cooperative stop: every worker exits 0, so torchrun exits 0 too.
        self.assertEqual(rc, 0)

    def test_sigterm_to_torchrun_then_resume_is_bit_identical(self):
        # torchrun forwards SIGTERM to the workers and waits (--shutdown-timeout, 30 s by default)
        # for them; they save at the next step boundary and exit 0. torchrun itself still exits
        # non-zero because it was signalled, so the launcher must remember that it asked.
        rc, _, stop_seconds = self.interrupt_then_resume("sigterm", lambda proc: proc.send_signal(signal.SIGTERM))
        self.assertNotEqual(rc, 0)
        self.assertLess(stop_seconds, 30)


if __name__ == "__main__":
    unittest.main()
