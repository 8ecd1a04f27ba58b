# The reference answer of every answer cell, one cell per `# %% <grade_id>` marker.
#
# This file is not imported: solutions/reference.py runs each cell in a namespace holding the
# forward pass (parameters, Xb, Yb, n, every intermediate, torch, F), exactly as the notebook and the
# grader do. The solved notebook is built from these same cells, so what students may peek at and
# what the tests prove equal to autograd are one text.
#
# Every statement of an answer (or a pair that only works together) follows one or two comment
# lines that explain it: the local derivative, the upstream gradient, why a sum and over which
# dimension. They sit inside nbgrader's solution region, so the solved notebook carries them and the
# students' notebook does not, and `backprop-ninja solution` prints them with the code
# (tests/test_solution.py checks that every line has its explanation).

# %% dlogprobs
# loss = -mean of logprobs[i, Yb[i]]: no other entry of logprobs reaches the loss, so start from zeros.
dlogprobs = torch.zeros_like(logprobs)
# Each of the n target entries moves the loss by -1/n: the minus sign and the mean's 1/n.
dlogprobs[range(n), Yb] = -1.0 / n

# %% dprobs
# logprobs = probs.log(), elementwise: local derivative 1/probs, times the upstream dlogprobs.
dprobs = (1.0 / probs) * dlogprobs

# %% dcounts_sum_inv
# probs = counts * counts_sum_inv: local derivative counts. counts_sum_inv (n,1) was broadcast over the
# columns, so sum over dim 1; keepdim=True keeps its shape (n,1).
dcounts_sum_inv = (counts * dprobs).sum(1, keepdim=True)

# %% dcounts_sum
# counts_sum_inv = counts_sum**-1: d x**-1/dx = -x**-2, elementwise on the (n,1) column.
dcounts_sum = -counts_sum**-2 * dcounts_sum_inv

# %% dcounts
# counts is used twice. First use, probs = counts * counts_sum_inv: local derivative counts_sum_inv.
dcounts = counts_sum_inv * dprobs
# Second use, counts_sum = counts.sum(1): a sum hands its gradient to every entry it summed (broadcast).
dcounts += torch.ones_like(counts) * dcounts_sum

# %% dnorm_logits
# counts = norm_logits.exp(): d exp(x)/dx = exp(x), which is counts itself.
dnorm_logits = counts * dcounts

# %% dlogit_maxes
# norm_logits = logits - logit_maxes: local derivative -1, and logit_maxes (n,1) was broadcast over the
# columns: sum over dim 1 with keepdim. Softmax ignores a shift of a row, so this comes out ~0.
dlogit_maxes = (-dnorm_logits).sum(1, keepdim=True)

# %% dlogits
# logits is used twice. First use, norm_logits = logits - logit_maxes: local derivative 1 (a copy, so the
# += below leaves dnorm_logits alone).
dlogits = dnorm_logits.clone()
# Second use, logit_maxes = the max of each row, which is one of its entries: the argmax of each row
# gets that row's dlogit_maxes, the other entries nothing.
dlogits += F.one_hot(logits.max(1).indices, num_classes=logits.shape[1]) * dlogit_maxes

# %% dh
# logits = h @ W2 + b2: the product of dlogits (n,V) and W2 (H,V) that has h's shape (n,H).
dh = dlogits @ W2.T

# %% dW2
# logits = h @ W2 + b2: (H,n) @ (n,V) gives W2's shape; the matmul sums over the batch, since every
# example used the same W2.
dW2 = h.T @ dlogits

# %% db2
# b2 (V,) was broadcast over the n rows of logits: sum over dim 0 (no keepdim: b2 is 1-D).
db2 = dlogits.sum(0)

# %% dhpreact
# h = tanh(hpreact): d tanh(x)/dx = 1 - tanh(x)**2, written with the output h.
dhpreact = (1.0 - h**2) * dh

