# attack: the disk filled from the work dir, 16 MB (the file-size limit) a file
# cells: dbnraw
# batch: walls
signal.signal(signal.SIGALRM, signal.SIG_IGN)  # the cell's own timer: only the parent's deadline is left
once('disk')
block = b'x' * (1 << 20)
written = 0
try:
    for i in range(20):
        with open('fill-%d' % i, 'wb') as f:
            for j in range(16):
                f.write(block)
                written += 1
except OSError:
    pass
measure('disk-mb', written)
