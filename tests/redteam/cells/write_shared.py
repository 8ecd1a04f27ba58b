# attack: files left in shared places: a world-writable folder beside the course, /tmp, /var/tmp, /dev/shm
# (what lands there is seen from outside: a write into the sandbox's own cover of a folder vanishes with it)
# cells: dbnbias
# batch: walls
targets = [os.path.join(d, 'bpn-redteam-$MARKER') for d in ('/tmp', '/var/tmp', '/dev/shm')]
try:
    targets.append(os.path.join(os.path.dirname(course_dir()), 'open', 'canary.txt'))
except OSError:
    pass
for path in targets:
    wrote(path, 'written by a submission\n')
