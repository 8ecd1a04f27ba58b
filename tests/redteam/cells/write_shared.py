# attack: files left in shared places: a world-writable folder beside the course, /tmp, /var/tmp, /dev/shm
# cells: dbnbias
# batch: walls
targets = [os.path.join(d, 'bpn-redteam-$MARKER') for d in ('/tmp', '/var/tmp', '/dev/shm')]
try:
    targets.append(os.path.join(os.path.dirname(course_dir()), 'open', 'canary.txt'))
except OSError:
    pass
written = [path for path in targets if wrote(path, 'written by a submission\n')]
if written:
    proof('wrote ' + ' '.join(written))
