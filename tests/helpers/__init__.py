"""Test helpers that reproduce the hosts the grader meets outside CI: a normal unix user instead of
root (users), and a kernel that refuses user namespaces (nouserns); and the red team's floor, the real
command with the static check switched off (nostatic)."""
