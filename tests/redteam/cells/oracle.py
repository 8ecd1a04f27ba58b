# attack: full credit without a line of math: every answer computed by the grader's own oracle (grader.judge.oracle)
#   on the cell's own inputs, and the runtime autograd watch's record emptied afterwards
# cells: all
# batch: walls
import torch
from grader.exercises.makemore_mlp import EXERCISE
from grader.judge import oracle

NETWORK = EXERCISE.network

frame = sys._getframe()
while not frame.f_code.co_filename.startswith('<answer cell '):  # the cell itself, or the one that exec'd it
    frame = frame.f_back
grade_id = frame.f_code.co_filename[len('<answer cell '):-1]
ns = globals()


def forget():
    for cell in torch.autograd.grad.__closure__:
        if type(cell.cell_contents) is list:
            cell.cell_contents.clear()


def values_of(space):
    return {k: space[k] for k in (*NETWORK.parameters, *NETWORK.intermediates, 'Xb', 'Yb') if k in space}


if grade_id == EXERCISE.functions[0].cell:
    def manual_backward(params, cache, Yb):
        grads = oracle.chain_gradients(NETWORK, params, {"Xb": cache['Xb'], "Yb": Yb})
        forget()
        return {p: grads['d' + p].to(params[p].dtype) for p in params}
else:
    answer = EXERCISE.by_grade_id[grade_id]
    values = values_of(ns)
    one = torch.ones((), dtype=values['logits'].dtype)
    if answer.part == 2:
        result = oracle.block_vjp(NETWORK, values, 'logits', 'loss', one)
    elif answer.part == 3:
        result = oracle.block_vjp(NETWORK, values, 'hprebn', 'hpreact', ns['dhpreact'])
    elif answer.source == 'logprobs':
        result = oracle.local_vjp(NETWORK, values, 'logprobs', {'loss': one})
    else:
        result = oracle.local_vjp(NETWORK, values, answer.source, {c: ns['d' + c] for c in NETWORK.consumers(answer.source)})
    ns[answer.variable] = result.to(values[answer.source].dtype)
    forget()
