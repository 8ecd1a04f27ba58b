# The reference answers of the makemore variants' own pieces, one cell per `# %% <piece>:<key>` marker.
#
# This file is not imported: solutions/variants.py composes each variant's reference answers from the
# lecture's cells (solutions/answers.py, for every piece the variant shares with the lecture, renamed
# where a name differs) and these. A piece's cells are written for the hidden layer (`h = act(hpreact)`);
# the residual branch (`r = act(rpreact)`) reuses them renamed. Keys are grade ids (`relu:dhpreact`) or,
# for manual_backward, the part of the function they write (`relu:ex4`), written unindented here.
#
# Every statement follows one or two comment lines that explain it, as in solutions/answers.py.

# %% relu:dhpreact
# h = relu(hpreact) = max(0, hpreact): local derivative 1 where hpreact > 0 and 0 where it is negative. At
# exactly 0 relu has no derivative; any value in [0, 1] is a subgradient, and torch's choice is 0.
dhpreact = (hpreact > 0) * dh

# %% relu:ex4
# Through ReLU: dh passes where h > 0 (the True/False mask multiplies as 1/0) and stops elsewhere, 0 included.
dhpreact = (h > 0) * dh

# %% sigmoid:dhpreact
# h = sigmoid(hpreact): d sigma(x)/dx = sigma(x) * (1 - sigma(x)), written with the output h.
dhpreact = h * (1.0 - h) * dh

# %% sigmoid:ex4
# Through the sigmoid: h * (1 - h) is its derivative, written with its output h.
dhpreact = h * (1.0 - h) * dh

# %% gelu:dhtanh
# h = 0.5 * hpreact * (1 + htanh): local derivative 0.5 * hpreact, elementwise (same shapes: nothing to sum).
dhtanh = 0.5 * hpreact * dh

# %% gelu:dhinner
# htanh = tanh(hinner): d tanh(x)/dx = 1 - tanh(x)**2, written with the output htanh.
dhinner = (1.0 - htanh**2) * dhtanh

# %% gelu:dhcube
# hinner = c * (hpreact + 0.044715 * hcube), c = sqrt(2/pi) = 0.7978845608028654: local derivative c * 0.044715.
dhcube = 0.7978845608028654 * 0.044715 * dhinner

# %% gelu:dhpreact
# hpreact is used three times. First use, h = 0.5 * hpreact * (1 + htanh): local derivative 0.5 * (1 + htanh).
dhpreact = 0.5 * (1 + htanh) * dh
# Second use, hinner = c * (hpreact + 0.044715 * hcube): local derivative c = 0.7978845608028654.
dhpreact += 0.7978845608028654 * dhinner
# Third use, hcube = hpreact**3: local derivative 3 * hpreact**2.
dhpreact += 3 * hpreact**2 * dhcube

# %% gelu:ex4
# Through GELU, the three paths of the atomic steps added up: 0.5 * (1 + t) directly, and through t = htanh
# 0.5 * x * (1 - t**2) times the inner derivative c * (1 + 3 * 0.044715 * x**2), with x = hpreact.
dhpreact = dh * (
    0.5 * (1 + htanh) + 0.5 * hpreact * (1 - htanh**2) * 0.7978845608028654 * (1 + 3 * 0.044715 * hpreact**2)
)

# %% layernorm:dlngain
# hpreact = lngain * lnraw + lnbias: local derivative lnraw. lngain (1,H) was broadcast over the rows, as
# bngain was: sum over dim 0, keepdim=True for its shape (1,H).
dlngain = (lnraw * dhpreact).sum(0, keepdim=True)

# %% layernorm:dlnbias
# lnbias (1,H) is added with derivative 1, broadcast over the rows: sum over dim 0 with keepdim.
dlnbias = dhpreact.sum(0, keepdim=True)

# %% layernorm:dlnraw
# hpreact = lngain * lnraw + lnbias: local derivative lngain, which broadcasts over the rows; lnraw is (n,H)
# like dhpreact, so nothing to sum.
dlnraw = lngain * dhpreact

# %% layernorm:dlnvar_inv
# lnraw = lndiff * lnvar_inv: local derivative lndiff. lnvar_inv is (n,1), one per example, broadcast over
# the features: sum over dim 1 (not 0, as batch norm's), keepdim=True.
dlnvar_inv = (lndiff * dlnraw).sum(1, keepdim=True)

# %% layernorm:dlnvar
# lnvar_inv = (lnvar + 1e-5)**-0.5: d (x + eps)**-0.5/dx = -0.5 * (x + eps)**-1.5, with the forward's eps.
dlnvar = (-0.5 * (lnvar + 1e-5) ** -1.5) * dlnvar_inv

# %% layernorm:dlndiff2
# lnvar = lndiff2.mean(1): every feature of a row gets its row's dlnvar, times 1/H for the H features
# averaged (lndiff2.shape[1]): the biased variance, so no Bessel correction.
dlndiff2 = (1.0 / lndiff2.shape[1]) * torch.ones_like(lndiff2) * dlnvar

