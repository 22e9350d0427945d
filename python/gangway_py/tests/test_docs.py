"""The examples in the package's docstrings run and say what they show."""

from __future__ import annotations

import doctest
import unittest

import gangway


class Docstrings(unittest.TestCase):
    def test_the_examples_in_the_docstrings_hold(self) -> None:
        result = doctest.testmod(gangway, extraglobs={"gangway": gangway}, verbose=False)
        self.assertGreater(result.attempted, 5)
        self.assertEqual(result.failed, 0)


if __name__ == "__main__":
    unittest.main()
