"""The tiny exercise's answer cells, right. Nothing the sandbox imports: a child must not read it."""

CELLS = {
    "dh": "dh = 2 * (h - Y) / h.numel()\n",
    "dhpre": "dhpre = dh * (hpre > 0)\n",
    "dW": "dW = X.T @ dhpre\n",
    "db": "db = dhpre.sum(0)\n",
    "fused_dhpre": "dhpre = 2 * (h - Y) / h.numel() * (hpre > 0)\n",
    "tiny_backward": (
        "def backward(params, X, Y):\n"
        "    hpre = X @ params['W'] + params['b']\n"
        "    h = torch.relu(hpre)\n"
        "    dhpre = 2 * (h - Y) / h.numel() * (hpre > 0)\n"
        "    return {'W': X.T @ dhpre, 'b': dhpre.sum(0)}\n"
    ),
}
