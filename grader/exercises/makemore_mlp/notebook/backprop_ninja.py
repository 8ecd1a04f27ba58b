# %% [raw]
# The prose source of the makemore MLP's notebook (backprop_ninja.ipynb), in jupytext's percent format:
# what a person writes, and nothing the exercise already says. `python -m solutions.make_notebooks`
# builds the solved and the students' notebooks from it, filling in what is derived: each `name = ...`
# line (the network's steps, COURSE, DATA_FILE), the install cell, the answer cells with their blanks
# and reference answers, and their self-checks. Its docstring lists the cell markers. This file is not
# a module: nothing imports it.
#
# The empty raw cells `begin="NAME"` and `end="NAME"` mark the sections a variant of the network
# replaces (backprop_ninja_variant.py holds their variant text; ../notebook_source.py composes
# a variant's source); the lecture's notebooks leave raw cells out, so the markers change none of them.

# %% [raw] begin="intro"

# %% [markdown]
# # Becoming a backprop ninja
#
# In this notebook you write the backward pass of a small neural network by hand, one tensor
# at a time, and check every gradient you compute against PyTorch's autograd. The network is
# the character-level language model of Andrej Karpathy's lecture *Building makemore Part 4:
# Becoming a Backprop Ninja* (MIT licence): three characters of context go through an embedding
# table, a linear layer, batch normalization and tanh, and an output layer that predicts the
# next character.
#
# Why bother, when `loss.backward()` does it all? Because when training goes wrong (saturated
# tanh, dead neurons, exploding gradients, a shape bug that broadcasts without an error) you
# find the cause much faster if you know what flows backwards through every line.
#
# **What you will do**
#
# 1. **Exercise 1**: backpropagate through the forward pass one small step at a time: 26
#    gradients, from `dlogprobs` back to the embedding table's `dC`.
# 2. **Exercise 2**: the gradient of the cross-entropy loss in one short formula (`dlogits`).
# 3. **Exercise 3**: the gradient through batch normalization in one formula (`dhprebn`).
# 4. **Exercise 4**: put it together in a function `manual_backward` and train the network
#    with your gradients alone.
#
# **How it works.** Each answer cell starts as `dlogprobs = None  # TODO`: replace `None` by
# your expression (use as many lines as you like). The read-only cell after it compares your
# answer with autograd's and prints one line; an answer that is still `None` is reported as
# "not attempted yet", so *Run All* works at any time.
#
# **Rules** (the grader enforces them: it runs your answer cells again, on forward passes of
# its own)
#
# - An answer cell may use only the parameters `C, W1, b1, W2, b2, bngain, bnbias`; the batch
#   `Xb, Yb` and its size `n`; the forward pass's intermediates by their names below (`emb`,
#   `embcat`, `hprebn`, ..., `probs`, `logprobs`); `torch` and `F`; and the variables assigned
#   by earlier answer cells of the *same* exercise.
# - No autograd in answer cells: no `.backward()`, `torch.autograd`, `torch.func`,
#   `requires_grad` or `.grad`. The point is to compute what autograd would.
# - Tensor math only: the grader reads each answer cell before running it and refuses (with
#   the line quoted, and 0 for that tensor) imports other than `torch`/`F`, files, `exec`,
#   `eval`, `getattr`, dunders, attributes starting with `_`, `try`/`except`, `match`, `with`
#   (except `with torch.no_grad():`), class definitions, decorators, `str.format` (print with
#   f-strings), `**kwargs` in a call and changes to `torch` itself. Loops, helper functions
#   (call your own with positional arguments), comprehensions and every `torch`/`F` tensor
#   function you need are fine.
# - No hard-coded sizes: the grader runs your cells with other batch sizes, vocabularies,
#   context lengths, embedding and hidden sizes. Take sizes from `n` or from shapes
#   (`logits.shape[1]`), never write `32`, `27` or `64`.
# - Leave the read-only cells as they are: they build the network and check your answers.

# %% [raw] end="intro"

# %% [markdown]
# ## Setup
#
# The self-check and the data loader come with the course's `grader` package; the first cell
# installs it where it is missing (Colab, a JupyterHub image without it).

