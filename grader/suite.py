"""The import path of grader 0.1, kept for one release: an existing course's hidden suite imports it. New code
imports grader.judge.suite."""
import sys

from grader.judge import suite

sys.modules[__name__] = suite
