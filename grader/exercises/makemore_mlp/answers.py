"""The makemore exercise's answers: grade ids, what each answer cell assigns and which gradients it
may read.

Grade ids never change meaning once a course has released a notebook: a gradebook keys its scores on
them.
"""
from __future__ import annotations

from grader.exercise import (  # noqa: F401 - grader 0.1's names
    FUSED,
    GRADE_CELL_PREFIX,
    Answer,
    Function,
    Training,
    atomic_answers,
    function_answers,
    grade_cell_id,
)
from grader.exercises.makemore_mlp.model import NETWORK, PARAMETERS, training_batches

# Exercise 1, in the order the notebook asks for them; each is also a valid computation order.
ATOMIC = (
    "dlogprobs", "dprobs", "dcounts_sum_inv", "dcounts_sum", "dcounts", "dnorm_logits",
    "dlogit_maxes", "dlogits", "dh", "dW2", "db2", "dhpreact", "dbngain", "dbnbias", "dbnraw",
    "dbnvar_inv", "dbnvar", "dbndiff2", "dbndiff", "dbnmeani", "dhprebn", "dembcat", "dW1", "db1",
    "demb", "dC",
)

# Exercise 4: the student's whole backward pass as one function, `manual_backward(params, cache, Yb)`,
# graded per parameter. `cache` holds exactly these forward values, as the notebook's training loop
# builds them.
EX4_CELL = "ex4_backward"
EX4_FUNCTION = "manual_backward"
EX4_CACHE = ("Xb", "emb", "embcat", "hprebn", "bnmeani", "bnvar", "bnvar_inv", "bnraw", "hpreact", "h", "logits")
BACKWARD = Function(EX4_CELL, EX4_FUNCTION, (("params", PARAMETERS), ("cache", EX4_CACHE), "Yb"), PARAMETERS,
                    "ex4_d", 4)

ANSWERS: tuple[Answer, ...] = (
    *atomic_answers(NETWORK, ATOMIC, 1),
    Answer("ex2_dlogits", "dlogits", "logits", FUSED, 2, title="the cross-entropy step"),
    Answer("ex3_dhprebn", "dhprebn", "hprebn", FUSED, 3, ("dhpreact",), ("dhpreact",), sink="hpreact",
           title="the batch-norm step"),
    *function_answers(BACKWARD),
)

BY_GRADE_ID = {a.grade_id: a for a in ANSWERS}
# Exercise 4 as a whole: a short training run driven by the student's manual_backward, against the
# same run driven by autograd.
EX4_TRAINING = "ex4_training"
TRAINING = Training(EX4_TRAINING, BACKWARD, training_batches)
GRADE_IDS = (*BY_GRADE_ID, EX4_TRAINING)
ANSWER_CELLS = tuple(dict.fromkeys(a.cell_id for a in ANSWERS))
# What every answer cell may read besides gradients: the notebook says the same to students.
FORWARD_NAMES = (*PARAMETERS, *(name for name in NETWORK.intermediates if name != "loss"), "Xb", "Yb", "n")
