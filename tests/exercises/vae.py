"""A small variational autoencoder: mu and log-variance from a tanh encoder, z = mu + exp(logvar / 2) * noise
with the noise a fixed input, a sigmoid decoder, the reconstruction's cross-entropy and the Gaussian KL term
written out as a course writes it (kl_terms, then kl). The KL's log-variance branch is what a student forgets,
and its value is that of a slip of exp; its textbook gradient (mu / B) reads one of mu's two upstream gradients."""
from grader.authoring.define import exercise

EXERCISE = exercise(
    name="vae",
    title="A variational autoencoder",
    sizes={"B": (16, (6, 24)), "D": (10, (4, 14)), "H": (8, (3, 12)), "Z": (3, (2, 6))},
    parameters="""
        We = randn(D, H) / D ** 0.5
        Wmu = randn(H, Z) * 0.3
        Wlv = randn(H, Z) * 0.3
        Wd = randn(Z, D) / Z ** 0.5
    """,
    data="""
        X = rand(B, D)
        noise = randn(B, Z)
    """,
    forward="""
        h = torch.tanh(X @ We)
        mu = h @ Wmu
        logvar = h @ Wlv
        std = (0.5 * logvar).exp()
        z = mu + std * noise
        xhat = torch.sigmoid(z @ Wd)
        rec = -(X * xhat.log() + (1 - X) * (1 - xhat).log()).sum(1).mean()
        kl_terms = 1 + logvar - mu ** 2 - logvar.exp()
        kl = (-0.5 * kl_terms.sum(1)).mean()
        loss = rec + kl
    """,
)
