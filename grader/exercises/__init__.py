"""Exercise packages: each declares one exercise as a value (grader.exercise) that the engine grades
without knowing what network it is."""
