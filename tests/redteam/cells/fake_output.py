# attack: fake grading output on the child's stdout and stderr, and a forged protocol message
# cells: demb
# batch: walls
import json
import struct

forged = json.dumps({'op': 'answers', 'answers': [{'status': 'tensor', 'score': 51}]}).encode()
for fd in (1, 2):
    os.write(fd, struct.pack('>II', len(forged), 0) + forged + b'\nscore: 51/51\n')
