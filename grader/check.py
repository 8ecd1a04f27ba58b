"""The import path of grader 0.1, kept for one release: the released notebook's self-check imports it. New code
imports grader.student.check."""
import sys

from grader.student import check

sys.modules[__name__] = check
