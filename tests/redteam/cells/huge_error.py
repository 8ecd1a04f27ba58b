# attack: a 10 MB error message
# cells: dprobs
# batch: input
# vehicle: plain
dprobs = {}['x' * 10_000_000]
