"""Additive (Bahdanau) attention pooling, as an instructor trial wrote it: `e = torch.tanh(proj + query.unsqueeze(1))`
adds two inputs before one tanh, so they share that step's gradient and the textbook's `dquery = dproj.sum(1)` is
right (tests/test_cs231n_course.py: full credit), where a cell further down that skips dproj for de is not."""
from grader.authoring.define import exercise

EXERCISE = exercise(
    name="additive-attention", title="Additive attention pooling",
    sizes={"n": (12, (6, 20)), "vocab": (10, (6, 16)), "T": (5, (3, 8)), "d": (6, (3, 10)), "a": (4, (2, 8)),
           "classes": (3, (2, 6))},
    parameters="""
        C = randn(vocab, d)
        Wq = randn(d, a) / d ** 0.5
        Wk = randn(d, a) / d ** 0.5
        v = randn(a) / a ** 0.5
        Wo = randn(d, classes) * 0.1
    """,
    data="Xb = randint(vocab, (n, T))\nYb = randint(classes, (n,))",
    forward="""
        keys = C[Xb]
        query = keys[:, -1] @ Wq
        proj = keys @ Wk
        e = torch.tanh(proj + query.unsqueeze(1))
        scores = torch.einsum("nta,a->nt", e, v)
        alpha = F.softmax(scores, dim=1)
        ctx = (alpha.unsqueeze(2) * keys).sum(1)
        logits = ctx @ Wo
        loss = F.cross_entropy(logits, Yb)
    """,
)
