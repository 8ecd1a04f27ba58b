"""The import path of grader 0.1, kept for one release: an existing course's hidden suite imports it. New code
imports grader.exercises.makemore_mlp.model."""
import sys

from grader.exercises.makemore_mlp import model

sys.modules[__name__] = model
