"""Builds the solved notebook and the students' notebook from one description.

The solved notebook is nbgrader's *source* form: every answer cell holds its blank
(`dlogprobs = None  # TODO`) and then the reference answer of solutions/answers.py between nbgrader's
default solution delimiters (`### BEGIN SOLUTION` / `### END SOLUTION`). The students' notebook is
derived from it by nbgrader's own release preprocessors, in the order `nbgrader generate_assignment`
runs them, so it equals what nbgrader releases from the solved notebook given the same settings:

    c.ClearSolutions.code_stub = {"python": ""}        # CLEAR_SOLUTIONS

nbgrader's default stub (`raise NotImplementedError()`) would make Run All stop at the first
unanswered cell; the empty stub leaves an empty line where the solution was (indented like the
delimiter, so inside `manual_backward` the cursor lands at the body's indentation), and the answer
cell keeps only its blank, which runs. Every other setting is nbgrader's default. The result is not
post-processed: nbgrader's release and the committed notebook are equal byte for byte (a slow test
in tests/test_notebooks.py runs nbgrader to prove it).

Run `python -m solutions.make_notebooks` after changing answers.py, course.yml's `data`, `tolerance`,
`allow` or `feedback` (the self-check carries them, as the notebook's COURSE), or this file:
tests/test_notebooks.py fails while the committed notebooks differ from what this produces.
"""
from __future__ import annotations

import ast
import copy
from pathlib import Path
from textwrap import dedent

import nbformat
from nbgrader.preprocessors import (
    CheckCellMetadata,
    ClearHiddenTests,
    ClearMarkScheme,
    ClearOutput,
    ClearSolutions,
    ComputeChecksums,
    LockCells,
)

from grader import course as course_config
from grader import material
from grader.exercises.makemore_mlp.answers import ATOMIC, BY_GRADE_ID, EX4_CELL, EX4_FUNCTION, grade_cell_id
from grader.exercises.makemore_mlp.model import PARAMETERS
from grader.student.solution import BEGIN_SOLUTION, END_SOLUTION
from solutions import reference

ROOT = Path(__file__).resolve().parents[1]
SOLVED = Path("solutions") / "backprop_ninja_solved.ipynb"

# The only ClearSolutions trait that differs from nbgrader's default (see the module docstring).
CLEAR_SOLUTIONS = {"code_stub": {"python": ""}}

# `nbgrader generate_assignment`'s preprocessors in its order, less those that need a course
# directory or a gradebook (IncludeHeaderFooter, InstantiateTests, SaveCells: no-ops or bookkeeping
# here), so the release keeps nbgrader's cell locks and checksums as well as its cleared solutions.
RELEASE_PREPROCESSORS = (LockCells, ClearSolutions, ClearOutput, ClearHiddenTests, ClearMarkScheme,
                         ComputeChecksums, CheckCellMetadata)

KERNELSPEC = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}


def release_path(course) -> Path:
    return Path("assignments") / course.assignment / course.notebook


# ---------------------------------------------------------------------------------------------
# Cells


def markdown(text: str):
    return nbformat.v4.new_markdown_cell(dedent(text).strip())


def _nbgrader(grade_id: str, *, solution: bool, points: float | None = None) -> dict:
    graded = {"points": points} if points is not None else {}
    return {"nbgrader": {"grade": points is not None, "solution": solution, "locked": not solution,
                         "grade_id": grade_id, **graded, "schema_version": 3}}


def locked(grade_id: str, source: str):
    """Read-only code: students run it but should not change it (nbgrader restores it anyway)."""
    return nbformat.v4.new_code_cell(dedent(source).strip(), metadata=_nbgrader(grade_id, solution=False))


def editable(source: str):
    return nbformat.v4.new_code_cell(dedent(source).strip())


def _solution_region(solution: str, indent: str = "") -> list[str]:
    body = solution.strip("\n").splitlines()
    return [indent + BEGIN_SOLUTION, *body, indent + END_SOLUTION]


def _answer(grade_id: str, lines: list[str]):
    return nbformat.v4.new_code_cell("\n".join(lines), metadata=_nbgrader(grade_id, solution=True))


def blank(variable: str) -> str:
    return f"{variable} = None  # TODO"


def answer(grade_id: str):
    """An answer cell of exercises 1-3: the blank runs first, so the stub's cell still runs."""
    solution = reference.cells()[grade_id]
    return _answer(grade_id, [blank(BY_GRADE_ID[grade_id].variable), *_solution_region(solution)])


