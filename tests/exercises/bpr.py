"""A two-tower recommender trained with the BPR loss, as an instructor trial wrote it: `x = s_pos - s_neg` passes
its gradient to each score unchanged or negated, so the textbook's `dhu = (hp - hn) * dx[:, None]` reads dx where
the chain reads ds_pos and ds_neg (tests/test_cs231n_course.py: full credit)."""
from grader.authoring.define import exercise

EXERCISE = exercise(
    name="twotower-bpr", title="A two-tower recommender with a BPR loss",
    sizes={"n": (16, (6, 24)), "n_users": (20, (8, 30)), "n_items": (30, (10, 40)), "k": (8, (3, 12)),
           "dout": (6, (2, 9)), "reg": 1e-4},
    parameters="""
        U = randn(n_users, k) * 0.1
        V = randn(n_items, k) * 0.1
        Wu = randn(k, dout) / k ** 0.5
        Wi = randn(k, dout) / k ** 0.5
    """,
    data="""
        users = randint(n_users, (n,))
        pos = randint(n_items, (n,))
        neg = randint(n_items, (n,))
    """,
    forward="""
        eu = U[users]
        ep = V[pos]
        en = V[neg]
        hu = torch.tanh(eu @ Wu)
        hp = torch.tanh(ep @ Wi)
        hn = torch.tanh(en @ Wi)
        s_pos = (hu * hp).sum(1)
        s_neg = (hu * hn).sum(1)
        x = s_pos - s_neg
        bpr = F.softplus(-x).mean()
        l2 = reg * ((eu ** 2).sum() + (ep ** 2).sum() + (en ** 2).sum()) / n
        loss = bpr + l2
    """,
)
