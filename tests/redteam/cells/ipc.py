# attack: IPC the host would keep or share: a POSIX message queue (no Landlock rule sees one), POSIX
#   shared memory and a named pipe in shared places, SysV objects, an abstract unix socket, a socket
#   pair, eventfd and memfd; whatever is made is left behind for another process to meet (the test
#   inventories the host's IPC before and after)
# cells: dcounts_sum_inv
# batch: walls
# prelude: helpers.ipc
import json

res = try_ipc('bpn-redteam-ipc-$MARKER')
made = sorted(kind for kind, how in res.items() if how == 'made' and kind not in ('shm_open', 'mkfifo', 'pipe'))
if made:
    proof('made ' + ' '.join(made))
raise OSError('IPC refused: ' + json.dumps(res))