# %% locked="setup_install" generated="install"

# %% locked="setup_imports"
import torch
import torch.nn.functional as F

from grader.exercises.makemore_mlp import data
from grader.student.check import check  # what each check cell calls (it imports it again, for a restarted kernel)

torch.set_num_threads(1)  # the tensors here are tiny: one thread is many times faster than several
# The course's tolerances, allowlist and hints: the self-check gives the grader's verdicts
COURSE = ...

# %% [markdown]
# ## Data
#
# Each example is `block_size = 3` characters of context and the character that follows
# them; `.` marks both the start (it pads the first contexts of a word) and the end of a
# word. The words are split 80/10/10 into training, validation and test sets, as in the
# lecture.

# %% locked="setup_data"
DATA_FILE = ...  # one word per line, relative to this folder; None: the lecture's names.txt shipped with the package
block_size = 3  # characters of context used to predict the next one

words = data.load_words(DATA_FILE)
(Xtr, Ytr), (Xdev, Ydev), (Xte, Yte), stoi, itos = data.splits(words, block_size)
vocab_size = len(itos)
print(f"{len(words)} words, such as {', '.join(words[:8])}")
print(f"{vocab_size} characters: {''.join(itos[i] for i in range(vocab_size))}")
print(f"examples: {len(Xtr)} training, {len(Xdev)} validation, {len(Xte)} test")

# %% [raw] begin="params"

# %% [markdown]
# ## The network's parameters
#
# The sizes are the lecture's: 10-dimensional character embeddings and 64 hidden neurons.
#
# **Why this initialization.** None of these values is zero, and the batch-norm gain is not
# exactly one, on purpose: a zero or a one can make a wrong gradient look right. With
# `W2 = 0`, for instance, `dh` and every gradient further back (down to `dC`) would be zero,
# and so would almost any wrong formula for them; with `bngain = 1`, forgetting to multiply
# by `bngain` would change nothing. (For real training you would start `b2` and the biases at zero; here the point is
# to catch mistakes.)
#
# **Why a seed.** Every random draw takes one generator `g`, seeded once, so the parameters
# and the batch are the same on every run and for everybody. The lecture drew `bngain` and
# `bnbias` from torch's global random state, so its numbers could not be reproduced.
#
# **Why float64.** Exercises 1 to 3 run in double precision: rounding errors are then about
# $10^{-16}$, so they can never be confused with a mistake (which is typically $10^{-3}$ or
# more). The lecture ran in float32, where `dlogit_maxes` and `db1`, two gradients that are
# exactly zero in exact arithmetic, come out as rounding noise of about $10^{-8}$, as large
# as the comparison's tolerance.
#
# Finally we draw one batch of `n = 32` examples.

# %% [raw] end="params"

# %% [raw] begin="init"

# %% locked="setup_params"
SEED = 2147483647
n_embd = 10    # dimensions of a character's embedding
n_hidden = 64  # neurons in the hidden layer

def init_params(n_hidden, dtype, g):
    """The lecture's initialization: small random values, never exactly zero or one."""
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

# %% [raw] end="init"

# %% [raw] begin="forward"

# %% [markdown]
# ## The forward pass, in small steps
#
# This is the network's forward pass with the cross-entropy loss and batch normalization
# written out as atomic operations, so that every intermediate result has a name and a
# gradient for you to compute. Batch normalization uses the *unbiased* variance (it divides
# by $n-1$, Bessel's correction), as the lecture does, and `1e-5` is its $\epsilon$.
#
# `retain_grad()` asks autograd to keep the gradient of every intermediate tensor, so that
# the self-check can compare yours with it.

# %% locked="setup_forward"
emb = ...  # embed the characters into vectors
embcat = ...  # concatenate the vectors
# Linear layer 1
hprebn = ...  # hidden layer pre-activation
# BatchNorm layer
bnmeani = ...
bndiff = ...
bndiff2 = ...
bnvar = ...  # Bessel's correction: dividing by n-1, not n
bnvar_inv = ...
bnraw = ...
hpreact = ...
# Non-linearity
h = ...  # hidden layer
# Linear layer 2
logits = ...  # output layer
# Cross-entropy loss, the same as F.cross_entropy(logits, Yb)
logit_maxes = ...
norm_logits = ...  # subtract the max for numerical stability
counts = ...
counts_sum = ...
counts_sum_inv = ...
probs = ...
logprobs = ...
loss = ...

