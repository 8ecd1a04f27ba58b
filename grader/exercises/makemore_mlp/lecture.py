"""Karpathy's makemore MLP, the exercise the course was built for, in the same short form as any
instructor's: everything but what only the lecture knows is derived from these lines."""
from grader.authoring.define import exercise
from grader.exercises.makemore_mlp.mistakes import MISTAKES

# Targets as distinct as the vocabulary allows, so that mistakes do not cancel; a batch with fewer examples than
# characters never targets the last one, so that a one-hot without num_classes (as wide as the largest target)
# is as narrow in the grader as in the notebook, whatever the course's salt draws.
DATA = """
    Xb = randint(vocab, (n, block_size))
    Yb = randperm(vocab - (n < vocab)).repeat(n // vocab + 1)[:n][randperm(n)]
"""
# Training draws every index and target uniform, as the course always has: the losses feedback quotes stay.
TRAINING = """
    Xb = randint(vocab, (steps, n, block_size))
    Yb = randint(vocab, (steps, n))
"""
# All targets distinct in the first hidden configuration; in the last, a batch variance comparable to
# eps = 1e-5, so that a dropped eps shows.
FIRST, TINY = "n <= vocab", 3e-3

EXERCISE = exercise(
    name="makemore-mlp",
    title="Becoming a backprop ninja: the makemore MLP",
    sizes={"n": (32, (8, 40)), "vocab": (27, (11, 41)), "block_size": (3, (2, 6)), "n_embd": (10, (4, 17)),
           "n_hidden": (64, (12, 72))},
    # The lecture's init, deliberately nonzero: W2 = 0 or bngain = 1 would hide wrong gradients.
    parameters="""
        C = randn(vocab, n_embd)
        W1 = randn(block_size * n_embd, n_hidden) * (5 / 3) / math.sqrt(block_size * n_embd)
        b1 = randn(n_hidden) * 0.1
        W2 = randn(n_hidden, vocab) * 0.1
        b2 = randn(vocab) * 0.1
        bngain = randn(1, n_hidden) * 0.1 + 1.0
        bnbias = randn(1, n_hidden) * 0.1
    """,
    data=DATA,
    # Batch norm with the unbiased variance (1/(n-1)), the max subtracted from the logits for stability.
    forward="""
        emb = C[Xb]
        embcat = emb.view(emb.shape[0], -1)
        hprebn = embcat @ W1 + b1
        bnmeani = 1 / n * hprebn.sum(0, keepdim=True)
        bndiff = hprebn - bnmeani
        bndiff2 = bndiff**2
        bnvar = 1 / (n - 1) * bndiff2.sum(0, keepdim=True)
        bnvar_inv = (bnvar + 1e-5) ** -0.5
        bnraw = bndiff * bnvar_inv
        hpreact = bngain * bnraw + bnbias
        h = torch.tanh(hpreact)
        logits = h @ W2 + b2
        logit_maxes = logits.max(1, keepdim=True).values
        norm_logits = logits - logit_maxes
        counts = norm_logits.exp()
        counts_sum = counts.sum(1, keepdim=True)
        counts_sum_inv = counts_sum**-1
        probs = counts * counts_sum_inv
        logprobs = probs.log()
        loss = -logprobs[range(n), Yb].mean()
    """,
    # The lecture asks for a layer's parameters before the tensor it scales: dbngain, dbnbias, dbnraw.
    order="""dlogprobs dprobs dcounts_sum_inv dcounts_sum dcounts dnorm_logits dlogit_maxes dlogits dh dW2 db2
             dhpreact dbngain dbnbias dbnraw dbnvar_inv dbnvar dbndiff2 dbndiff dbnmeani dhprebn dembcat dW1 db1
             demb dC""",
    fused={"dlogits": ("loss", "the cross-entropy step"), "dhprebn": ("hpreact", "the batch-norm step")},
    backward="Xb emb embcat hprebn bnmeani bnvar bnvar_inv bnraw hpreact h logits",
    training=TRAINING,
    hidden={"first": FIRST, "last": {"W1": TINY}},
    parts={2: "cross-entropy in one step", 3: "batch norm in one step"},
    assignment="backprop_ninja",
    mistakes=MISTAKES,
    demo="grader.exercises.makemore_mlp.demo:CLASS",
)
