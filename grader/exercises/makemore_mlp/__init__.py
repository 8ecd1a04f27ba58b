"""Karpathy's makemore MLP (embedding, linear, batch norm with the unbiased variance, tanh, linear,
cross-entropy written out in atomic steps), the exercise the course was built for: 26 atomic gradients
from dlogprobs to dC, the fused cross-entropy and batch-norm gradients, and manual_backward driving a
short training run. Its definition is lecture.py, an exercise file like any instructor's."""
from grader.exercises.makemore_mlp.lecture import EXERCISE

__all__ = ["EXERCISE"]
