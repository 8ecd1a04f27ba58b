# attack: the command lines of processes outside the sandbox (/proc/*/cmdline) are readable
# cells: dlogit_maxes
# batch: walls
with open('/proc/%d/cmdline' % grader_pid(), 'rb') as f:
    proof('read the grader command line: ' + f.read().replace(b'\0', b' ').decode()[:200])