def graded(grade_id: str, source: str, points: dict[str, float]):
    """A self-check that is also the grade id's nbgrader grade cell, worth course.yml's points: the
    grader writes its score and feedback there, so the gradebook keeps a score per tensor. A grade id
    the course gives no points stays a plain read-only check."""
    return nbformat.v4.new_code_cell(dedent(source).strip(), metadata=_nbgrader(
        grade_cell_id(grade_id), solution=False, points=points.get(grade_id)))


def check(grade_id: str, points: dict[str, float]):
    a = BY_GRADE_ID[grade_id]
    label = a.variable if a.exercise == 1 else grade_id  # dlogits and dhprebn are asked twice
    return graded(grade_id, f'check("{label}", {a.variable}, {a.source})', points)


def function_answer():
    """Exercise 4's cell: the reference function with its body replaced by one blank per gradient.

    The signature, docstring and return statement come from answers.py and stay in the stub, so
    students keep the contract; the return statement names the variables that get a blank, so each
    of the seven gradients starts as None and is reported as not attempted until written.
    """
    source = reference.cells()[EX4_CELL]
    contract = (f"answers.py, {EX4_CELL}: expected only `def {EX4_FUNCTION}`, with a docstring, ending "
                f"with `return {{name: variable}}` for {PARAMETERS}")
    tree = ast.parse(source).body
    fn = tree[0] if len(tree) == 1 else None
    if not (isinstance(fn, ast.FunctionDef) and fn.name == EX4_FUNCTION and ast.get_docstring(fn)):
        raise ValueError(contract)
    docstring, ret = fn.body[0], fn.body[-1]
    if not (isinstance(ret, ast.Return) and isinstance(ret.value, ast.Dict)
            and [getattr(k, "value", None) for k in ret.value.keys] == list(PARAMETERS)
            and all(isinstance(v, ast.Name) for v in ret.value.values)):
        raise ValueError(contract)
    lines = source.rstrip("\n").splitlines()
    indent = lines[ret.lineno - 1][: ret.col_offset]
    blanks = [indent + blank(v.id) for v in ret.value.values]
    body = "\n".join(lines[docstring.end_lineno: ret.lineno - 1])
    return _answer(EX4_CELL, [*lines[: docstring.end_lineno], *blanks,
                                  *_solution_region(body, indent), *lines[ret.lineno - 1:]])


# ---------------------------------------------------------------------------------------------
# The notebook, section by section


def introduction():
    return [markdown(r"""
        # Becoming a backprop ninja

        In this notebook you write the backward pass of a small neural network by hand, one tensor
        at a time, and check every gradient you compute against PyTorch's autograd. The network is
        the character-level language model of Andrej Karpathy's lecture *Building makemore Part 4:
        Becoming a Backprop Ninja* (MIT licence): three characters of context go through an embedding
        table, a linear layer, batch normalization and tanh, and an output layer that predicts the
        next character.

        Why bother, when `loss.backward()` does it all? Because when training goes wrong (saturated
        tanh, dead neurons, exploding gradients, a shape bug that broadcasts without an error) you
        find the cause much faster if you know what flows backwards through every line.

        **What you will do**

        1. **Exercise 1**: backpropagate through the forward pass one small step at a time: 26
           gradients, from `dlogprobs` back to the embedding table's `dC`.
        2. **Exercise 2**: the gradient of the cross-entropy loss in one short formula (`dlogits`).
        3. **Exercise 3**: the gradient through batch normalization in one formula (`dhprebn`).
        4. **Exercise 4**: put it together in a function `manual_backward` and train the network
           with your gradients alone.

        **How it works.** Each answer cell starts as `dlogprobs = None  # TODO`: replace `None` by
        your expression (use as many lines as you like). The read-only cell after it compares your
        answer with autograd's and prints one line; an answer that is still `None` is reported as
        "not attempted yet", so *Run All* works at any time.

        **Rules** (the grader enforces them: it runs your answer cells again, on forward passes of
        its own)

        - An answer cell may use only the parameters `C, W1, b1, W2, b2, bngain, bnbias`; the batch
          `Xb, Yb` and its size `n`; the forward pass's intermediates by their names below (`emb`,
          `embcat`, `hprebn`, ..., `probs`, `logprobs`); `torch` and `F`; and the variables assigned
          by earlier answer cells of the *same* exercise.
        - No autograd in answer cells: no `.backward()`, `torch.autograd`, `torch.func`,
          `requires_grad` or `.grad`. The point is to compute what autograd would.
        - Tensor math only: the grader reads each answer cell before running it and refuses (with
          the line quoted, and 0 for that tensor) imports other than `torch`/`F`, files, `exec`,
          `eval`, `getattr`, dunders, attributes starting with `_`, `try`/`except`, `match`, `with`
          (except `with torch.no_grad():`), class definitions, decorators, `str.format` (print with
          f-strings), `**kwargs` in a call and changes to `torch` itself. Loops, helper functions
          (call your own with positional arguments), comprehensions and every `torch`/`F` tensor
          function you need are fine.
        - No hard-coded sizes: the grader runs your cells with other batch sizes, vocabularies,
          context lengths, embedding and hidden sizes. Take sizes from `n` or from shapes
          (`logits.shape[1]`), never write `32`, `27` or `64`.
        - Leave the read-only cells as they are: they build the network and check your answers.
        """)]


