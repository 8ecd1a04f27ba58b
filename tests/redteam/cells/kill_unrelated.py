# attack: an unrelated process of the grading user killed
# cells: dbnvar
# batch: walls
killed = []
for entry in os.listdir('/proc'):
    try:
        with open('/proc/%s/cmdline' % entry, 'rb') as f:
            if b'$VICTIM' in f.read():
                os.kill(int(entry), signal.SIGKILL)
                killed.append(entry)
    except (OSError, ValueError):
        pass
if killed:
    proof('killed ' + ' '.join(killed))
