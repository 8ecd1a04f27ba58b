"""A residual MLP with RMSNorm written out: the hidden layer is scaled by the reciprocal root of its
mean square (no centring), a learned gain, a SiLU layer on top, and the block's input added back."""
from grader.authoring.define import exercise

EXERCISE = exercise(
    name="rmsnorm_res",
    title="A residual MLP block with RMSNorm and SiLU",
    sizes={"n": (32, (8, 40)), "vocab": (27, (7, 40)), "block": (3, (2, 6)), "n_embd": (10, (3, 14)),
           "n_hidden": (48, (6, 48))},
    parameters="""
        C = randn(vocab, n_embd)
        W1 = randn(block * n_embd, n_hidden) / (block * n_embd) ** 0.5
        b1 = randn(n_hidden) * 0.1
        g = randn(n_hidden) * 0.1 + 1
        W2 = randn(n_hidden, n_hidden) / n_hidden ** 0.5
        b2 = randn(n_hidden) * 0.1
        W3 = randn(n_hidden, vocab) * 0.1
        b3 = randn(vocab) * 0.1
    """,
    data="""
        Xb = randint(vocab, (n, block))
        Yb = randint(vocab, (n,))
    """,
    forward="""
        emb = C[Xb]
        embcat = emb.view(n, block * n_embd)
        h = embcat @ W1 + b1
        ms = (h ** 2).mean(1, keepdim=True)
        rrms = (ms + 1e-6).rsqrt()
        hn = h * rrms * g
        f = F.silu(hn @ W2 + b2)
        hres = h + f
        logits = hres @ W3 + b3
        loss = F.cross_entropy(logits, Yb)
    """,
    fused={"dlogits": "loss"},
)