def public_settings(course) -> dict:
    """What the self-check needs from course.yml to give the grader's verdicts (never the salt)."""
    allow = {k: list(getattr(course.allow, k)) for k in ("torch", "functional", "builtins")}
    return {"tolerance": [course.tolerance.rtol, course.tolerance.atol], "allow": allow,
            "hints": course.feedback.hints}


def setup(data_file: str | None, settings: dict, solutions: str):
    return [
        markdown("""
            ## Setup

            The self-check and the data loader come with the course's `grader` package; the first cell
            installs it where it is missing (Colab, a JupyterHub image without it).
            """),
        locked("setup_install", material.install_cell(solutions)),
        locked("setup_imports", f"""
            %matplotlib inline
            import matplotlib.pyplot as plt
            import torch
            import torch.nn.functional as F

            from grader.exercises.makemore_mlp import data
            from grader.student.check import SelfCheck

            torch.set_num_threads(1)  # the tensors here are tiny: one thread is many times faster than several
            # The course's tolerances, allowlist and hints: the self-check gives the grader's verdicts
            COURSE = {settings!r}
            """),
        markdown("""
            ## Data

            Each example is `block_size = 3` characters of context and the character that follows
            them; `.` marks both the start (it pads the first contexts of a word) and the end of a
            word. The words are split 80/10/10 into training, validation and test sets, as in the
            lecture.
            """),
        locked("setup_data", f"""
            DATA_FILE = {data_file!r}  # one word per line, relative to this folder; None: the lecture's names.txt shipped with the package
            block_size = 3  # characters of context used to predict the next one

            words = data.load_words(DATA_FILE)
            (Xtr, Ytr), (Xdev, Ydev), (Xte, Yte), stoi, itos = data.splits(words, block_size)
            vocab_size = len(itos)
            print(f"{{len(words)}} words, such as {{', '.join(words[:8])}}")
            print(f"{{vocab_size}} characters: {{''.join(itos[i] for i in range(vocab_size))}}")
            print(f"examples: {{len(Xtr)}} training, {{len(Xdev)}} validation, {{len(Xte)}} test")
            """),
        markdown(r"""
            ## The network's parameters

            The sizes are the lecture's: 10-dimensional character embeddings and 64 hidden neurons.

            **Why this initialization.** None of these values is zero, and the batch-norm gain is not
            exactly one, on purpose: a zero or a one can make a wrong gradient look right. With
            `W2 = 0`, for instance, `dh` and every gradient further back (down to `dC`) would be zero,
            and so would almost any wrong formula for them; with `bngain = 1`, forgetting to multiply
            by `bngain` would change nothing. (For real training you would start `b2` and the biases at zero; here the point is
            to catch mistakes.)

            **Why a seed.** Every random draw takes one generator `g`, seeded once, so the parameters
            and the batch are the same on every run and for everybody. The lecture drew `bngain` and
            `bnbias` from torch's global random state, so its numbers could not be reproduced.

            **Why float64.** Exercises 1 to 3 run in double precision: rounding errors are then about
            $10^{-16}$, so they can never be confused with a mistake (which is typically $10^{-3}$ or
            more). The lecture ran in float32, where `dlogit_maxes` and `db1`, two gradients that are
            exactly zero in exact arithmetic, come out as rounding noise of about $10^{-8}$, as large
            as the comparison's tolerance.

            Finally we draw one batch of `n = 32` examples.
            """),
        locked("setup_params", """
            SEED = 2147483647
            n_embd = 10    # dimensions of a character's embedding
            n_hidden = 64  # neurons in the hidden layer

            def init_params(n_hidden, dtype, g):
                \"\"\"The lecture's initialization: small random values, never exactly zero or one.\"\"\"
                fan_in = n_embd * block_size

                def randn(*shape):
                    return torch.randn(shape, generator=g, dtype=dtype)

                return {
                    "C": randn(vocab_size, n_embd),
                    "W1": randn(fan_in, n_hidden) * (5 / 3) / fan_in**0.5,  # Kaiming init for tanh
                    "b1": randn(n_hidden) * 0.1,  # useless under batch norm, but it has a gradient to find
                    "W2": randn(n_hidden, vocab_size) * 0.1,
                    "b2": randn(vocab_size) * 0.1,
                    "bngain": randn(1, n_hidden) * 0.1 + 1.0,
                    "bnbias": randn(1, n_hidden) * 0.1,
                }

            g = torch.Generator().manual_seed(SEED)  # every random draw takes g
            C, W1, b1, W2, b2, bngain, bnbias = init_params(n_hidden, torch.float64, g).values()
            parameters = [C, W1, b1, W2, b2, bngain, bnbias]
            for p in parameters:
                p.requires_grad = True
            print(sum(p.nelement() for p in parameters), "parameters")

            n = batch_size = 32
            ix = torch.randint(0, Xtr.shape[0], (batch_size,), generator=g)
            Xb, Yb = Xtr[ix], Ytr[ix]  # a batch of contexts and the characters that follow them
            """),
        markdown(r"""
            ## The forward pass, in small steps

            This is the network's forward pass with the cross-entropy loss and batch normalization
            written out as atomic operations, so that every intermediate result has a name and a
            gradient for you to compute. Batch normalization uses the *unbiased* variance (it divides
            by $n-1$, Bessel's correction), as the lecture does, and `1e-5` is its $\epsilon$.

            `retain_grad()` asks autograd to keep the gradient of every intermediate tensor, so that
            the self-check can compare yours with it.
            """),
        locked("setup_forward", """
            emb = C[Xb]  # embed the characters into vectors
            embcat = emb.view(emb.shape[0], -1)  # concatenate the vectors
            # Linear layer 1
            hprebn = embcat @ W1 + b1  # hidden layer pre-activation
            # BatchNorm layer
            bnmeani = 1/n*hprebn.sum(0, keepdim=True)
            bndiff = hprebn - bnmeani
            bndiff2 = bndiff**2
            bnvar = 1/(n-1)*bndiff2.sum(0, keepdim=True)  # Bessel's correction: dividing by n-1, not n
            bnvar_inv = (bnvar + 1e-5)**-0.5
            bnraw = bndiff * bnvar_inv
            hpreact = bngain * bnraw + bnbias
            # Non-linearity
            h = torch.tanh(hpreact)  # hidden layer
            # Linear layer 2
            logits = h @ W2 + b2  # output layer
            # Cross-entropy loss, the same as F.cross_entropy(logits, Yb)
            logit_maxes = logits.max(1, keepdim=True).values
            norm_logits = logits - logit_maxes  # subtract the max for numerical stability
            counts = norm_logits.exp()
            counts_sum = counts.sum(1, keepdim=True)
            counts_sum_inv = counts_sum**-1
            probs = counts * counts_sum_inv
            logprobs = probs.log()
            loss = -logprobs[range(n), Yb].mean()

            # Autograd's gradients, to check yours against
            for p in parameters:
                p.grad = None
            for t in [logprobs, probs, counts, counts_sum, counts_sum_inv, norm_logits, logit_maxes,
                      logits, h, hpreact, bnraw, bnvar_inv, bnvar, bndiff2, bndiff, bnmeani, hprebn,
                      embcat, emb]:
                t.retain_grad()
            loss.backward()
            check = SelfCheck(n=n, namespace=globals(), course=COURSE)
            print(f"loss {loss.item():.4f}")
            """),
        markdown(r"""
            ### Reading the self-check

            `check("dhpreact", dhpreact, hpreact)` compares your `dhpreact` with `hpreact.grad` and
            prints, for a correct answer,

            ```
            dhpreact       | exact: False | approximate: True  | maxdiff: 8.67e-19 | shape (32, 64) ok
            ```

            - `exact` says whether the two are equal bit for bit. `exact: False` with
              `approximate: True` is a correct answer: the same mathematics computed in another order
              rounds differently in the last bits. A check that insisted on exact equality would
              reject correct code.
            - `approximate` allows a relative difference of $10^{-5}$ plus an absolute one of
              $10^{-8}$; `maxdiff` is the largest absolute difference.
            - The shape must be exactly the tensor's. The lecture's `cmp` broadcast the two tensors and
              so let some wrongly shaped gradients pass; this check does not.

            The check then runs your cell's code the way the grader does, with the grader's tolerances,
            static check and feedback: with the true upstream gradients and with random ones (so that
            a missing branch or a hard-coded value shows), on this batch and on two batches of other
            sizes that it draws itself (one with a tiny activation variance, where eps matters). A
            wrong answer prints `WRONG` (or `wrong shape`) and, where it can tell, what the mistake is;
            a line without `WRONG` is one the grader accepts. When your cell is right but an earlier
            answer it reads is wrong, it says so (`dprobs above is wrong; with the true dprobs this
            cell is right`), so fix that one first.
            """),
    ]


