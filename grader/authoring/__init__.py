"""Authoring an exercise: its short form (define), the notebooks' answers and prose derived from it
(skeleton), and `exercise check`, which reads an instructor's file as the engine will. Apart from the LMS
adapters (grader.lms), which put what this makes into a course. Kept empty: an exercise file imports
grader.authoring.define, and the student package carries what exercise files import."""
