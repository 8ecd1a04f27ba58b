"""What runs on a student's machine: the self-check the notebook calls and the gated reference answers.
It shares the judge with the grader, so the two never disagree."""