# Autograd's gradients, to check yours against
for p in parameters:
    p.grad = None
for t in [logprobs, probs, counts, counts_sum, counts_sum_inv, norm_logits, logit_maxes,
          logits, h, hpreact, bnraw, bnvar_inv, bnvar, bndiff2, bndiff, bnmeani, hprebn,
          embcat, emb]:
    t.retain_grad()
loss.backward()
print(f"loss {loss.item():.4f}")

# %% [raw] end="forward"

# %% [markdown]
# ### Reading the self-check
#
# `check("dhpreact")` takes your `dhpreact` from the notebook, compares it with `hpreact.grad` and
# prints, for a correct answer,
#
# ```
# dhpreact       | exact: False | approximate: True  | maxdiff: 8.67e-19 | shape (32, 64) ok
# ```
#
# - `exact` says whether the two are equal bit for bit. `exact: False` with
#   `approximate: True` is a correct answer: the same mathematics computed in another order
#   rounds differently in the last bits. A check that insisted on exact equality would
#   reject correct code.
# - `approximate` allows a relative difference of $10^{-5}$ plus an absolute one of
#   $10^{-8}$; `maxdiff` is the largest absolute difference.
# - The shape must be exactly the tensor's. The lecture's `cmp` broadcast the two tensors and
#   so let some wrongly shaped gradients pass; this check does not.
#
# The check then runs your cell's code the way the grader does, with the grader's tolerances,
# static check and feedback: with the true upstream gradients and with random ones (so that
# a missing branch or a hard-coded value shows), on this batch and on three batches of other
# sizes that it draws itself (one with a tiny activation variance, where eps matters). A
# wrong answer prints `WRONG` (or `wrong shape`) and, where it can tell, what the mistake is;
# `not attempted yet` gets no points, `not run yet` and `not checked` say what to run first, any
# other line is one the grader accepts, and a line that loses only part of the points says how
# much. A size quoted from one of the check's own batches says so. When your
# cell is right but an earlier answer it reads is wrong, it names the first wrong one
# (`dprobs above is wrong; with the true dprobs this cell is right`): fix that one first. When
# a value is stale it says what to re-run (`re-run dcounts_sum_inv's cell: dprobs changed
# since it ran`). A check cell never raises: after a kernel restart it says to run the setup
# cells, and a skipped or broken answer cell is named as such.

# %% [raw] begin="rules"

# %% [markdown]
# ## Exercise 1: backpropagate through everything, one step at a time
#
# Go backwards through the forward pass and compute the gradient of `loss` with respect to
# every intermediate and every parameter, each named `d` + the tensor's name. Three rules do
# most of the work:
#
# 1. **A gradient has the shape of its tensor.** `dX.shape == X.shape`, always. When you are
#    unsure where a transpose or a sum goes, the shapes usually tell you.
# 2. **Broadcasting forwards is summing backwards, and summing forwards is broadcasting
#    backwards.** A `(1, H)` tensor added to every row of an `(n, H)` one influenced `n`
#    outputs, so its gradient is the sum of theirs over the rows (`keepdim=True` keeps its
#    shape). Conversely, every entry that went into a sum receives the gradient of that sum.
# 3. **A tensor used twice gets the sum of both gradients.** `counts`, `logits`, `bndiff` and
#    `hprebn` each feed two later steps: compute the contribution of each branch and add them.
#
# The cells go in the order of the backward pass; each may use the gradients you computed
# before it.

# %% [raw] end="rules"

