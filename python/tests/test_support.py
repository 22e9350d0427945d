"""The tests' own rule: a test that needs a missing component skips, except in CI, where it fails."""

import os
import unittest
from unittest import mock

import support


def _run(case):
    result = unittest.TestResult()
    unittest.defaultTestLoader.loadTestsFromTestCase(case).run(result)
    return result


class NeedsTest(unittest.TestCase):
    def make(self, available):
        @support.needs(available, "the widget is not installed")
        class Case(unittest.TestCase):
            def test_it(self):
                pass

        return Case

    def test_a_missing_component_skips_outside_ci(self):
        with mock.patch.dict(os.environ, {"CI": ""}):
            result = _run(self.make(False))
        self.assertEqual((len(result.skipped), len(result.errors), len(result.failures)), (1, 0, 0))

    def test_a_missing_component_fails_in_ci(self):
        with mock.patch.dict(os.environ, {"CI": "true"}):
            result = _run(self.make(False))
        self.assertEqual(len(result.skipped), 0)
        self.assertEqual(len(result.errors) + len(result.failures), 1)
        self.assertIn("the widget is not installed", str(result.errors + result.failures))

    def test_a_present_component_runs(self):
        with mock.patch.dict(os.environ, {"CI": "true"}):
            result = _run(self.make(True))
        self.assertEqual((result.testsRun, len(result.skipped), len(result.errors)), (1, 0, 0))

    def test_methods_are_decorated_too(self):
        with mock.patch.dict(os.environ, {"CI": "1"}):

            class Case(unittest.TestCase):
                @support.needs(False, "no widget")
                def test_it(self):
                    pass

            self.assertEqual(len(_run(Case).failures), 1)


if __name__ == "__main__":
    unittest.main()