ATOMIC_GROUPS = (
    ("dlogits", r"""
        ### 1a. From the loss back to the logits

        - `loss` is minus the mean of `n` entries of `logprobs`, one per row. The other entries do not
          affect the loss at all.
        - `log`, `exp` and powers act elementwise: multiply the upstream gradient by the local
          derivative, elementwise.
        - Subtracting `logit_maxes` does not change `probs` (softmax does not care if the same number
          is subtracted from a whole row): it is there only so that `exp` cannot overflow. So the true
          `dlogit_maxes` is zero; yours should come out as zero up to rounding, by the chain rule.
          (Writing zeros directly would match this check, but it is not a backward step: the grader
          also checks every step with other upstream gradients.)
        - `logits` is used twice: directly in `norm_logits`, and through `logit_maxes`, since the max
          of a row is one of its entries (`logits.max(1)` also gives its position).
        """),
    ("dhpreact", r"""
        ### 1b. The output layer and tanh

        - For a product `Y = X @ W`, write the matrix product of `dY` with `W` or `X` (transposed as
          needed) whose shape is the shape of the gradient you want. That is all there is to it.
        - Differentiate tanh through its output: with $h = \tanh(x)$, $\frac{dh}{dx} = 1 - h^2$.
        """),
    ("dhprebn", r"""
        ### 1c. Batch normalization

        - `bngain`, `bnbias`, `bnmeani` and `bnvar_inv` have shape `(1, n_hidden)` and are
          broadcast over the `n` rows of the batch; `bnvar` is a sum over the rows of `bndiff2`,
          weighted by $1/(n-1)$.
        - `bndiff` is used twice (in `bnraw` and in `bndiff2`), and so is `hprebn` (in `bndiff` and
          in `bnmeani`).
        """),
    ("dC", r"""
        ### 1d. The first layer and the embedding table

        - `embcat` is only a view of `emb` with another shape.
        - Batch normalization subtracts each column's mean, so adding a constant to a column of
          `hprebn` (which is what `b1` does) changes nothing downstream: `db1` is zero in exact
          arithmetic. As with `dlogit_maxes`, compute it by the chain rule anyway.
        - `emb = C[Xb]` copies row `Xb[i, j]` of `C` into `emb[i, j]`. A character that occurs
          several times in `Xb` (`.` certainly does: it pads the start of every word) had its row
          copied several times, so its gradient is the **sum** over all the positions that used it: a
          scatter-add. An assignment such as `dC[Xb] = demb` keeps only one of those contributions.
          A Python loop over the positions of `Xb` is fine; torch also has a scatter-add.
        """),
)


