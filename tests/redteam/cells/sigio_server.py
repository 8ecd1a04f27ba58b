# attack: a signal sent without any signal call: a pipe's owner set to the fork server (F_SETOWN) with
#   SIGKILL as its I/O signal (F_SETSIG), then written to, so the kernel itself signals the owner
# cells: dW1
# batch: killers
import fcntl
import time

F_SETSIG = 10
server = os.getppid()
read, write = os.pipe()
fcntl.fcntl(read, fcntl.F_SETOWN, server)
fcntl.fcntl(read, F_SETSIG, signal.SIGKILL)
fcntl.fcntl(read, fcntl.F_SETFL, os.O_ASYNC | os.O_NONBLOCK)
os.write(write, b'x')
time.sleep(0.5)
if os.getppid() != server:
    proof('killed the fork server through SIGIO')
raise OSError('the fork server outlived its SIGIO')
