import random
import time
import unittest

import support  # noqa: F401  (puts the package on sys.path)

from gangway_worker import GoodputMeter
from gangway_worker.goodput import _covered, noise_estimates


def mean(vectors):
    n = len(vectors)
    return [sum(column) / n for column in zip(*vectors)]


def sqr(v):
    return sum(x * x for x in v)


class NoiseScaleTest(unittest.TestCase):
    def test_the_estimates_recover_a_known_gradient_and_noise(self):
        # Per-sample gradients G + N(0, sigma^2 I) in 8 dimensions: |G|^2 = 4, tr(Sigma) = 8 sigma^2.
        rng = random.Random(7)
        true_g, sigma, dims = [1.0, -1.0, 1.0, -1.0, 0.0, 0.0, 0.0, 0.0], 1.5, 8
        small, replicas = 16, 4
        sqrs, vars_ = [], []
        for _ in range(400):
            replica_grads = [
                mean([[g + rng.gauss(0.0, sigma) for g in true_g] for _ in range(small)])
                for _ in range(replicas)
            ]
            reduced = mean(replica_grads)
            local = sum(sqr(g) for g in replica_grads) / replicas  # as the meter averages them
            s, v = noise_estimates(local, sqr(reduced), small, small * replicas)
            sqrs.append(s)
            vars_.append(v)
        self.assertAlmostEqual(sum(sqrs) / len(sqrs), 4.0, delta=0.2)
        self.assertAlmostEqual(sum(vars_) / len(vars_), dims * sigma**2, delta=0.05 * dims * sigma**2)

    def test_batches_must_differ(self):
        with self.assertRaises(ValueError):
            noise_estimates(1.0, 1.0, 8, 8)


class MeterTest(unittest.TestCase):
    def test_in_flight_time_counts_overlaps_once(self):
        self.assertEqual(_covered([]), 0.0)
        self.assertAlmostEqual(_covered([(0.0, 1.0), (0.5, 2.0), (3.0, 3.5)]), 2.5)
        self.assertAlmostEqual(_covered([(1.0, 4.0), (2.0, 3.0)]), 3.0)

    def test_one_process_reports_its_step_time_and_batch_without_noise(self):
        meter = GoodputMeter(smoothing=0.5)
        self.assertIsNone(meter.summary())
        for _ in range(3):
            with meter.step(replica_batch=32, replicas=1, accum_steps=2):
                time.sleep(0.01)
        got = meter.summary()
        self.assertEqual(got["steps"], 3)
        self.assertEqual((got["replica_batch"], got["replicas"], got["accum_steps"]), (32, 1, 2))
        self.assertGreaterEqual(got["step_seconds"], 0.01)
        self.assertEqual(got["sync_seconds"], 0.0)
        self.assertEqual(got["compute_seconds"], got["step_seconds"])
        self.assertNotIn("noise_scale", got)

    def test_the_average_is_bias_corrected_and_smoothed(self):
        meter = GoodputMeter(smoothing=0.5)
        meter._add("x", 10.0)
        self.assertAlmostEqual(meter._value("x"), 10.0)  # not 5: the history starts empty
        meter._add("x", 20.0)
        self.assertAlmostEqual(meter._value("x"), (0.25 * 10 + 0.5 * 20) / 0.75)

    def test_bad_arguments_are_refused(self):
        with self.assertRaises(ValueError):
            GoodputMeter(smoothing=1.0)
        meter = GoodputMeter()
        with self.assertRaises(ValueError):
            with meter.step(replica_batch=0):
                pass


if __name__ == "__main__":
    unittest.main()
