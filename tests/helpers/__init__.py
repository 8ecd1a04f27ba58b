"""What the tests share: where the checkout's course is (paths); submission notebooks (notebooks); a real
nbgrader course (nbgrader_course); the processes a sandbox leaves behind (children); pages in a real
browser (browser, whose `check_page` fixture tests/conftest.py offers every test); and the hosts the
grader meets outside CI: a normal unix user instead of root (users), a kernel or container that refuses
some system calls or namespaces (refuse), and the red team's floor, the real command with the static
check switched off (nostatic)."""
