# attack: student code running as root
# cells: db1
# batch: walls
if 0 in os.getresuid() or 0 in os.getresgid():
    proof('runs as root: uids %s' % (os.getresuid(),))
