"""The public contract between the notebooks and the grader: grade ids, what each answer cell
assigns, and which names it may read.

Grade ids never change meaning once a course has released a notebook: a gradebook keys its scores on
them.
"""
from __future__ import annotations

from dataclasses import dataclass

from grader.exercises.makemore_mlp.model import INTERMEDIATES, PARAMETERS, consumers

# Exercise 1, in the order the notebook asks for them; each is also a valid computation order.
ATOMIC = (
    "dlogprobs", "dprobs", "dcounts_sum_inv", "dcounts_sum", "dcounts", "dnorm_logits",
    "dlogit_maxes", "dlogits", "dh", "dW2", "db2", "dhpreact", "dbngain", "dbnbias", "dbnraw",
    "dbnvar_inv", "dbnvar", "dbndiff2", "dbndiff", "dbnmeani", "dhprebn", "dembcat", "dW1", "db1",
    "demb", "dC",
)

# What every answer cell may read besides gradients: the notebook says the same to students.
FORWARD_NAMES = PARAMETERS + tuple(name for name in INTERMEDIATES if name != "loss") + ("Xb", "Yb", "n")


@dataclass(frozen=True)
class Answer:
    """One answer cell: its grade id, the variable it must assign and the gradients it may read.

    `source` is the forward tensor whose gradient this is; `upstream` lists the gradients the cell
    may read (teacher-forced by the grader); `local_upstream` the ones a single backward step
    combines, which the local check randomises (empty when the only consumer is the loss).
    """

    grade_id: str
    variable: str
    source: str
    upstream: tuple[str, ...]
    local_upstream: tuple[str, ...]
    exercise: int
    cell: str = ""

    @property
    def cell_id(self) -> str:
        """The grade id of the notebook cell holding this answer (exercise 4's seven share one)."""
        return self.cell or self.grade_id


def _atomic(index: int, grade_id: str) -> Answer:
    source = grade_id[1:]
    local = tuple("d" + c for c in consumers(source) if c != "loss")
    return Answer(grade_id, grade_id, source, ATOMIC[:index], local, 1)


# Exercise 4: the student's whole backward pass as one function, `manual_backward(params, cache, Yb)`,
# graded per parameter. `cache` holds exactly these forward values, as the notebook's training loop
# builds them.
EX4_CELL = "ex4_backward"
EX4_FUNCTION = "manual_backward"
EX4_CACHE = ("Xb", "emb", "embcat", "hprebn", "bnmeani", "bnvar", "bnvar_inv", "bnraw", "hpreact", "h", "logits")

ANSWERS: tuple[Answer, ...] = (
    *(_atomic(i, g) for i, g in enumerate(ATOMIC)),
    Answer("ex2_dlogits", "dlogits", "logits", (), (), 2),
    Answer("ex3_dhprebn", "dhprebn", "hprebn", ("dhpreact",), ("dhpreact",), 3),
    *(Answer(f"ex4_d{p}", p, p, (), (), 4, EX4_CELL) for p in PARAMETERS),
)

BY_GRADE_ID = {a.grade_id: a for a in ANSWERS}
# Exercise 4 as a whole: a short training run driven by the student's manual_backward, against the
# same run driven by autograd.
EX4_TRAINING = "ex4_training"
GRADE_IDS = (*BY_GRADE_ID, EX4_TRAINING)
ANSWER_CELLS = tuple(dict.fromkeys(a.cell_id for a in ANSWERS))

# nbgrader keeps a score per grade cell: each grade id's is the self-check cell after its answer, so
# the gradebook holds a score per tensor. Its grade id is the answer's with this prefix.
GRADE_CELL_PREFIX = "check_"


def grade_cell_id(grade_id: str) -> str:
    return GRADE_CELL_PREFIX + grade_id
