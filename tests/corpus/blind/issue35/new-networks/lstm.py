"""An LSTM cell unrolled over three characters, the four gates from one matrix product per step: the
first 3 * n_hidden columns are sigmoid gates (input, forget, output), the last n_hidden the tanh
candidate. The state starts at zero, so step 1 has no recurrent term and no forget gate use."""
from grader.authoring.define import exercise

EXERCISE = exercise(
    name="lstm",
    title="An LSTM unrolled over three steps",
    sizes={"n": (32, (8, 40)), "vocab": (27, (7, 40)), "block": 3, "n_embd": (10, (3, 16)),
           "n_hidden": (24, (6, 40))},
    parameters="""
        C = randn(vocab, n_embd)
        Wx = randn(n_embd, 4 * n_hidden) / n_embd ** 0.5
        Wh = randn(n_hidden, 4 * n_hidden) / n_hidden ** 0.5
        b = randn(4 * n_hidden) * 0.1
        Wy = randn(n_hidden, vocab) * 0.1
        by = randn(vocab) * 0.1
    """,
    data="""
        Xb = randint(vocab, (n, block))
        Yb = randint(vocab, (n,))
    """,
    forward="""
        emb = C[Xb]
        a1 = emb[:, 0] @ Wx + b
        s1 = torch.sigmoid(a1[:, :3 * n_hidden])
        g1 = torch.tanh(a1[:, 3 * n_hidden:])
        c1 = s1[:, :n_hidden] * g1
        h1 = s1[:, 2 * n_hidden:] * torch.tanh(c1)
        a2 = emb[:, 1] @ Wx + h1 @ Wh + b
        s2 = torch.sigmoid(a2[:, :3 * n_hidden])
        g2 = torch.tanh(a2[:, 3 * n_hidden:])
        c2 = s2[:, n_hidden:2 * n_hidden] * c1 + s2[:, :n_hidden] * g2
        h2 = s2[:, 2 * n_hidden:] * torch.tanh(c2)
        a3 = emb[:, 2] @ Wx + h2 @ Wh + b
        s3 = torch.sigmoid(a3[:, :3 * n_hidden])
        g3 = torch.tanh(a3[:, 3 * n_hidden:])
        c3 = s3[:, n_hidden:2 * n_hidden] * c2 + s3[:, :n_hidden] * g3
        h3 = s3[:, 2 * n_hidden:] * torch.tanh(c3)
        logits = h3 @ Wy + by
        loss = F.cross_entropy(logits, Yb)
    """,
    fused={"dlogits": "loss"},
)
