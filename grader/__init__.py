"""backprop-ninja: backpropagation by hand through an MLP language model, with a hidden autograder.

Importing the package stays cheap (no torch, nbgrader or nbformat) so that the command line answers
at once; each step imports its heavy dependencies itself.
"""

__version__ = "0.1.0"
