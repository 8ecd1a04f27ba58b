# The reference answer of every answer cell, one cell per `# %% <grade_id>` marker.
#
# This file is not imported: solutions/reference.py runs each cell in a namespace holding the
# forward pass (parameters, Xb, Yb, n, every intermediate, torch, F), exactly as the notebook and the
# grader do. The solved notebook is built from these same cells, so what students may peek at and
# what the tests prove equal to autograd are one text.

# %% dlogprobs
# loss = -mean of logprobs at the targets: only those n entries matter, each with weight -1/n.
dlogprobs = torch.zeros_like(logprobs)
dlogprobs[range(n), Yb] = -1.0 / n

# %% dprobs
# d log(x) / dx = 1 / x
dprobs = (1.0 / probs) * dlogprobs

# %% dcounts_sum_inv
# probs = counts * counts_sum_inv broadcasts counts_sum_inv (n,1) over the columns: sum them back.
dcounts_sum_inv = (counts * dprobs).sum(1, keepdim=True)

# %% dcounts_sum
# d x**-1 / dx = -x**-2
dcounts_sum = -counts_sum**-2 * dcounts_sum_inv

# %% dcounts
# counts is used twice: in probs, and in counts_sum (a row sum, so its gradient broadcasts back).
dcounts = counts_sum_inv * dprobs + torch.ones_like(counts) * dcounts_sum

# %% dnorm_logits
# d exp(x) / dx = exp(x) = counts
dnorm_logits = counts * dcounts

# %% dlogit_maxes
# logit_maxes (n,1) was broadcast and subtracted: sum over the columns, with a minus sign.
dlogit_maxes = (-dnorm_logits).sum(1, keepdim=True)

# %% dlogits
# logits is used twice: directly in norm_logits, and through the max, which routes to the argmax.
dlogits = dnorm_logits.clone()
dlogits += F.one_hot(logits.max(1).indices, num_classes=logits.shape[1]) * dlogit_maxes

# %% dh
# logits = h @ W2 + b2: pick the matrix product whose shape is h's, (n,H) = (n,V) @ (V,H).
dh = dlogits @ W2.T

# %% dW2
dW2 = h.T @ dlogits

# %% db2
# b2 (V,) was broadcast over the batch: sum over the rows.
db2 = dlogits.sum(0)

# %% dhpreact
# d tanh(x) / dx = 1 - tanh(x)**2, written with the output h.
dhpreact = (1.0 - h**2) * dh

# %% dbngain
dbngain = (bnraw * dhpreact).sum(0, keepdim=True)

# %% dbnbias
dbnbias = dhpreact.sum(0, keepdim=True)

# %% dbnraw
dbnraw = bngain * dhpreact

# %% dbnvar_inv
dbnvar_inv = (bndiff * dbnraw).sum(0, keepdim=True)

# %% dbnvar
# d (x + eps)**-0.5 / dx = -0.5 * (x + eps)**-1.5
dbnvar = (-0.5 * (bnvar + 1e-5) ** -1.5) * dbnvar_inv

# %% dbndiff2
# bnvar = 1/(n-1) * column sum: the gradient broadcasts back, scaled by Bessel's 1/(n-1).
dbndiff2 = (1.0 / (n - 1)) * torch.ones_like(bndiff2) * dbnvar

# %% dbndiff
# bndiff is used twice: in bnraw and in bndiff2.
dbndiff = bnvar_inv * dbnraw + (2 * bndiff) * dbndiff2

# %% dbnmeani
dbnmeani = (-dbndiff).sum(0, keepdim=True)

# %% dhprebn
# hprebn is used twice: directly in bndiff, and through the batch mean.
dhprebn = dbndiff.clone() + 1.0 / n * torch.ones_like(hprebn) * dbnmeani

# %% dembcat
dembcat = dhprebn @ W1.T

# %% dW1
dW1 = embcat.T @ dhprebn

# %% db1
db1 = dhprebn.sum(0)

# %% demb
# embcat is only a view of emb: reshape the gradient back.
demb = dembcat.view(emb.shape)

# %% dC
# emb = C[Xb] copies row Xb[i,j] of C into emb[i,j]: scatter-add, so repeated characters accumulate.
dC = torch.zeros_like(C).index_add(0, Xb.view(-1), demb.view(-1, C.shape[1]))

# %% ex2_dlogits
# Cross-entropy fused: (softmax(logits) - onehot(Yb)) / n.
dlogits = F.softmax(logits, 1)
dlogits[range(n), Yb] -= 1
dlogits /= n

# %% ex3_dhprebn
# Batch norm fused, with the unbiased variance of the forward pass (hence n/(n-1)).
dhprebn = bngain * bnvar_inv / n * (
    n * dhpreact - dhpreact.sum(0) - n / (n - 1) * bnraw * (dhpreact * bnraw).sum(0)
)

# %% ex4_backward
def manual_backward(params, cache, Yb):
    """Every parameter's gradient from the fused formulas of exercises 2 and 3."""
    C, W1, W2, bngain = params["C"], params["W1"], params["W2"], params["bngain"]
    Xb, embcat, h, logits = cache["Xb"], cache["embcat"], cache["h"], cache["logits"]
    bnraw, bnvar_inv = cache["bnraw"], cache["bnvar_inv"]
    n = Xb.shape[0]
    dlogits = F.softmax(logits, 1)
    dlogits[range(n), Yb] -= 1
    dlogits /= n
    dh = dlogits @ W2.T
    dW2 = h.T @ dlogits
    db2 = dlogits.sum(0)
    dhpreact = (1.0 - h**2) * dh
    dbngain = (bnraw * dhpreact).sum(0, keepdim=True)
    dbnbias = dhpreact.sum(0, keepdim=True)
    dhprebn = bngain * bnvar_inv / n * (
        n * dhpreact - dhpreact.sum(0) - n / (n - 1) * bnraw * (dhpreact * bnraw).sum(0)
    )
    dembcat = dhprebn @ W1.T
    dW1 = embcat.T @ dhprebn
    db1 = dhprebn.sum(0)
    demb = dembcat.view(Xb.shape[0], Xb.shape[1], -1)
    dC = torch.zeros_like(C)
    dC.index_add_(0, Xb.view(-1), demb.view(-1, C.shape[1]))
    return {"C": dC, "W1": dW1, "b1": db1, "W2": dW2, "b2": db2, "bngain": dbngain, "bnbias": dbnbias}