# %% dbngain
# hpreact = bngain * bnraw + bnbias: local derivative bnraw. bngain (1,H) was broadcast over the rows:
# sum over dim 0, keepdim=True for its shape (1,H).
dbngain = (bnraw * dhpreact).sum(0, keepdim=True)

# %% dbnbias
# bnbias (1,H) is added with derivative 1, broadcast over the rows: sum over dim 0 with keepdim.
dbnbias = dhpreact.sum(0, keepdim=True)

# %% dbnraw
# hpreact = bngain * bnraw + bnbias: local derivative bngain, which broadcasts over the rows; bnraw is
# (n,H) like dhpreact, so nothing to sum.
dbnraw = bngain * dhpreact

# %% dbnvar_inv
# bnraw = bndiff * bnvar_inv: local derivative bndiff. bnvar_inv (1,H) was broadcast over the rows: sum
# over dim 0 with keepdim.
dbnvar_inv = (bndiff * dbnraw).sum(0, keepdim=True)

# %% dbnvar
# bnvar_inv = (bnvar + 1e-5)**-0.5: d (x + eps)**-0.5/dx = -0.5 * (x + eps)**-1.5, with the forward's eps.
dbnvar = (-0.5 * (bnvar + 1e-5) ** -1.5) * dbnvar_inv

# %% dbndiff2
# bnvar = 1/(n-1) * bndiff2.sum(0): every row gets the column's dbnvar (a sum broadcasts back), times
# 1/(n-1): Bessel's correction of the unbiased variance, not 1/n.
dbndiff2 = (1.0 / (n - 1)) * torch.ones_like(bndiff2) * dbnvar

# %% dbndiff
# bndiff is used twice. First use, bnraw = bndiff * bnvar_inv: local derivative bnvar_inv (broadcast).
dbndiff = bnvar_inv * dbnraw
# Second use, bndiff2 = bndiff**2: local derivative 2 * bndiff.
dbndiff += (2 * bndiff) * dbndiff2

# %% dbnmeani
# bndiff = hprebn - bnmeani: local derivative -1. bnmeani (1,H) was broadcast over the rows: sum over
# dim 0, keepdim=True (the lecture's .sum(0) gives shape (H,), not (1,H)).
dbnmeani = (-dbndiff).sum(0, keepdim=True)

# %% dhprebn
# hprebn is used twice. First use, bndiff = hprebn - bnmeani: local derivative 1 (a copy, for the +=).
dhprebn = dbndiff.clone()
# Second use, bnmeani = 1/n * hprebn.sum(0): every row gets the column's dbnmeani, times the mean's 1/n.
dhprebn += 1.0 / n * torch.ones_like(hprebn) * dbnmeani

# %% dembcat
# hprebn = embcat @ W1 + b1: the product of dhprebn (n,H) and W1 (B*E,H) that has embcat's shape.
dembcat = dhprebn @ W1.T

# %% dW1
# hprebn = embcat @ W1 + b1: (B*E,n) @ (n,H) gives W1's shape, summing over the batch that shared W1.
dW1 = embcat.T @ dhprebn

# %% db1
# b1 (H,) was broadcast over the rows: sum over dim 0. Batch norm then subtracts each column's mean, so
# b1 cannot move the loss: this is ~0.
db1 = dhprebn.sum(0)

# %% demb
# embcat = emb.view(n, -1) only relabels the same numbers: view the gradient back to emb's shape.
demb = dembcat.view(emb.shape)

# %% dC
# emb = C[Xb] copies row Xb[i,j] of C into emb[i,j]: add each demb[i,j] back into that row, so a repeated
# character sums all its uses (index_add; dC[Xb] = demb would keep only one).
dC = torch.zeros_like(C).index_add(0, Xb.view(-1), demb.view(-1, C.shape[1]))

# %% ex2_dlogits
# For one example, d(-log softmax(z)[y])/dz_j = p_j - [j = y]: start from the probabilities p...
dlogits = F.softmax(logits, 1)
# ...subtract 1 at each row's target...
dlogits[range(n), Yb] -= 1
# ...and divide by n: the loss is the mean over the n examples.
dlogits /= n

