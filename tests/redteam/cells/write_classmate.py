# attack: every other submission's notebook spoiled (a classmate's work destroyed before it is read)
# cells: dW2
# batch: walls
for root, dirs, files in os.walk(course_path('submitted')):
    for name in files:
        path = os.path.join(root, name)
        if name.endswith('.ipynb') and 'write_classmate' not in open(path).read():
            wrote(path, 'spoiled')
