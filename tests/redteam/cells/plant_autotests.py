# attack: code planted in the course's hidden suite, which the trusted grader imports on its next run
# cells: db2
# batch: walls
wrote(course_path('autotests', 'test_zz_redteam.py'), 'def test_planted():\n    pass\n')
