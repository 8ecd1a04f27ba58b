"""A mixture of three tanh experts over the concatenated context: a softmax gate picks how much of each
expert's hidden layer goes into the mix (an einsum over the experts), the experts run as one batched
matrix product."""
from grader.authoring.define import exercise

EXERCISE = exercise(
    name="moe",
    title="A softly gated mixture of three experts",
    sizes={"n": (32, (8, 40)), "vocab": (27, (7, 40)), "block": (3, (2, 6)), "n_embd": (10, (3, 14)),
           "n_hidden": (32, (6, 40)), "experts": 3},
    parameters="""
        C = randn(vocab, n_embd)
        Wg = randn(block * n_embd, experts) * 0.1
        bg = randn(experts) * 0.1
        We = randn(experts, block * n_embd, n_hidden) / (block * n_embd) ** 0.5
        be = randn(experts, 1, n_hidden) * 0.1
        Wo = randn(n_hidden, vocab) * 0.1
        bo = randn(vocab) * 0.1
    """,
    data="""
        Xb = randint(vocab, (n, block))
        Yb = randint(vocab, (n,))
    """,
    forward="""
        emb = C[Xb]
        x = emb.view(n, block * n_embd)
        gl = x @ Wg + bg
        gate = F.softmax(gl, dim=1)
        hpre = x @ We + be
        hexp = torch.tanh(hpre)
        mix = torch.einsum('ne,enh->nh', gate, hexp)
        logits = mix @ Wo + bo
        loss = F.cross_entropy(logits, Yb)
    """,
    fused={"dlogits": "loss"},
)
