import json
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import unittest

import support

from gangway_worker import control, report_progress, should_stop


def run_python(code, **env):
    """Run ``code`` in a fresh interpreter (signal handlers must not leak into the test process)."""
    full_env = support.clean_environ()
    full_env.update(env, PYTHONPATH=support.PYTHON_DIR, PYTHONDONTWRITEBYTECODE="1")
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=full_env,
                          capture_output=True, text=True, timeout=60)


class ControlStateMixin:
    """Save and restore the module's global state and the process's SIGTERM disposition."""

    def setUp(self):
        self._saved_handler = signal.getsignal(signal.SIGTERM)
        self._saved_state = (control._sigterm_received, control._handler_installed,
                             control._previous_handler, control._last_progress_write)
        control._sigterm_received = False
        control._last_progress_write = 0.0
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)

    def tearDown(self):
        signal.signal(signal.SIGTERM, self._saved_handler)
        (control._sigterm_received, control._handler_installed,
         control._previous_handler, control._last_progress_write) = self._saved_state


class ExitNowTest(unittest.TestCase):
    def test_it_flushes_what_was_written_and_skips_the_interpreter_teardown(self):
        with tempfile.TemporaryDirectory() as tmp:
            ran_atexit = os.path.join(tmp, "atexit-ran")
            log = os.path.join(tmp, "worker.log")
            result = run_python(f"""
                import atexit, logging, sys
                import gangway_worker as gw
                atexit.register(lambda: open({ran_atexit!r}, "w").close())
                logging.basicConfig(filename={log!r}, level=logging.INFO)
                logging.info("saved step 7")
                sys.stdout.write("no newline, still buffered")  # a pipe: block-buffered
                sys.stderr.write("on stderr")
                gw.exit_now(3)
                print("never reached")
            """)
            self.assertEqual(result.returncode, 3, result.stderr)
            self.assertEqual(result.stdout, "no newline, still buffered")
            self.assertIn("on stderr", result.stderr)
            with open(log) as f:
                self.assertIn("saved step 7", f.read())
            self.assertFalse(os.path.exists(ran_atexit), "atexit handlers must not run")


class StopFileTest(ControlStateMixin, unittest.TestCase):
    def test_stop_file_appears_and_disappears(self):
        stop = os.path.join(self.tmp.name, "stop")
        with support.patched_env(GANGWAY_STOP_FILE=stop):
            self.assertFalse(should_stop())
            open(stop, "w").close()
            self.assertTrue(should_stop())
            os.unlink(stop)
            self.assertFalse(should_stop())

    def test_no_stop_file_configured(self):
        with support.patched_env():
            self.assertFalse(should_stop())

    def test_sigterm_flag_in_process(self):
        with support.patched_env():
            self.assertFalse(should_stop())  # also installs the handler
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.05)  # Python runs the handler at the next bytecode boundary
            self.assertTrue(should_stop())


class SigtermTest(unittest.TestCase):
    def test_sigterm_becomes_a_stop_request_and_does_not_kill(self):
        result = run_python("""
            import os, signal, time
            import gangway_worker as gw
            gw.install_sigterm_handler()
            print(gw.should_stop())
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.05)
            print(gw.should_stop())
            print(gw.should_stop())  # stays set: the stop request is not consumed by reading it
        """)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(result.stdout.split(), ["False", "True", "True"])

    def test_first_should_stop_installs_the_handler(self):
        result = run_python("""
            import os, signal, time
            import gangway_worker as gw
            gw.should_stop()
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.05)
            print(gw.should_stop())
        """)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(result.stdout.split(), ["True"])

    def test_without_the_handler_sigterm_kills(self):
        # Control experiment: proves the two tests above exercise the handler, not luck.
        result = run_python("""
            import os, signal, time
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(1)
            print("survived")
        """)
        self.assertEqual(result.returncode, -signal.SIGTERM)
        self.assertNotIn("survived", result.stdout)

    def test_previous_python_handler_is_chained(self):
        result = run_python("""
            import os, signal, time
            signal.signal(signal.SIGTERM, lambda s, f: print("previous handler ran"))
            import gangway_worker as gw
            gw.install_sigterm_handler()
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.05)
            print(gw.should_stop())
        """)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(result.stdout.splitlines(), ["previous handler ran", "True"])

    def test_importable_and_usable_without_importing_torch(self):
        tmp = tempfile.TemporaryDirectory()
        self.addCleanup(tmp.cleanup)
        result = run_python("""
            import sys
            import gangway_worker as gw
            gw.plan(global_batch=8)
            gw.should_stop()
            gw.report_progress(1)
            print("torch" in sys.modules)
        """, GANGWAY_PROGRESS_FILE=os.path.join(tmp.name, "progress.json"))
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(result.stdout.split(), ["False"])


class ProgressTest(ControlStateMixin, unittest.TestCase):
    def read(self, path):
        with open(path) as f:
            return json.load(f)

    def test_writes_step_and_time(self):
        path = os.path.join(self.tmp.name, "progress.json")
        with support.patched_env(GANGWAY_PROGRESS_FILE=path, GANGWAY_JOB_ID="j1", RANK=4, LOCAL_RANK=0):
            before = time.time()
            self.assertTrue(report_progress(7))
            after = time.time()
            record = self.read(path)
            self.assertEqual(record["step"], 7)
            self.assertTrue(before <= record["time"] <= after)
            self.assertEqual((record["job_id"], record["rank"], record["pid"]), ("j1", 4, os.getpid()))
            self.assertNotIn("total_steps", record)
            self.assertTrue(report_progress(8, total_steps=40))
            self.assertEqual((self.read(path)["step"], self.read(path)["total_steps"]), (8, 40))
        # Only the file itself: no temp file left behind.
        self.assertEqual(os.listdir(self.tmp.name), ["progress.json"])

    def test_only_local_rank_zero_writes(self):
        path = os.path.join(self.tmp.name, "progress.json")
        with support.patched_env(GANGWAY_PROGRESS_FILE=path, RANK=1, LOCAL_RANK=1):
            self.assertFalse(report_progress(3))
        self.assertFalse(os.path.exists(path))

    def test_unconfigured_is_a_no_op(self):
        with support.patched_env():
            self.assertFalse(report_progress(3))

    def test_min_interval_throttles(self):
        path = os.path.join(self.tmp.name, "progress.json")
        with support.patched_env(GANGWAY_PROGRESS_FILE=path):
            self.assertTrue(report_progress(1, min_interval=3600))
            self.assertFalse(report_progress(2, min_interval=3600))
            self.assertEqual(self.read(path)["step"], 1)
            self.assertTrue(report_progress(3))  # no interval: always writes
            self.assertEqual(self.read(path)["step"], 3)

    def test_concurrent_reader_never_sees_a_partial_file(self):
        path = os.path.join(self.tmp.name, "progress.json")
        bad, done = [], threading.Event()

        def reader():
            while not done.is_set():
                try:
                    with open(path) as f:
                        text = f.read()
                except FileNotFoundError:
                    continue
                try:
                    json.loads(text)
                except ValueError:
                    bad.append(text)

        with support.patched_env(GANGWAY_PROGRESS_FILE=path):
            t = threading.Thread(target=reader)
            t.start()
            try:
                for step in range(2000):
                    report_progress(step)
            finally:
                done.set()
                t.join()
        self.assertEqual(bad, [])
        self.assertEqual(self.read(path)["step"], 1999)


if __name__ == "__main__":
    unittest.main()