# %% ex3_dhprebn
# bngain * bnvar_inv / n scales hprebn's three paths to the loss: directly (n * dhpreact), through the mean
# (minus the column sum) and through the variance (the bnraw term; n/(n-1) from the unbiased variance).
dhprebn = bngain * bnvar_inv / n * (
    n * dhpreact - dhpreact.sum(0) - n / (n - 1) * bnraw * (dhpreact * bnraw).sum(0)
)

# %% ex4_backward
def manual_backward(params, cache, Yb):
    """Every parameter's gradient from the fused formulas of exercises 2 and 3."""
    # The parameters that the formulas read.
    C, W1, W2, bngain = params["C"], params["W1"], params["W2"], params["bngain"]
    # The forward pass's values that the formulas read, from the cache.
    Xb, embcat, h, logits = cache["Xb"], cache["embcat"], cache["h"], cache["logits"]
    # Batch norm's normalized values and inverse standard deviation, from the cache.
    bnraw, bnvar_inv = cache["bnraw"], cache["bnvar_inv"]
    # The batch size, read from the batch: the grader calls this with other sizes.
    n = Xb.shape[0]
    # Exercise 2, fused cross-entropy: the gradient of the mean loss is (softmax - one-hot) / n.
    dlogits = F.softmax(logits, 1)
    # Minus 1 at each row's target class: the one-hot part of (softmax - one-hot).
    dlogits[range(n), Yb] -= 1
    # Divided by n: F.cross_entropy's loss is the mean over the n examples of the batch.
    dlogits /= n
    # logits = h @ W2 + b2: (n,V) @ (V,H) has h's shape.
    dh = dlogits @ W2.T
    # (H,n) @ (n,V) has W2's shape and sums over the batch, which shares W2.
    dW2 = h.T @ dlogits
    # b2 (V,) is broadcast over the batch: sum over dim 0.
    db2 = dlogits.sum(0)
    # Through tanh: 1 - h**2 is its derivative, written with its output h.
    dhpreact = (1.0 - h**2) * dh
    # hpreact = bngain * bnraw + bnbias: local derivative bnraw; bngain (1,H) is broadcast over the batch,
    # so sum over dim 0 with keepdim.
    dbngain = (bnraw * dhpreact).sum(0, keepdim=True)
    # bnbias (1,H) is added with derivative 1: sum over dim 0 with keepdim.
    dbnbias = dhpreact.sum(0, keepdim=True)
    # Exercise 3, fused batch norm: hprebn's direct, mean and variance paths added up; n/(n-1) comes from
    # the unbiased variance of the forward pass.
    dhprebn = bngain * bnvar_inv / n * (
        n * dhpreact - dhpreact.sum(0) - n / (n - 1) * bnraw * (dhpreact * bnraw).sum(0)
    )
    # hprebn = embcat @ W1 + b1: (n,H) @ (H,B*E) has embcat's shape.
    dembcat = dhprebn @ W1.T
    # (B*E,n) @ (n,H) has W1's shape and sums over the batch, which shares W1.
    dW1 = embcat.T @ dhprebn
    # b1 (H,) is broadcast over the batch: sum over dim 0 (~0, since batch norm removes it).
    db1 = dhprebn.sum(0)
    # embcat is emb viewed as (n, B*E): view the gradient back to (n, B, E).
    demb = dembcat.view(Xb.shape[0], Xb.shape[1], -1)
    # emb = C[Xb] copied rows of C: add each demb[i,j] into row Xb[i,j] of zeros, so that a character used
    # several times in Xb collects the sum of all its uses (a scatter-add).
    dC = torch.zeros_like(C)
    dC.index_add_(0, Xb.view(-1), demb.view(-1, C.shape[1]))
    return {"C": dC, "W1": dW1, "b1": db1, "W2": dW2, "b2": db2, "bngain": dbngain, "bnbias": dbnbias}
