"""CS231n's two-layer net as a course writes it: a batch size named `N`, a layer norm whose gain starts
at `ones` (nn.LayerNorm's default), and a loss that is the sum of a data loss and an L2 penalty. Each is
a way an exercise of one's own once broke or mis-graded (tests/test_any_names.py)."""
from grader.authoring.define import exercise

EXERCISE = exercise(
    name="cs231n",
    title="A two-layer net with a layer norm and L2 regularisation",
    sizes={"N": (8, (6, 30)), "D": (5, (2, 12)), "H": (6, (3, 12)), "C": (4, (2, 10))},
    parameters="""
        W1 = randn(D, H) / D ** 0.5
        b1 = randn(H) * 0.1
        gamma = ones(H)
        beta = zeros(H)
        W2 = randn(H, C) * 0.1
        b2 = randn(C) * 0.1
    """,
    data="""
        X = randn(N, D)
        y = randint(C, (N,))
    """,
    forward="""
        a1 = X @ W1 + b1
        mu = a1.mean(1, keepdim=True)
        xc = a1 - mu
        var = (xc ** 2).mean(1, keepdim=True)
        xhat = xc / (var + 1e-5).sqrt()
        ln1 = gamma * xhat + beta
        h1 = torch.relu(ln1)
        scores = h1 @ W2 + b2
        data_loss = F.cross_entropy(scores, y)
        reg_loss = 0.05 * ((W1 * W1).sum() + (W2 * W2).sum())
        loss = data_loss + reg_loss
    """,
    fused={"dscores": "data_loss"},
)
