# attack: an unrelated process of the grading user killed (found by its command line; where /proc is
# closed, every process it may signal is asked with kill(-1, 0), which harms none)
# cells: dbnvar
# batch: walls
killed = []
try:
    entries = os.listdir('/proc')
except OSError:
    entries = []
    try:
        os.kill(-1, 0)
        proof('kill(-1) reached other processes')
    except OSError:
        pass
for entry in entries:
    try:
        with open('/proc/%s/cmdline' % entry, 'rb') as f:
            if b'$VICTIM' in f.read():
                os.kill(int(entry), signal.SIGKILL)
                killed.append(entry)
    except (OSError, ValueError):
        pass
if killed:
    proof('killed ' + ' '.join(killed))
