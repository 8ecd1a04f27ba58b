"""A 1-D convolution over five characters written as a matrix product: the three windows of three
consecutive embeddings are stacked, each flattened into one row, multiplied by the kernel, relu'd, and the
three positions' features flattened into the output layer."""
from grader.authoring.define import exercise

EXERCISE = exercise(
    name="conv1d",
    title="A 1-D convolution as a matmul over stacked windows",
    sizes={"n": (32, (8, 40)), "vocab": (27, (7, 40)), "block": 5, "n_embd": (10, (3, 16)),
           "n_hidden": (24, (6, 40))},
    parameters="""
        C = randn(vocab, n_embd)
        Wk = randn(3 * n_embd, n_hidden) / (3 * n_embd) ** 0.5
        bk = randn(n_hidden) * 0.1
        Wo = randn(3 * n_hidden, vocab) * 0.1
        bo = randn(vocab) * 0.1
    """,
    data="""
        Xb = randint(vocab, (n, block))
        Yb = randint(vocab, (n,))
    """,
    forward="""
        emb = C[Xb]
        win = torch.stack([emb[:, 0:3], emb[:, 1:4], emb[:, 2:5]], dim=1)
        cols = win.reshape(n, 3, 3 * n_embd)
        conv = torch.relu(cols @ Wk + bk)
        flat = conv.flatten(1)
        logits = flat @ Wo + bo
        loss = F.cross_entropy(logits, Yb)
    """,
    fused={"dlogits": "loss"},
)