# %% [markdown]
# ### 1a. From the loss back to the logits
#
# - `loss` is minus the mean of `n` entries of `logprobs`, one per row. The other entries do not
#   affect the loss at all.
# - `log`, `exp` and powers act elementwise: multiply the upstream gradient by the local
#   derivative, elementwise.
# - Subtracting `logit_maxes` does not change `probs` (softmax does not care if the same number
#   is subtracted from a whole row): it is there only so that `exp` cannot overflow. So the true
#   `dlogit_maxes` is zero; yours should come out as zero up to rounding, by the chain rule.
#   (Writing zeros directly would match this check, but it is not a backward step: the grader
#   also checks every step with other upstream gradients.)
# - `logits` is used twice: directly in `norm_logits`, and through `logit_maxes`, since the max
#   of a row is one of its entries (`logits.max(1)` also gives its position).

# %% answer="dlogprobs"

# %% answer="dprobs"

# %% answer="dcounts_sum_inv"

# %% answer="dcounts_sum"

# %% answer="dcounts"

# %% answer="dnorm_logits"

# %% answer="dlogit_maxes"

# %% answer="dlogits"

# %% locked="plot_dlogits"
if not isinstance(globals().get("dlogits"), torch.Tensor) or dlogits.shape != logits.shape:
    print("dlogits not attempted yet: its picture appears here once it has the shape of logits")
else:
    import matplotlib.pyplot as plt  # here, not in the setup: it adds a second to every restart's setup

    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 5))
    left.imshow(logits.detach().numpy(), cmap="gray")
    left.set_title("logits")
    right.imshow(dlogits.detach().numpy(), cmap="gray")
    right.set_title("dlogits")
    plt.show()

# %% [raw] begin="1b"

# %% [markdown]
# ### 1b. The output layer and tanh
#
# - For a product `Y = X @ W`, write the matrix product of `dY` with `W` or `X` (transposed as
#   needed) whose shape is the shape of the gradient you want. That is all there is to it.
# - Differentiate tanh through its output: with $h = \tanh(x)$, $\frac{dh}{dx} = 1 - h^2$.

# %% answer="dh"

# %% answer="dW2"

# %% answer="db2"

# %% answer="dhpreact"

# %% [raw] end="1b"

# %% [raw] begin="1c"

# %% [markdown]
# ### 1c. Batch normalization
#
# - `bngain`, `bnbias`, `bnmeani` and `bnvar_inv` have shape `(1, n_hidden)` and are
#   broadcast over the `n` rows of the batch; `bnvar` is a sum over the rows of `bndiff2`,
#   weighted by $1/(n-1)$.
# - `bndiff` is used twice (in `bnraw` and in `bndiff2`), and so is `hprebn` (in `bndiff` and
#   in `bnmeani`).

# %% answer="dbngain"

# %% answer="dbnbias"

# %% answer="dbnraw"

# %% answer="dbnvar_inv"

# %% answer="dbnvar"

# %% answer="dbndiff2"

# %% answer="dbndiff"

# %% answer="dbnmeani"

# %% answer="dhprebn"

# %% [raw] end="1c"

# %% [raw] begin="1d"

# %% [markdown]
# ### 1d. The first layer and the embedding table
#
# - `embcat` is only a view of `emb` with another shape.
# - Batch normalization subtracts each column's mean, so adding a constant to a column of
#   `hprebn` (which is what `b1` does) changes nothing downstream: `db1` is zero in exact
#   arithmetic. As with `dlogit_maxes`, compute it by the chain rule anyway.
# - `emb = C[Xb]` copies row `Xb[i, j]` of `C` into `emb[i, j]`. A character that occurs
#   several times in `Xb` (`.` certainly does: it pads the start of every word) had its row
#   copied several times, so its gradient is the **sum** over all the positions that used it: a
#   scatter-add. An assignment such as `dC[Xb] = demb` keeps only one of those contributions.
#   A Python loop over the positions of `Xb` is fine; torch also has a scatter-add.

# %% answer="dembcat"

# %% answer="dW1"

# %% answer="db1"

# %% answer="demb"

# %% answer="dC"

# %% [raw] end="1d"

