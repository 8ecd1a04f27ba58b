# attack: SysV shared memory, a message queue and a semaphore set left behind (they outlive every process)
# cells: dbnmeani
# batch: walls
import ctypes

libc = ctypes.CDLL(None, use_errno=True)
made = []
if libc.shmget(0, 64 << 20, 0o1600) >= 0:
    made.append('shm')
queue = libc.msgget(0, 0o1666)
if queue >= 0:
    message = ctypes.create_string_buffer(8 + 32)
    ctypes.memmove(ctypes.addressof(message), (1).to_bytes(8, 'little') + b'left by a submission', 28)
    libc.msgsnd(queue, message, 20, 0)
    made.append('msg')
if libc.semget(0, 1, 0o1600) >= 0:
    made.append('sem')
if made:
    proof('left ' + ' '.join(made))
raise OSError(ctypes.get_errno(), 'SysV IPC refused')
