"""Karpathy's makemore MLP (embedding, linear, batch norm with the unbiased variance, tanh, linear,
cross-entropy written out in atomic steps), the exercise the course was built for: 26 atomic gradients
from dlogprobs to dC, the fused cross-entropy and batch-norm gradients, and manual_backward driving a
short training run."""
from grader.exercise import Exercise
from grader.exercises.makemore_mlp import model
from grader.exercises.makemore_mlp.answers import ANSWERS, BACKWARD, TRAINING
from grader.exercises.makemore_mlp.mistakes import MISTAKES

EXERCISE = Exercise(
    name="makemore-mlp",
    title="Becoming a backprop ninja: the makemore MLP",
    network=model.NETWORK,
    answers=ANSWERS,
    functions=(BACKWARD,),
    training=TRAINING,
    lecture=model.LECTURE,
    ranges={"n": (8, 40), "vocab": (11, 41), "block_size": (2, 6), "n_embd": (4, 17), "n_hidden": (12, 72)},
    init=model.init_params,
    batch=model.batch,
    sizes_of=model.sizes_of,
    hidden=model.hidden,
    assignment="backprop_ninja",
    notebook="backprop_ninja.ipynb",
    mistakes=MISTAKES,
    demo="grader.exercises.makemore_mlp.demo:CLASS",
    parts={1: "Exercise 1: one step at a time", 2: "Exercise 2: cross-entropy in one step",
           3: "Exercise 3: batch norm in one step", 4: "Exercise 4: manual_backward and training"},
)
