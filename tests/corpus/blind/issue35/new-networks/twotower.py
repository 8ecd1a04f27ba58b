"""A two-tower model: a context tower (tanh over the concatenated embeddings) and a character tower
(each character's own embedding, projected), both normalized to unit length; the logits are their cosine
similarities, scaled by a fixed temperature."""
from grader.authoring.define import exercise

EXERCISE = exercise(
    name="twotower",
    title="Two towers scored by cosine similarity",
    sizes={"n": (32, (8, 40)), "vocab": (27, (7, 40)), "block": (3, (2, 6)), "n_embd": (10, (3, 14)),
           "d": (16, (4, 30))},
    parameters="""
        C = randn(vocab, n_embd)
        Wq = randn(block * n_embd, d) / (block * n_embd) ** 0.5
        bq = randn(d) * 0.1
        E = randn(vocab, n_embd)
        Wk = randn(n_embd, d) / n_embd ** 0.5
    """,
    data="""
        Xb = randint(vocab, (n, block))
        Yb = randint(vocab, (n,))
    """,
    forward="""
        emb = C[Xb]
        embcat = emb.view(n, block * n_embd)
        q = torch.tanh(embcat @ Wq + bq)
        qlen = (q ** 2).sum(1, keepdim=True).sqrt()
        qn = q / qlen
        k = E @ Wk
        klen = (k ** 2).sum(1, keepdim=True).sqrt()
        kn = k / klen
        sim = qn @ kn.T
        logits = 5.0 * sim
        loss = F.cross_entropy(logits, Yb)
    """,
    fused={"dlogits": "loss"},
)