# %% [markdown]
# ## Exercise 2: the cross-entropy loss in one step
#
# Exercise 1 went from `loss` to `logits` in eight small steps. On paper they collapse into a
# short formula. For one example with logits $z$, probabilities $p = \mathrm{softmax}(z)$,
# $p_j = e^{z_j} / \sum_k e^{z_k}$, and target $y$, the loss is $\ell = -\log p_y
# = -z_y + \log \sum_k e^{z_k}$, so
#
# $$\frac{\partial \ell}{\partial z_j} = -[j = y] + \frac{e^{z_j}}{\sum_k e^{z_k}}
# = p_j - [j = y],$$
#
# where $[j = y]$ is 1 at the target and 0 elsewhere. The loss is the mean over the $n$
# examples of the batch, which divides each row's gradient by $n$.
#
# Compute `dlogits` from the forward pass alone (`logits`, `Yb`, `n`; `F.softmax` is
# allowed), without the gradients of exercise 1. It is shorter and also faster: this is what
# `F.cross_entropy` does. Read it as forces on the logits: every wrong character is pushed
# down in proportion to the probability it got, the right one is pulled up by $1 - p_y$, and
# each row sums to zero (the picture above shows one dark cell per row, at the target).

# %% answer="ex2_dlogits"

# %% [raw] begin="ex3"

# %% [markdown]
# ## Exercise 3: batch normalization in one step
#
# For each hidden neuron (a column), batch normalization computes over the $n$ examples of
# the batch (with $x$ = `hprebn`, $y$ = `hpreact`, $\gamma$ = `bngain`, $\beta$ = `bnbias`)
#
# $$\mu = \frac{1}{n}\sum_i x_i, \qquad \sigma^2 = \frac{1}{n-1}\sum_i (x_i - \mu)^2, \qquad
# \hat x_i = \frac{x_i - \mu}{\sqrt{\sigma^2 + \epsilon}}, \qquad y_i = \gamma \hat x_i + \beta.$$
#
# Each $x_i$ reaches the loss through three paths: directly, through $\mu$ and through
# $\sigma^2$. Adding them up and simplifying gives, with $\hat x$ = `bnraw` and
# $(\sigma^2 + \epsilon)^{-1/2}$ = `bnvar_inv`,
#
# $$\frac{\partial L}{\partial x_i} = \frac{\gamma\,(\sigma^2+\epsilon)^{-1/2}}{n}
# \left( n\,\frac{\partial L}{\partial y_i} - \sum_j \frac{\partial L}{\partial y_j}
# - \frac{n}{n-1}\,\hat x_i \sum_j \frac{\partial L}{\partial y_j}\,\hat x_j \right).$$
#
# (Try deriving it on paper.) The factor $\frac{n}{n-1}$ comes from the unbiased variance of
# the forward pass; with the biased one ($\frac{1}{n}$) it would be 1. Be consistent: using
# one estimate during training and the other at inference (which is what
# `torch.nn.BatchNorm1d` does) is a mismatch that matters for small batches.
#
# Compute `dhprebn` from `dhpreact` and the forward pass. So that a mistake in exercise 1
# cannot spoil this one, the next cell sets `dhpreact` to autograd's value.

# %% locked="setup_ex3_dhpreact"
dhpreact = hpreact.grad.clone()  # autograd's: exercise 3 does not depend on exercise 1

# %% answer="ex3_dhprebn"

# %% [raw] end="ex3"

# %% [raw] begin="ex4"

# %% [markdown]
# ## Exercise 4: train with your own backward pass
#
# Now the lecture's full training run, with every gradient computed by you. The network is
# the same but bigger (200 hidden neurons) and runs in float32, as in the lecture; its loss
# is `F.cross_entropy`, and batch normalization still uses the unbiased variance.
# `fused_forward` returns the loss and a `cache` of the forward pass's tensors: `Xb`, `emb`,
# `embcat`, `hprebn`, `bnmeani`, `bnvar`, `bnvar_inv`, `bnraw`, `hpreact`, `h` and `logits`.

# %% locked="setup_ex4_forward"
def fused_forward(params, X, Y=None, bnstats=None):
    """The loss (None without targets Y) and the cache that a backward pass needs.

    bnstats, a (mean, variance) pair, replaces the batch's statistics once training is
    over, so that a single example can be evaluated on its own.
    """
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

