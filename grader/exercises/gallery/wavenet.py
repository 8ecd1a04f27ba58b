"""makemore part 5's WaveNet: characters of context merged two at a time, through three blocks of
linear layer, batch norm over the batch and time dimensions, and tanh, then cross-entropy."""
from grader.authoring.define import exercise

EXERCISE = exercise(
    name="wavenet",
    title="A WaveNet: pairs of characters merged three times",
    sizes={"n": (32, (8, 40)), "vocab": (27, (11, 41)), "block": 8, "n_embd": (10, (4, 17)),
           "n_hidden": (24, (12, 40))},
    parameters="""
        C = randn(vocab, n_embd)
        W1 = randn(2 * n_embd, n_hidden) * (5 / 3) / (2 * n_embd) ** 0.5
        g1 = randn(n_hidden) * 0.1 + 1
        be1 = randn(n_hidden) * 0.1
        W2 = randn(2 * n_hidden, n_hidden) * (5 / 3) / (2 * n_hidden) ** 0.5
        g2 = randn(n_hidden) * 0.1 + 1
        be2 = randn(n_hidden) * 0.1
        W3 = randn(2 * n_hidden, n_hidden) * (5 / 3) / (2 * n_hidden) ** 0.5
        g3 = randn(n_hidden) * 0.1 + 1
        be3 = randn(n_hidden) * 0.1
        W4 = randn(n_hidden, vocab) * 0.1
        b4 = randn(vocab) * 0.1
    """,
    data="""
        Xb = randint(vocab, (n, block))
        Yb = randint(vocab, (n,))
    """,
    forward="""
        emb = C[Xb]
        x1 = emb.view(n, block // 2, 2 * n_embd)
        h1pre = x1 @ W1
        m1 = h1pre.mean((0, 1), keepdim=True)
        v1 = h1pre.var((0, 1), keepdim=True)
        h1n = (h1pre - m1) / (v1 + 1e-5) ** 0.5
        h1 = torch.tanh(g1 * h1n + be1)
        x2 = h1.view(n, block // 4, 2 * n_hidden)
        h2pre = x2 @ W2
        m2 = h2pre.mean((0, 1), keepdim=True)
        v2 = h2pre.var((0, 1), keepdim=True)
        h2n = (h2pre - m2) / (v2 + 1e-5) ** 0.5
        h2 = torch.tanh(g2 * h2n + be2)
        x3 = h2.view(n, 2 * n_hidden)
        h3pre = x3 @ W3
        m3 = h3pre.mean(0, keepdim=True)
        v3 = h3pre.var(0, keepdim=True)
        h3n = (h3pre - m3) / (v3 + 1e-5) ** 0.5
        h3 = torch.tanh(g3 * h3n + be3)
        logits = h3 @ W4 + b4
        loss = F.cross_entropy(logits, Yb)
    """,
    fused={"dlogits": "loss"},
    backward=True,
    # The 1e-5 left out under a square root changes a variance's gradient by about the tolerance: found on
    # some drawn sizes and not on others, its grade would depend on the draw (`exercise check` says so).
    accept={"dv1": "eps-dropped", "dv2": "eps-dropped", "dv3": "eps-dropped"},
)
