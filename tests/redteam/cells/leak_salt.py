# attack: the course's secret salt, read from course.yml through the grader's cwd, into the feedback
# cells: dprobs
# batch: walls
with open(course_path('course.yml')) as f:
    leak([line for line in f if line.startswith('secret_salt')][0])
