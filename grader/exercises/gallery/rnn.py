"""A vanilla recurrent network unrolled over three characters: each step reads its character's embedding
and the hidden state the step before left, through the same weights, so every weight's gradient is a sum
over time and each hidden state's gradient arrives from the step after it."""
from grader.authoring.define import exercise

EXERCISE = exercise(
    name="rnn",
    title="A vanilla RNN unrolled over three steps",
    sizes={"n": (32, (8, 40)), "vocab": (27, (7, 40)), "block": 3, "n_embd": (10, (3, 16)),
           "n_hidden": (64, (6, 80))},
    parameters="""
        C = randn(vocab, n_embd)
        Wx = randn(n_embd, n_hidden) / n_embd ** 0.5
        Wh = randn(n_hidden, n_hidden) / n_hidden ** 0.5
        bh = randn(n_hidden) * 0.1
        Wy = randn(n_hidden, vocab) * 0.1
        by = randn(vocab) * 0.1
    """,
    data="""
        Xb = randint(vocab, (n, block))
        Yb = randint(vocab, (n,))
    """,
    forward="""
        emb = C[Xb]
        h1 = torch.tanh(emb[:, 0] @ Wx + bh)
        h2 = torch.tanh(emb[:, 1] @ Wx + h1 @ Wh + bh)
        h3 = torch.tanh(emb[:, 2] @ Wx + h2 @ Wh + bh)
        logits = h3 @ Wy + by
        loss = F.cross_entropy(logits, Yb)
    """,
    fused={"dlogits": "loss"},
    backward=True,
)
