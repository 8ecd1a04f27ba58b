# attack: a hidden configuration's sizes and data planted in an error, glued to letters where whole-number
#   masking misses them, raised on the hidden configurations only (the lecture-sized one has n == 32), so
#   that the feedback, the gradebook or a page would carry them back if they crossed
# cells: dlogprobs
# batch: walls
# vehicle: plain
if n != 32:
    {}[f"REDTEAM-HIDDEN n{n}v{logits.shape[1]}h{hpreact.shape[1]}x{Xb[0].tolist()}y{Yb[:4].tolist()}"]