def _dlogits_picture():
    return locked("plot_dlogits", """
        if not isinstance(dlogits, torch.Tensor) or dlogits.shape != logits.shape:
            print("dlogits not attempted yet: its picture appears here once it has the shape of logits")
        else:
            fig, (left, right) = plt.subplots(1, 2, figsize=(10, 5))
            left.imshow(logits.detach().numpy(), cmap="gray")
            left.set_title("logits")
            right.imshow(dlogits.detach().numpy(), cmap="gray")
            right.set_title("dlogits")
            plt.show()
        """)


def exercise1(points):
    cells = [markdown(r"""
        ## Exercise 1: backpropagate through everything, one step at a time

        Go backwards through the forward pass and compute the gradient of `loss` with respect to
        every intermediate and every parameter, each named `d` + the tensor's name. Three rules do
        most of the work:

        1. **A gradient has the shape of its tensor.** `dX.shape == X.shape`, always. When you are
           unsure where a transpose or a sum goes, the shapes usually tell you.
        2. **Broadcasting forwards is summing backwards, and summing forwards is broadcasting
           backwards.** A `(1, H)` tensor added to every row of an `(n, H)` one influenced `n`
           outputs, so its gradient is the sum of theirs over the rows (`keepdim=True` keeps its
           shape). Conversely, every entry that went into a sum receives the gradient of that sum.
        3. **A tensor used twice gets the sum of both gradients.** `counts`, `logits`, `bndiff` and
           `hprebn` each feed two later steps: compute the contribution of each branch and add them.

        The cells go in the order of the backward pass; each may use the gradients you computed
        before it.
        """)]
    start = 0
    for last, tips in ATOMIC_GROUPS:
        end = ATOMIC.index(last) + 1
        cells.append(markdown(tips))
        for grade_id in ATOMIC[start:end]:
            cells += [answer(grade_id), check(grade_id, points)]
        if last == "dlogits":
            cells.append(_dlogits_picture())
        start = end
    if start != len(ATOMIC):
        raise ValueError("ATOMIC_GROUPS must end with the last gradient of exercise 1")
    return cells


