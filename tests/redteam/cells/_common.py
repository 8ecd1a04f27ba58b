# Shared by every payload but the plain ones: how a student who read grader/sandbox/zygote.py and
# grader/sandbox/parent.py finds the grading process (the fork server's parent) and the course (its cwd,
# `backprop-ninja grade` being run from the course folder), and how text gets back to the student: an
# exception's message becomes the feedback. Where /proc is closed to it, the payload still tries the wall
# it targets by a route that needs no /proc: the grading session's leader (the grader, as the tests start
# it) and the course folder's path, which a student can guess ($COURSE: the test fills it in).
import os
import signal
import sys


def grader_pid():
    # In a PID namespace of its own the child's parent and session leader have no pid (0, which system
    # calls read as the caller itself): the grader cannot be named, so the payload names no process.
    try:
        with open('/proc/%d/stat' % os.getppid()) as stat:
            pid = int(stat.read().rsplit(')', 1)[1].split()[1])
    except OSError:
        pid = os.getsid(os.getppid())
    return pid or 0x3FFFFFFF


def course_dir():
    try:
        return os.readlink('/proc/%d/cwd' % grader_pid())
    except OSError:
        return '$COURSE'


def course_path(*parts):
    # Through the grader's own cwd link, the path resolves in the grader's mount namespace.
    try:
        os.stat('/proc/%d/cwd/' % grader_pid())
        return os.path.join('/proc/%d/cwd' % grader_pid(), *parts)
    except OSError:
        return os.path.join(course_dir(), *parts)


def wrote(path, text):
    try:
        with open(path, 'a') as f:
            f.write(text)
        return True
    except OSError:
        return False


# The feedback shows one configuration's message, not necessarily the first run's: what a payload
# found is kept in the work dir (it lasts for the whole submission) and said again by every later run.
SAID = '.redteam-said'


def keep(text):
    try:
        with open(SAID, 'w') as f:
            f.write(text)
    except OSError:
        pass


def say(text):
    keep(text)
    raise ValueError(text)


def leak(text):
    say('REDTEAM-LEAK ' + text)


def proof(text):
    say('REDTEAM-PROOF ' + text)


def measure(kind, value):
    say('REDTEAM-MEASURE %s %d' % (kind, value))


def once(name):
    # A heavy payload runs on the first configuration only: later runs repeat what it found.
    keep('REDTEAM-ONCE %s did not finish' % name)


if os.path.exists(SAID):
    with open(SAID) as said:
        raise ValueError(said.read())
