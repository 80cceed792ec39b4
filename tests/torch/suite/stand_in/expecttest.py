# SPDX-License-Identifier: BSD-3-Clause
"""Stand-in for the expecttest package (not in Debian 12), with the two names torch's test
utilities use: TestCase (a unittest.TestCase) and ACCEPT (never accept new expected output)."""
import unittest

ACCEPT = False


class TestCase(unittest.TestCase):
    pass
