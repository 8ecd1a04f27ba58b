# %% [raw]
# The text of a makemore variant's notebook where it differs from the lecture's, in jupytext's percent
# format: one section per `section="NAME"` raw cell, each replacing the lecture source's section of the
# same NAME (backprop_ninja.py marks them). ../notebook_source.py composes a variant's source from
# the two and fills each `{{key}}` with what the variant derives: its pieces' names, its answer cells, its
# init and fused forward, and the piece texts of variant_prose.md. A lecture section named here by no
# section is kept, or edited where it names batch norm (../notebook_source.py says where). This
# file is not a module: nothing imports it.

# %% [raw] section="intro"

# %% [markdown]
# # Becoming a backprop ninja: {{variant}}
#
# In this notebook you write the backward pass of a small neural network by hand, one tensor
# at a time, and check every gradient you compute against PyTorch's autograd. The network is
# a variant of the character-level language model of Andrej Karpathy's lecture *Building
# makemore Part 4: Becoming a Backprop Ninja* (MIT licence): three characters of context go
# through an embedding table, {{architecture}}, and an output layer that predicts the next
# character. Its answers are not the lecture's: {{changes}}.
#
# Why bother, when `loss.backward()` does it all? Because when training goes wrong (saturated
# activations, dead neurons, exploding gradients, a shape bug that broadcasts without an error)
# you find the cause much faster if you know what flows backwards through every line.
#
# **What you will do**
#
# 1. **Exercise 1**: backpropagate through the forward pass one small step at a time:
#    {{count}} gradients, from `dlogprobs` back to the embedding table's `dC`.
# 2. **Exercise 2**: the gradient of the cross-entropy loss in one short formula (`dlogits`).
# 3. {{exercise3}}
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
# - An answer cell may use only the parameters `{{parameters}}`; the batch `Xb, Yb` and its
#   size `n`; the forward pass's intermediates by their names below (`emb`, `embcat`,
#   `{{pre}}`, ..., `probs`, `logprobs`); `torch` and `F`; and the variables assigned by
#   earlier answer cells of the *same* exercise.
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

# %% [raw] section="params"

# %% [markdown]
# ## The network's parameters
#
# The sizes are the lecture's: 10-dimensional character embeddings and 64 hidden neurons.
#
# **Why this initialization.** None of these values is zero{{gain_sentence}}, on purpose: a
# zero or a one can make a wrong gradient look right. With `W2 = 0`, for instance, `d{{feature}}`
# and every gradient further back (down to `dC`) would be zero, and so would almost any wrong
# formula for them. (For real training you would start the biases at zero; here the point is
# to catch mistakes.) `W1` is scaled for {{activation}} by the gain {{gain}}, as Kaiming's
# initialization does.
#
# **Why a seed.** Every random draw takes one generator `g`, seeded once, so the parameters
# and the batch are the same on every run and for everybody.
#
# **Why float64.** {{float64_exercises}} run in double precision: rounding errors are then about
# $10^{-16}$, so they can never be confused with a mistake (which is typically $10^{-3}$ or
# more). In float32 a gradient that is exactly zero in exact arithmetic (`dlogit_maxes`) comes
# out as rounding noise of about $10^{-8}$, as large as the comparison's tolerance.
#
# Finally we draw one batch of `n = 32` examples.

# %% [raw] section="forward"

# %% [markdown]
# ## The forward pass, in small steps
#
# This is the network's forward pass with the cross-entropy loss, {{forward_pieces}} written out
# as atomic operations, so that every intermediate result has a name and a gradient for you to
# compute.{{norm_sentence}}
#
# `retain_grad()` asks autograd to keep the gradient of every intermediate tensor, so that
# the self-check can compare yours with it.

# %% locked="setup_forward"
{{forward}}

# Autograd's gradients, to check yours against
for p in parameters:
    p.grad = None
for t in [{{retained}}]:
    t.retain_grad()
loss.backward()
print(f"loss {loss.item():.4f}")

# %% [raw] section="rules"

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
# 3. **A tensor used more than once gets the sum of the gradients of its uses.** {{reused}}
#    each feed more than one later step: compute the contribution of each and add them.
#
# The cells go in the order of the backward pass; each may use the gradients you computed
# before it.

# %% [raw] section="1b"

# %% [markdown]
# ### 1b. The output layer{{block_1b}}
#
# - For a product `Y = X @ W`, write the matrix product of `dY` with `W` or `X` (transposed as
#   needed) whose shape is the shape of the gradient you want. That is all there is to it.
{{1b}}

{{answers_1b}}

# %% [raw] section="1c"

# %% [markdown]
{{1c}}

{{answers_1c}}

# %% [raw] section="ex3"

# %% [markdown]
{{ex3}}

# %% locked="setup_ex3_dhpreact"
dhpreact = hpreact.grad.clone()  # autograd's: exercise 3 does not depend on exercise 1

# %% answer="{{ex3_cell}}"

# %% [raw] section="ex4"

# %% [markdown]
# ## Exercise 4: train with your own backward pass
#
# Now the lecture's full training run, with every gradient computed by you. The network is
# the same but bigger (200 hidden neurons) and runs in float32, as in the lecture; its loss
# is `F.cross_entropy`.{{norm_sentence}}
# `fused_forward` returns the loss and a `cache` of the forward pass's tensors: {{cache}}.

# %% locked="setup_ex4_forward"
{{fused_forward}}

# %% [markdown]
# Write `manual_backward(params, cache, Yb)`: it returns the gradient of the loss with
# respect to each of the {{parameter_count}} parameters, from the formulas of exercises 2{{and_3}} and the
# rules of exercise 1. It may use only its arguments, `torch` and `F` (the grader calls it
# with networks and batches of other sizes), and no autograd. Each gradient starts as
# `None`, which the check below reports as not attempted.

# %% [raw] section="ex4_checks"

{{checks}}

# %% [raw] section="training"

# %% [markdown]
# ### Training
#
# The loop below never calls `loss.backward()`: it runs inside `torch.no_grad()` and updates
# the parameters with your gradients, by stochastic gradient descent with the lecture's
# learning rate, 0.1, decayed to 0.01 for the second half of the steps. By default it makes
# a short run of 2,000 steps (a few seconds); set `FULL_RUN = True` for the lecture's 200,000
# steps (minutes on one CPU thread). Autograd's gradients would train it to the same losses.

# %% [raw] section="calibrate"

# %% [markdown]
{{ex4_after}}
