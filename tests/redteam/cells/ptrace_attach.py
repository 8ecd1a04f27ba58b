# attack: the grading process traced (ptrace), which would let the cell read and change its memory
# cells: dbndiff2
# batch: walls
import ctypes

libc = ctypes.CDLL(None, use_errno=True)
pid = grader_pid()
if libc.ptrace(16, pid, None, None) == 0:  # PTRACE_ATTACH
    os.waitpid(pid, 0x40000000)  # __WALL
    libc.ptrace(17, pid, None, None)  # PTRACE_DETACH
    proof('attached to the grader')
raise OSError(ctypes.get_errno(), 'ptrace refused')
