"""Two steps of a GRU's update gate and its blend, as small as the tests of issue 35 need: a gate whose
line does several things (a sigmoid of a sum of products), read at two time steps."""
from grader.authoring.define import exercise

EXERCISE = exercise(
    name="gru-gate",
    title="A GRU's update gate over two steps",
    sizes={"n": (12, (6, 20)), "vocab": (9, (5, 14)), "block": 2, "n_embd": (4, (3, 8)), "n_hidden": (6, (4, 10))},
    parameters="""
        C = randn(vocab, n_embd)
        Wz = randn(n_embd, n_hidden) / n_embd ** 0.5
        Uz = randn(n_hidden, n_hidden) / n_hidden ** 0.5
        Wh = randn(n_embd, n_hidden) / n_embd ** 0.5
        Wy = randn(n_hidden, vocab) * 0.1
    """,
    data="""
        Xb = randint(vocab, (n, block))
        Yb = randint(vocab, (n,))
    """,
    forward="""
        emb = C[Xb]
        z1 = torch.sigmoid(emb[:, 0] @ Wz)
        h1 = z1 * torch.tanh(emb[:, 0] @ Wh)
        z2 = torch.sigmoid(emb[:, 1] @ Wz + h1 @ Uz)
        h2 = (1 - z2) * h1 + z2 * torch.tanh(emb[:, 1] @ Wh)
        logits = h2 @ Wy
        loss = F.cross_entropy(logits, Yb)
    """,
    fused={"dlogits": "loss"},
)