def exercise2(points):
    return [
        markdown(r"""
            ## Exercise 2: the cross-entropy loss in one step

            Exercise 1 went from `loss` to `logits` in eight small steps. On paper they collapse into a
            short formula. For one example with logits $z$, probabilities $p = \mathrm{softmax}(z)$,
            $p_j = e^{z_j} / \sum_k e^{z_k}$, and target $y$, the loss is $\ell = -\log p_y
            = -z_y + \log \sum_k e^{z_k}$, so

            $$\frac{\partial \ell}{\partial z_j} = -[j = y] + \frac{e^{z_j}}{\sum_k e^{z_k}}
            = p_j - [j = y],$$

            where $[j = y]$ is 1 at the target and 0 elsewhere. The loss is the mean over the $n$
            examples of the batch, which divides each row's gradient by $n$.

            Compute `dlogits` from the forward pass alone (`logits`, `Yb`, `n`; `F.softmax` is
            allowed), without the gradients of exercise 1. It is shorter and also faster: this is what
            `F.cross_entropy` does. Read it as forces on the logits: every wrong character is pushed
            down in proportion to the probability it got, the right one is pulled up by $1 - p_y$, and
            each row sums to zero (the picture above shows one dark cell per row, at the target).
            """),
        answer("ex2_dlogits"),
        check("ex2_dlogits", points),
    ]


def exercise3(points):
    return [
        markdown(r"""
            ## Exercise 3: batch normalization in one step

            For each hidden neuron (a column), batch normalization computes over the $n$ examples of
            the batch (with $x$ = `hprebn`, $y$ = `hpreact`, $\gamma$ = `bngain`, $\beta$ = `bnbias`)

            $$\mu = \frac{1}{n}\sum_i x_i, \qquad \sigma^2 = \frac{1}{n-1}\sum_i (x_i - \mu)^2, \qquad
            \hat x_i = \frac{x_i - \mu}{\sqrt{\sigma^2 + \epsilon}}, \qquad y_i = \gamma \hat x_i + \beta.$$

            Each $x_i$ reaches the loss through three paths: directly, through $\mu$ and through
            $\sigma^2$. Adding them up and simplifying gives, with $\hat x$ = `bnraw` and
            $(\sigma^2 + \epsilon)^{-1/2}$ = `bnvar_inv`,

            $$\frac{\partial L}{\partial x_i} = \frac{\gamma\,(\sigma^2+\epsilon)^{-1/2}}{n}
            \left( n\,\frac{\partial L}{\partial y_i} - \sum_j \frac{\partial L}{\partial y_j}
            - \frac{n}{n-1}\,\hat x_i \sum_j \frac{\partial L}{\partial y_j}\,\hat x_j \right).$$

            (Try deriving it on paper.) The factor $\frac{n}{n-1}$ comes from the unbiased variance of
            the forward pass; with the biased one ($\frac{1}{n}$) it would be 1. Be consistent: using
            one estimate during training and the other at inference (which is what
            `torch.nn.BatchNorm1d` does) is a mismatch that matters for small batches.

            Compute `dhprebn` from `dhpreact` and the forward pass. So that a mistake in exercise 1
            cannot spoil this one, the next cell sets `dhpreact` to autograd's value.
            """),
        locked("setup_ex3_dhpreact", """
            dhpreact = hpreact.grad.clone()  # autograd's: exercise 3 does not depend on exercise 1
            """),
        answer("ex3_dhprebn"),
        check("ex3_dhprebn", points),
    ]


