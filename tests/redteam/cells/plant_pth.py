# attack: a .pth file planted in the grader's Python environment, run by every later Python start of it
# (the grader included); what lands there is seen from outside
# cells: dhpreact
# batch: walls
import pwd
import site

places = {p for p in sys.path if p.endswith('site-packages')}
try:
    home = pwd.getpwuid(os.getuid()).pw_dir
    places.add(site.getusersitepackages().replace(os.path.expanduser('~'), home, 1))
except KeyError:  # a uid with no account has no user site
    pass
for place in places:
    try:
        os.makedirs(place, exist_ok=True)
    except OSError:
        pass
for place in places:
    wrote(os.path.join(place, 'zz_redteam.pth'), 'import os\n')
