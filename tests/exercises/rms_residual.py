"""A residual block around an RMSNorm, with the normalization as one fused cell: h0 is read by the
normalization and by the residual's sum, outside the block, so the block's cell is given that use's
gradient (dh1) beside the block's own (dhn). An instructor trial's course built this block with only dhn
given, and no answer, the derived one included, could be right."""
from grader.authoring.define import exercise

EXERCISE = exercise(
    name="rms-residual",
    title="A residual block around an RMSNorm",
    sizes={"n": (16, (6, 24)), "d": (6, (3, 10)), "hidden": (12, (4, 18)), "classes": (5, (3, 9))},
    parameters="""
        W0 = randn(d, hidden) / d ** 0.5
        g = ones(hidden)
        W1 = randn(hidden, hidden) / hidden ** 0.5
        W2 = randn(hidden, classes) * 0.3
    """,
    data="""
        X = randn(n, d)
        Y = randint(classes, (n,))
    """,
    forward="""
        h0 = X @ W0
        ms = (h0 ** 2).mean(1, keepdim=True)
        rrms = (ms + 1e-6) ** -0.5
        hn = h0 * rrms * g
        a = torch.relu(hn @ W1)
        h1 = h0 + a
        logits = h1 @ W2
        loss = F.cross_entropy(logits, Y)
    """,
    fused={"dh0": ("hn", "the RMSNorm step")},
)
