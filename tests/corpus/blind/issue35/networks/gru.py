"""A GRU cell unrolled over three characters: update gate z, reset gate r, candidate c; the first step
starts from a zero state, so it has no reset gate and no recurrent term."""
from grader.authoring.define import exercise

EXERCISE = exercise(
    name="gru",
    title="A GRU unrolled over three steps",
    sizes={"n": (32, (8, 40)), "vocab": (27, (7, 40)), "block": 3, "n_embd": (10, (3, 16)),
           "n_hidden": (24, (6, 40))},
    parameters="""
        C = randn(vocab, n_embd)
        Wz = randn(n_embd, n_hidden) / n_embd ** 0.5
        Uz = randn(n_hidden, n_hidden) / n_hidden ** 0.5
        bz = randn(n_hidden) * 0.1
        Wr = randn(n_embd, n_hidden) / n_embd ** 0.5
        Ur = randn(n_hidden, n_hidden) / n_hidden ** 0.5
        br = randn(n_hidden) * 0.1
        Wc = randn(n_embd, n_hidden) / n_embd ** 0.5
        Uc = randn(n_hidden, n_hidden) / n_hidden ** 0.5
        bc = randn(n_hidden) * 0.1
        Wy = randn(n_hidden, vocab) * 0.1
        by = randn(vocab) * 0.1
    """,
    data="""
        Xb = randint(vocab, (n, block))
        Yb = randint(vocab, (n,))
    """,
    forward="""
        emb = C[Xb]
        z1 = torch.sigmoid(emb[:, 0] @ Wz + bz)
        c1 = torch.tanh(emb[:, 0] @ Wc + bc)
        h1 = z1 * c1
        z2 = torch.sigmoid(emb[:, 1] @ Wz + h1 @ Uz + bz)
        r2 = torch.sigmoid(emb[:, 1] @ Wr + h1 @ Ur + br)
        c2 = torch.tanh(emb[:, 1] @ Wc + (r2 * h1) @ Uc + bc)
        h2 = (1 - z2) * h1 + z2 * c2
        z3 = torch.sigmoid(emb[:, 2] @ Wz + h2 @ Uz + bz)
        r3 = torch.sigmoid(emb[:, 2] @ Wr + h2 @ Ur + br)
        c3 = torch.tanh(emb[:, 2] @ Wc + (r3 * h2) @ Uc + bc)
        h3 = (1 - z3) * h2 + z3 * c3
        logits = h3 @ Wy + by
        loss = F.cross_entropy(logits, Yb)
    """,
    fused={"dlogits": "loss"},
)
