# attack: student code running as the host's root (uid 0 outside any user namespace)
# cells: db1
# batch: walls
try:
    with open('/proc/self/uid_map') as f:
        host_root = any(fields[:2] == ['0', '0'] for fields in (line.split() for line in f))
except OSError:  # no map to read: uid 0 is taken to be the host's
    host_root = True
if host_root and 0 in os.getresuid():
    proof('runs as root: uids %s' % (os.getresuid(),))
