"""An MLP whose hidden layer is normalized over its features, each example on its own: layer norm
written out as mean, centring, variance, reciprocal square root, gain and bias, then tanh."""
from grader.authoring.define import exercise

EXERCISE = exercise(
    name="layernorm_mlp",
    title="An MLP with layer norm written out",
    sizes={"n": (32, (8, 40)), "vocab": (27, (7, 40)), "block": (3, (2, 6)), "n_embd": (10, (3, 14)),
           "n_hidden": (64, (6, 48))},
    parameters="""
        C = randn(vocab, n_embd)
        W1 = randn(block * n_embd, n_hidden) * (5 / 3) / (block * n_embd) ** 0.5
        b1 = randn(n_hidden) * 0.1
        g = randn(n_hidden) * 0.1 + 1
        beta = randn(n_hidden) * 0.1
        W2 = randn(n_hidden, vocab) * 0.1
        b2 = randn(vocab) * 0.1
    """,
    data="""
        Xb = randint(vocab, (n, block))
        Yb = randint(vocab, (n,))
    """,
    forward="""
        emb = C[Xb]
        embcat = emb.view(n, block * n_embd)
        hpre = embcat @ W1 + b1
        mu = hpre.mean(1, keepdim=True)
        xc = hpre - mu
        var = (xc ** 2).mean(1, keepdim=True)
        rstd = (var + 1e-5) ** -0.5
        xhat = xc * rstd
        h = torch.tanh(g * xhat + beta)
        logits = h @ W2 + b2
        loss = F.cross_entropy(logits, Yb)
    """,
    fused={"dlogits": "loss"},
)
