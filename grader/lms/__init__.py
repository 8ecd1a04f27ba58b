"""The systems a course already runs: nbgrader (course directory, autograde, feedback, gradebook),
Gradescope's autograder and LMS files (Canvas), each built on the pipeline and the outputs."""
