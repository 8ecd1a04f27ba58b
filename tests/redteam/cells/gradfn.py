# attack: autograd with no name the static check knows: requires_grad through keyword unpacking, the
# backward node reached through a match class pattern and called directly (no watched entry point)
# cells: dprobs
# batch: walls
# vehicle: plain
lift = probs + torch.zeros_like(probs, **{'requires_grad': True})
top = lift.log()
match top:
    case torch.Tensor(grad_fn=node):
        dprobs = node(dlogprobs).detach()
del lift, top, node