# %% [markdown]
# Write `manual_backward(params, cache, Yb)`: it returns the gradient of the loss with
# respect to each of the seven parameters, from the formulas of exercises 2 and 3 and the
# rules of exercise 1. It may use only its arguments, `torch` and `F` (the grader calls it
# with networks and batches of other sizes), and no autograd. Each gradient starts as
# `None`, which the check below reports as not attempted.

# %% [raw] end="ex4"

# %% answer="ex4_backward"

# %% locked="setup_ex4_check"
g = torch.Generator().manual_seed(SEED)
params = init_params(200, torch.float32, g)
ix = torch.randint(0, Xtr.shape[0], (batch_size,), generator=g)
leaves = {name: p.clone().requires_grad_() for name, p in params.items()}
loss_autograd, cache = fused_forward(leaves, Xtr[ix], Ytr[ix])
loss_autograd.backward()  # autograd's gradients, only to check yours
# 50 SGD steps with your gradients and with autograd's, from the same start on the same batches
g = torch.Generator().manual_seed(SEED + 1)
batches = [(Xtr[ix], Ytr[ix]) for ix in
           (torch.randint(0, Xtr.shape[0], (batch_size,), generator=g) for _ in range(50))]
start = init_params(200, torch.float64, g)
grads = None  # until manual_backward returns: never an earlier run's
with torch.no_grad():
    try:
        grads = manual_backward(params, {k: v.detach() for k, v in cache.items()}, Ytr[ix]) or {}
    except Exception as error:  # Run All goes on: the checks below run it again and say what is wrong
        print(f"manual_backward raised {type(error).__name__}: {error} (the checks below say more)")

# %% [raw] begin="ex4_checks"

# %% graded="ex4_dC"
check("ex4_dC", answers="grads", gradients_of="leaves")

# %% graded="ex4_dW1"
check("ex4_dW1", answers="grads", gradients_of="leaves")

# %% graded="ex4_db1"
check("ex4_db1", answers="grads", gradients_of="leaves")

# %% graded="ex4_dW2"
check("ex4_dW2", answers="grads", gradients_of="leaves")

# %% graded="ex4_db2"
check("ex4_db2", answers="grads", gradients_of="leaves")

# %% graded="ex4_dbngain"
check("ex4_dbngain", answers="grads", gradients_of="leaves")

# %% graded="ex4_dbnbias"
check("ex4_dbnbias", answers="grads", gradients_of="leaves")

# %% [raw] end="ex4_checks"

# %% graded="ex4_training"
check.training(start="start", batches="batches", lr=0.1)

# %% [raw] begin="training"

# %% [markdown]
# ### Training
#
# The loop below never calls `loss.backward()`: it runs inside `torch.no_grad()` and updates
# the parameters with your gradients, by stochastic gradient descent with the lecture's
# learning rate, 0.1, decayed to 0.01 for the second half of the steps. By default it makes
# a short run of 2,000 steps (about a second); set `FULL_RUN = True` for the lecture's 200,000
# steps (about a minute on one CPU thread). With the lecture's `names.txt` the full run reaches a loss of about 2.07
# on the training set and 2.11 on the validation set, the same as with autograd; other
# word lists give other numbers.

# %% [raw] end="training"

# %%
FULL_RUN = False  # True: the lecture's 200,000 steps

# %% locked="train_loop"
max_steps = 200_000 if FULL_RUN else 2_000