def exercise4(points):
    skip = "exercise 4 not attempted yet: "
    return [
        markdown(r"""
            ## Exercise 4: train with your own backward pass

            Now the lecture's full training run, with every gradient computed by you. The network is
            the same but bigger (200 hidden neurons) and runs in float32, as in the lecture; its loss
            is `F.cross_entropy`, and batch normalization still uses the unbiased variance.
            `fused_forward` returns the loss and a `cache` of the forward pass's tensors: `Xb`, `emb`,
            `embcat`, `hprebn`, `bnmeani`, `bnvar`, `bnvar_inv`, `bnraw`, `hpreact`, `h` and `logits`.
            """),
        locked("setup_ex4_forward", """
            def fused_forward(params, X, Y=None, bnstats=None):
                \"\"\"The loss (None without targets Y) and the cache that a backward pass needs.

                bnstats, a (mean, variance) pair, replaces the batch's statistics once training is
                over, so that a single example can be evaluated on its own.
                \"\"\"
                emb = params["C"][X]
                embcat = emb.view(emb.shape[0], -1)
                hprebn = embcat @ params["W1"] + params["b1"]
                if bnstats is None:
                    bnmeani = hprebn.mean(0, keepdim=True)
                    bnvar = hprebn.var(0, keepdim=True, unbiased=True)  # 1/(n-1), as in exercise 1
                else:
                    bnmeani, bnvar = bnstats
                bnvar_inv = (bnvar + 1e-5)**-0.5
                bnraw = (hprebn - bnmeani) * bnvar_inv
                hpreact = params["bngain"] * bnraw + params["bnbias"]
                h = torch.tanh(hpreact)
                logits = h @ params["W2"] + params["b2"]
                loss = None if Y is None else F.cross_entropy(logits, Y)
                cache = dict(Xb=X, emb=emb, embcat=embcat, hprebn=hprebn, bnmeani=bnmeani, bnvar=bnvar,
                             bnvar_inv=bnvar_inv, bnraw=bnraw, hpreact=hpreact, h=h, logits=logits)
                return loss, cache
            """),
        markdown(r"""
            Write `manual_backward(params, cache, Yb)`: it returns the gradient of the loss with
            respect to each of the seven parameters, from the formulas of exercises 2 and 3 and the
            rules of exercise 1. It may use only its arguments, `torch` and `F` (the grader calls it
            with networks and batches of other sizes), and no autograd. Each gradient starts as
            `None`, which the check below reports as not attempted.
            """),
        function_answer(),
        locked("setup_ex4_check", """
            g = torch.Generator().manual_seed(SEED)
            params = init_params(200, torch.float32, g)
            ix = torch.randint(0, Xtr.shape[0], (batch_size,), generator=g)
            leaves = {name: p.clone().requires_grad_() for name, p in params.items()}
            loss_autograd, cache = fused_forward(leaves, Xtr[ix], Ytr[ix])
            loss_autograd.backward()  # autograd's gradients, only to check yours
            with torch.no_grad():
                grads = manual_backward(params, {k: v.detach() for k, v in cache.items()}, Ytr[ix]) or {}
            check_ex4 = SelfCheck(n=batch_size, exercise=4, namespace=globals(), course=COURSE)
            """),
        *(graded(f"ex4_d{name}", f'check_ex4("d{name}", grads.get("{name}"), leaves["{name}"])', points)
          for name in PARAMETERS),
        graded("ex4_training", """
            # 50 SGD steps with your gradients and with autograd's, from the same start on the same batches
            g = torch.Generator().manual_seed(SEED + 1)
            batches = [(Xtr[ix], Ytr[ix]) for ix in
                       (torch.randint(0, Xtr.shape[0], (batch_size,), generator=g) for _ in range(50))]
            check_ex4.training(fused_forward, manual_backward, init_params(200, torch.float64, g), batches, lr=0.1)
            """, points),
        markdown(r"""
            ### Training

            The loop below never calls `loss.backward()`: it runs inside `torch.no_grad()` and updates
            the parameters with your gradients, by stochastic gradient descent with the lecture's
            learning rate, 0.1, decayed to 0.01 for the second half of the steps. By default it makes
            a short run of 2,000 steps (about a second); set `FULL_RUN = True` for the lecture's 200,000
            steps (about a minute on one CPU thread). With the lecture's `names.txt` the full run reaches a loss of about 2.07
            on the training set and 2.11 on the validation set, the same as with autograd; other
            word lists give other numbers.
            """),
        editable("""
            FULL_RUN = False  # True: the lecture's 200,000 steps
            """),
        locked("train_loop", f"""
            max_steps = 200_000 if FULL_RUN else 2_000

            def train(params, max_steps, g):
                \"\"\"SGD on manual_backward's gradients: every step's log10 loss, None if not attempted.\"\"\"
                lossi = []
                with torch.no_grad():  # nothing here may reach autograd
                    for i in range(max_steps):
                        ix = torch.randint(0, Xtr.shape[0], (batch_size,), generator=g)
                        loss, cache = fused_forward(params, Xtr[ix], Ytr[ix])
                        grads = manual_backward(params, cache, Ytr[ix])
                        if grads is None or any(grads.get(name) is None for name in params):
                            print("{skip}skipping training")
                            return None
                        lr = 0.1 if i < max_steps // 2 else 0.01  # step learning rate decay
                        for name, p in params.items():
                            p -= lr * grads[name]
                        if i % (max_steps // 10) == 0 or i == max_steps - 1:
                            print(f"step {{i:7d}}/{{max_steps}}: loss {{loss.item():.4f}}")
                        lossi.append(loss.log10().item())
                return lossi

            g = torch.Generator().manual_seed(SEED)
            params = init_params(200, torch.float32, g)
            lossi = train(params, max_steps, g)
            """),
        locked("train_plot", f"""
            if lossi is None:
                print("{skip}no loss curve")
            else:
                window = max_steps // 100  # average the noisy per-batch losses over windows of steps
                plt.plot(range(0, max_steps, window), torch.tensor(lossi).view(-1, window).mean(1))
                plt.xlabel("step")
                plt.ylabel(f"log10 loss, mean of {{window}} steps")
                plt.show()
            """),
        markdown(r"""
            ### Batch normalization after training

            The network was trained on the statistics of each batch. To use it on one example at a
            time, fix the mean and the variance to those of the whole training set (the lecture's
            calibration step; a running average kept during training does the same job).
            """),
        locked("train_calibrate", f"""
            if lossi is None:
                print("{skip}no calibration")
            else:
                with torch.no_grad():
                    _, cache = fused_forward(params, Xtr)
                bnstats = cache["bnmeani"], cache["bnvar"]
                print(f"batch normalization calibrated on {{len(Xtr)}} training examples")
            """),
        locked("train_evaluate", f"""
            if lossi is None:
                print("{skip}no evaluation")
            else:
                with torch.no_grad():
                    for split, (X, Y) in {{"train": (Xtr, Ytr), "val": (Xdev, Ydev)}}.items():
                        print(f"{{split}} loss {{fused_forward(params, X, Y, bnstats)[0].item():.4f}}")
            """),
        locked("train_sample", f"""
            @torch.no_grad()
            def sample(g, max_length=50):
                \"\"\"One word, a character at a time, until the model picks '.' (the end).\"\"\"
                out, context = [], [0] * block_size
                while len(out) < max_length:
                    _, cache = fused_forward(params, torch.tensor([context]), bnstats=bnstats)
                    ix = torch.multinomial(F.softmax(cache["logits"], dim=1), 1, generator=g).item()
                    if ix == 0:
                        break
                    out.append(itos[ix])
                    context = context[1:] + [ix]
                return "".join(out)

            if lossi is None:
                print("{skip}no samples")
            else:
                g = torch.Generator().manual_seed(SEED + 10)
                for _ in range(20):
                    print(sample(g))
            """),
    ]