# %% layernorm:dlndiff
# lndiff is used twice. First use, lnraw = lndiff * lnvar_inv: local derivative lnvar_inv (broadcast).
dlndiff = lnvar_inv * dlnraw
# Second use, lndiff2 = lndiff**2: local derivative 2 * lndiff.
dlndiff += (2 * lndiff) * dlndiff2

# %% layernorm:dlnmean
# lndiff = hpreln - lnmean: local derivative -1. lnmean (n,1) was broadcast over the features (columns):
# sum over dim 1, keepdim=True.
dlnmean = (-dlndiff).sum(1, keepdim=True)

# %% layernorm:dhpreln
# hpreln is used twice. First use, lndiff = hpreln - lnmean: local derivative 1 (a copy, for the +=).
dhpreln = dlndiff.clone()
# Second use, lnmean = hpreln.mean(1): every feature of a row gets its row's dlnmean, times 1/H (the mean).
dhpreln += 1.0 / hpreln.shape[1] * torch.ones_like(hpreln) * dlnmean

# %% layernorm:db1
# b1 (H,) was broadcast over the rows: sum over dim 0. Layer norm removes each row's mean, so only b1's spread
# across the features moves the loss: its entries add up to ~0, but are not ~0 themselves.
db1 = dhpreln.sum(0)

# %% layernorm:ex3_dhpreln
# lngain varies along the features that the statistics run over, so unlike bngain it cannot be factored
# out: first back through the affine part, to the normalized values.
dlnraw = lngain * dhpreact
# Then each row's three paths: directly (H * dlnraw), through the row mean (minus the row's sum) and through
# the row variance (the lnraw term; biased, so no H/(H-1)), all times lnvar_inv / H.
dhpreln = lnvar_inv / lnraw.shape[1] * (
    lnraw.shape[1] * dlnraw - dlnraw.sum(1, keepdim=True) - lnraw * (dlnraw * lnraw).sum(1, keepdim=True)
)

# %% layernorm:ex4_cache
# Layer norm's normalized values and inverse standard deviations (one per example), from the cache.
lnraw, lnvar_inv = cache["lnraw"], cache["lnvar_inv"]

# %% layernorm:ex4
# hpreact = lngain * lnraw + lnbias: local derivative lnraw; lngain (1,H) is broadcast over the batch,
# so sum over dim 0 with keepdim.
dlngain = (lnraw * dhpreact).sum(0, keepdim=True)
# lnbias (1,H) is added with derivative 1: sum over dim 0 with keepdim.
dlnbias = dhpreact.sum(0, keepdim=True)
# Exercise 3, fused layer norm: lngain varies along the features, so first back through it to lnraw.
dlnraw = lngain * dhpreact
# Then each row's direct, mean and variance paths added up, over its H features (biased variance).
dhpreln = lnvar_inv / lnraw.shape[1] * (
    lnraw.shape[1] * dlnraw - dlnraw.sum(1, keepdim=True) - lnraw * (dlnraw * lnraw).sum(1, keepdim=True)
)

# %% layernorm:ex4_db1
# b1 (H,) is broadcast over the batch: sum over dim 0 (its entries add up to ~0: layer norm removes row means).
db1 = dhpreln.sum(0)

# %% none:db1
# b1 (H,) was broadcast over the rows: sum over dim 0. With no normalization after it, b1 moves the loss as
# any bias does.
db1 = dhpreact.sum(0)

# %% none:ex4_header
def manual_backward(params, cache, Yb):
    """Every parameter's gradient, the cross-entropy from the fused formula of exercise 2."""

# %% none:ex4_db1
# b1 (H,) is broadcast over the batch: sum over dim 0.
db1 = dhpreact.sum(0)

# %% residual:dr
# hres = h + r: an addition hands its gradient unchanged to each term (a copy, so that nothing written into
# dr later can change dhres).
dr = dhres.clone()

# %% residual:dh
# h is used twice. First use, the skip hres = h + r: local derivative 1 (a copy, for the +=).
dh = dhres.clone()
# Second use, the branch rpreact = h @ W3 + b3: the product of drpreact (n,H) and W3 (H,H) with h's shape;
# W3 is square, so W3 would have the shape too: only W3.T is right.
dh += drpreact @ W3.T

# %% residual:dW3
# rpreact = h @ W3 + b3: (H,n) @ (n,H) gives W3's shape, summing over the batch that shared W3.
dW3 = h.T @ drpreact

# %% residual:db3
# b3 (H,) was broadcast over the rows of rpreact: sum over dim 0 (no keepdim: b3 is 1-D).
db3 = drpreact.sum(0)

# %% residual:ex4_branch
# hres = h + r: the addition hands dhres unchanged to the branch r (and, further down, to h).
dr = dhres

# %% residual:ex4_merge
# h's gradient is the sum of its two paths: the skip's dhres and the branch's drpreact @ W3.T.
dh = dhres + drpreact @ W3.T
# rpreact = h @ W3 + b3: (H,n) @ (n,H) has W3's shape and sums over the batch, which shares W3.
dW3 = h.T @ drpreact
# b3 (H,) is broadcast over the batch: sum over dim 0.
db3 = drpreact.sum(0)
