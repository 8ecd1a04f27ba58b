# attack: processes left running after grading (a new session each, out of the child's process group)
# cells: dbnvar_inv
# batch: walls
for i in range(4):
    pid = os.fork()
    if pid == 0:
        os.setsid()
        if os.fork() == 0:
            os.execv('/bin/sleep', ['sleep', '$MARKER'])
        os._exit(0)
    os.waitpid(pid, 0)
