"""The answer cells of tiny_relu.py's exercise, right, as a student would write each: apart from the
exercise, so that nothing the sandboxed child may read holds them."""

CELLS = {
    "dz": "dz = 2 * (z - Y) / n\n",
    "da": "da = dz.clone()\n",
    "dh": "dh = (h > 0).to(h.dtype) * da + dz\n",
    "db": "db = dh.sum(0)\n",
    "dW": "dW = e.T @ dh\n",
    "de": "de = dh @ W.T\n",
    "dE": "dE = torch.zeros_like(E).index_add(0, X, de)\n",
    "fused_dh": "dh = 2 * (torch.relu(h) + h - Y) / n * ((h > 0).to(h.dtype) + 1)\n",
    "fit_backward": (
        "def backward(params, cache, X, Y):\n"
        "    e, h = cache['e'], cache['h']\n"
        "    dh = 2 * (torch.relu(h) + h - Y) / X.shape[0] * ((h > 0).to(h.dtype) + 1)\n"
        "    de = dh @ params['W'].T\n"
        "    return {'E': torch.zeros_like(params['E']).index_add(0, X, de), 'W': e.T @ dh, 'b': dh.sum(0)}\n"
    ),
}
