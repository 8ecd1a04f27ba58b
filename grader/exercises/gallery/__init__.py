"""Exercises written in the short form of grader/authoring/define.py: each a forward pass, its parameters, data and
sizes, with every answer, reference and mistake derived."""