def train(params, max_steps, g):
    """SGD on manual_backward's gradients: every step's log10 loss, None if not attempted or it cannot
    train (Run All goes on to the end, whatever manual_backward returns)."""
    lossi = []
    with torch.no_grad():  # nothing here may reach autograd
        for i in range(max_steps):
            ix = torch.randint(0, Xtr.shape[0], (batch_size,), generator=g)
            loss, cache = fused_forward(params, Xtr[ix], Ytr[ix])
            try:
                grads = manual_backward(params, cache, Ytr[ix])
            except Exception as error:
                print(f"exercise 4: manual_backward raised {type(error).__name__}: {error}: skipping training")
                return None
            if grads is None or isinstance(grads, dict) and any(grads.get(name) is None for name in params):
                print("exercise 4 not attempted yet: skipping training")
                return None
            if not isinstance(grads, dict):
                print(f"exercise 4: manual_backward returned a {type(grads).__name__}, not a dict of gradients by "
                      "parameter name: skipping training")
                return None
            shaped = [name for name, p in params.items() if getattr(grads[name], "shape", None) != p.shape]
            if shaped:
                print(f"exercise 4: manual_backward's gradient of {shaped[0]} is not shaped like {shaped[0]} "
                      "(its check above says more): skipping training")
                return None
            lr = 0.1 if i < max_steps // 2 else 0.01  # step learning rate decay
            for name, p in params.items():
                p -= lr * grads[name]
            if i % (max_steps // 10) == 0 or i == max_steps - 1:
                print(f"step {i:7d}/{max_steps}: loss {loss.item():.4f}")
            lossi.append(loss.log10().item())
    return lossi

g = torch.Generator().manual_seed(SEED)
params = init_params(200, torch.float32, g)
lossi = train(params, max_steps, g)

# %% locked="train_plot"
if lossi is None:
    print("exercise 4 has not trained: no loss curve")
else:
    import matplotlib.pyplot as plt

    window = max_steps // 100  # average the noisy per-batch losses over windows of steps
    plt.plot(range(0, max_steps, window), torch.tensor(lossi).view(-1, window).mean(1))
    plt.xlabel("step")
    plt.ylabel(f"log10 loss, mean of {window} steps")
    plt.show()

# %% [raw] begin="calibrate"

# %% [markdown]
# ### Batch normalization after training
#
# The network was trained on the statistics of each batch. To use it on one example at a
# time, fix the mean and the variance to those of the whole training set (the lecture's
# calibration step; a running average kept during training does the same job).

# %% locked="train_calibrate"
if lossi is None:
    print("exercise 4 has not trained: no calibration")
else:
    with torch.no_grad():
        _, cache = fused_forward(params, Xtr)
    bnstats = cache["bnmeani"], cache["bnvar"]
    print(f"batch normalization calibrated on {len(Xtr)} training examples")

# %% [raw] end="calibrate"

# %% [raw] begin="evaluate"

# %% locked="train_evaluate"
if lossi is None:
    print("exercise 4 has not trained: no evaluation")
else:
    with torch.no_grad():
        for split, (X, Y) in {"train": (Xtr, Ytr), "val": (Xdev, Ydev)}.items():
            print(f"{split} loss {fused_forward(params, X, Y, bnstats)[0].item():.4f}")

# %% locked="train_sample"
@torch.no_grad()
def sample(g, max_length=50):
    """One word, a character at a time, until the model picks '.' (the end)."""
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
    print("exercise 4 has not trained: no samples")
elif not all(torch.isfinite(p).all() for p in params.values()):
    print("exercise 4's training diverged (a parameter is inf or nan): no samples; the checks above say why")
else:
    g = torch.Generator().manual_seed(SEED + 10)
    for _ in range(20):
        print(sample(g))

# %% [raw] end="evaluate"

# %% [raw] begin="takeaway"

# %% [markdown]
# ## What to take away
#
# - A gradient has the shape of its tensor; shapes tell you where transposes and sums go.
# - Broadcasting forwards is summing backwards, and the other way round.
# - A tensor used twice collects gradient from both uses.
# - Fused gradients (cross-entropy, batch normalization) are shorter, faster and easier to
#   read than the chain of atomic steps, because most of the intermediate terms cancel.
# - Test gradients on nonzero, non-unit values: zeros and ones hide mistakes.
# - Compare floating-point results with a tolerance, never for exact equality.
# - Knowing the backward pass shows you real bugs. Clipping the *loss* instead of the
#   *gradients*, for example, sets the gradient of every clipped example to zero: the examples
#   the model gets most wrong stop teaching it anything. And batch normalization must use the
#   same variance (biased or unbiased) in training and at inference.
#
# In practice you will keep using autograd, but now you know what it does.

# %% [raw] end="takeaway"
