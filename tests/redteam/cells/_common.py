# Shared by every payload that runs through the escape vehicle: how a student who read grader/zygote.py
# and grader/sandbox.py finds the grading process (the fork server's parent) and the course (its cwd,
# `backprop-ninja grade` being run from the course folder), and how text gets back to the student: an
# exception's message becomes the feedback.
import os
import signal
import sys


def grader_pid():
    with open('/proc/%d/stat' % os.getppid()) as stat:
        return int(stat.read().rsplit(')', 1)[1].split()[1])


def course_path(*parts):
    # Through the grader's own cwd link, the path resolves in the grader's mount namespace.
    return os.path.join('/proc/%d/cwd' % grader_pid(), *parts)


def course_dir():
    return os.readlink('/proc/%d/cwd' % grader_pid())


def wrote(path, text):
    try:
        with open(path, 'a') as f:
            f.write(text)
        return True
    except OSError:
        return False


def leak(text):
    raise ValueError('REDTEAM-LEAK ' + text)


def proof(text):
    raise ValueError('REDTEAM-PROOF ' + text)


def once(name):
    # A heavy payload runs on the first configuration only (the work dir lasts for the whole
    # submission); later runs report what the first one found.
    mark = '.redteam-' + name
    if os.path.exists(mark):
        with open(mark) as f:
            raise ValueError(f.read())
    with open(mark, 'w') as f:
        f.write('REDTEAM-ONCE %s did not finish' % name)
    return mark


def measure(kind, value, mark=None):
    text = 'REDTEAM-MEASURE %s %d' % (kind, value)
    if mark:
        try:
            with open(mark, 'w') as f:
                f.write(text)
        except OSError:
            pass
    raise ValueError(text)
