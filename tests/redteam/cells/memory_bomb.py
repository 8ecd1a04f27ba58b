# attack: more memory than the limit, held at once by the cell and processes it forks (the limit is per process)
# cells: dbndiff
# batch: walls
import torch

signal.signal(signal.SIGALRM, signal.SIG_IGN)  # the cell's own timer: only the parent's deadline is left
once('memory')
piece = 560
read, write = os.pipe()
children = []
for i in range(3):
    try:
        pid = os.fork()
    except OSError:  # refused: what the cell holds alone is still measured
        break
    if pid == 0:
        try:
            held = torch.ones(piece << 18)
            os.write(write, b'1')
            signal.pause()
        finally:
            os.write(write, b'0')
            os._exit(0)
    children.append(pid)
held = torch.ones(piece << 18)
count = 1 + sum(os.read(read, 1) == b'1' for pid in children)
for pid in children:
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
measure('memory-mb', count * piece)
