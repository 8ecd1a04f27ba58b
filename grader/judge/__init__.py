"""The trusted side of grading: hidden configurations and the oracle's values for them, the pytest
session that runs the hidden suite, comparisons and named mistakes, and points. It reads what the
sandbox produced and never runs student code itself."""
