"""The import path of grader 0.1, kept for one release: an existing course's hidden suite imports it. New code
imports grader.judge.exam."""
import sys

from grader.judge import exam

sys.modules[__name__] = exam
