# attack: the grading process reached without a signal: its resource limits rewritten (prlimit; a CPU or
#   open-file limit of 1 would kill or cripple it) and its priority set (setpriority); each is written
#   back unchanged, so a success proves the reach without breaking the batch
# cells: dbnmeani
# batch: walls
import ctypes

libc = ctypes.CDLL(None, use_errno=True)
pid = grader_pid()
reached = []
limit = (ctypes.c_ulong * 2)()
if libc.prlimit(pid, 4, None, limit) == 0 and libc.prlimit(pid, 4, limit, None) == 0:  # RLIMIT_CORE
    reached.append('prlimit')
libc.getpriority.restype = ctypes.c_int
ctypes.set_errno(0)
nice = libc.getpriority(0, pid)  # PRIO_PROCESS
if ctypes.get_errno() == 0 and libc.setpriority(0, pid, nice) == 0:
    reached.append('setpriority')
if reached:
    proof('reached the grader (pid %d): %s' % (pid, ' '.join(reached)))
raise OSError(ctypes.get_errno(), 'the grader was out of reach')
