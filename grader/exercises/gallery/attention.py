"""One causal self-attention head, as in the lecture on GPT: each position of a context of characters
asks (queries) the earlier ones (keys) for their values, scaled, masked so no position sees the future,
softmaxed; the last position's result is projected to the next character's logits."""
from grader.authoring.define import exercise

EXERCISE = exercise(
    name="attention",
    title="A causal self-attention head",
    sizes={"n": (16, (6, 30)), "vocab": (27, (7, 40)), "block": (4, (2, 9)), "n_embd": (8, (3, 14)),
           "head": (6, (2, 12))},
    parameters="""
        C = randn(vocab, n_embd)
        Wq = randn(n_embd, head) / n_embd ** 0.5
        Wk = randn(n_embd, head) / n_embd ** 0.5
        Wv = randn(n_embd, head) / n_embd ** 0.5
        Wo = randn(head, vocab) * 0.1
        bo = randn(vocab) * 0.1
    """,
    data="""
        Xb = randint(vocab, (n, block))
        Yb = randint(vocab, (n,))
    """,
    forward="""
        emb = C[Xb]
        q = emb @ Wq
        k = emb @ Wk
        v = emb @ Wv
        scores = q @ k.transpose(1, 2) * head ** -0.5
        tril = torch.tril(torch.ones(block, block))
        masked = scores.masked_fill(tril == 0, float('-inf'))
        att = F.softmax(masked, dim=-1)
        out = att @ v
        last = out[:, -1]
        logits = last @ Wo + bo
        loss = F.cross_entropy(logits, Yb)
    """,
    fused={"dlogits": "loss"},
    backward=True,
)
