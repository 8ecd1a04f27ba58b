# attack: the hidden suite (the course's autotests/) into the feedback
# cells: dcounts_sum
# batch: walls
with open(course_path('autotests', 'conftest.py')) as f:
    leak(f.read(300))
