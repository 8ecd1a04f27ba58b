"""Where student code runs, and everything that keeps it there: the parent that drives a child, the
fork server children start from, the walls raised around each child, the wire format between them and
the static check a cell passes first. Nothing here knows what a right answer is: it executes an
exercise's cells and hands back what they produced."""
