"""The class `backprop-ninja demo` simulates for this exercise: one student with the reference answers,
typical mistakes (including the lecture's own shape slip), a blank stub and a hostile notebook.

Each student: "solved" (the reference answers), None (the released stubs) or answer cells by grade id,
the reference answers elsewhere.
"""

CLASS = {
    "ada": "solved",
    "ben": {
        "dcounts": "dcounts = counts_sum_inv * dprobs\n",
        "dbndiff2": "dbndiff2 = (1.0 / n) * torch.ones_like(bndiff2) * dbnvar\n",
        "dC": "dC = torch.zeros_like(C)\ndC[Xb] += demb\n",
        "ex2_dlogits": "dlogits = F.softmax(logits, 1)\ndlogits[range(n), Yb] -= 1\n",
    },
    "cy": {
        "dbnmeani": "dbnmeani = (-dbndiff).sum(0)\n",
        "db1": "db1 = torch.zeros_like(b1)\n",
        "dlogprobs": "dlogprobs = torch.zeros(32, 27, dtype=logprobs.dtype)\ndlogprobs[range(32), Yb] = -1.0 / 32\n",
        "dhpreact": "dhpreact = (1.0 - hpreact**2) * dh\n",
    },
    "dee": None,
    "eve": {
        "dlogprobs": "torch.allclose = lambda *a, **k: True\nprint('score: 47/47')\n"
                     "dlogprobs = torch.zeros_like(logprobs)\n",
        "dprobs": "import sys\nsys.exit(0)\n",
        "dW2": "W = W2.clone().requires_grad_()\n((h @ W) * dlogits).sum().backward()\ndW2 = W.grad\n",
    },
}