def takeaways():
    return [markdown(r"""
        ## What to take away

        - A gradient has the shape of its tensor; shapes tell you where transposes and sums go.
        - Broadcasting forwards is summing backwards, and the other way round.
        - A tensor used twice collects gradient from both uses.
        - Fused gradients (cross-entropy, batch normalization) are shorter, faster and easier to
          read than the chain of atomic steps, because most of the intermediate terms cancel.
        - Test gradients on nonzero, non-unit values: zeros and ones hide mistakes.
        - Compare floating-point results with a tolerance, never for exact equality.
        - Knowing the backward pass shows you real bugs. Clipping the *loss* instead of the
          *gradients*, for example, sets the gradient of every clipped example to zero: the examples
          the model gets most wrong stop teaching it anything. And batch normalization must use the
          same variance (biased or unbiased) in training and at inference.

        In practice you will keep using autograd, but now you know what it does.
        """)]


# ---------------------------------------------------------------------------------------------
# Notebooks


def _notebook(cells):
    """Cell ids are fixed (the grade id, else the position) so that a rebuild changes no byte."""
    for index, cell in enumerate(cells):
        cell.id = cell.metadata.get("nbgrader", {}).get("grade_id", f"cell-{index}")
    nb = nbformat.v4.new_notebook(cells=cells, metadata={
        "kernelspec": KERNELSPEC, "language_info": {"name": "python"}})
    nbformat.validate(nb)
    return nb


def solved_notebook(data_file: str | None, points: dict[str, float], settings: dict, solutions: str = "gated"):
    nb = _notebook([*introduction(), *setup(data_file, settings, solutions), *exercise1(points), *exercise2(points),
                    *exercise3(points), *exercise4(points), *takeaways()])
    CheckCellMetadata().preprocess(nb, {})
    return nb


def release(solved):
    """The students' notebook, made from the solved one by nbgrader's own preprocessors."""
    nb = copy.deepcopy(solved)
    resources: dict = {}
    for preprocessor in RELEASE_PREPROCESSORS:
        settings = CLEAR_SOLUTIONS if preprocessor is ClearSolutions else {}
        nb, resources = preprocessor(**settings).preprocess(nb, resources)
    nbformat.validate(nb)
    return nb


def build(root: Path = ROOT):
    """(relative path, notebook) for the solved notebook and the students' notebook."""
    course = course_config.load(root / "course.yml")
    solved = solved_notebook(course.data, course.points, public_settings(course), course.solutions)
    return {SOLVED: solved, release_path(course): release(solved)}


def write(out: Path, root: Path = ROOT) -> list[Path]:
    written = []
    for relative, nb in build(root).items():
        path = out / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(nb, path)
        written.append(path)
    return written


def main() -> None:
    for path in write(ROOT):
        print(f"wrote {path.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
