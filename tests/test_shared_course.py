"""A course two TAs share (`course init --group`), as two normal unix users in the staff's group: what one
TA's nbgrader wrote, the other replaces (a TA's umask 022 once left `PermissionError` for the next), and
`course check` verifies the group, setgid folders and umask, and warns of home folders others may enter."""
from __future__ import annotations

import os
import secrets
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from helpers import users
from helpers.paths import COURSE, COURSE_FILE, ROOT, SOLVED

pytestmark = [pytest.mark.slow, pytest.mark.skipif(os.getuid() != 0, reason="making users and a group needs root")]


@pytest.fixture(scope="module")
def staff():
    """Two TAs in a staff group of their own, each with an environment that runs this checkout's grader."""
    group = f"bpnstaff{secrets.token_hex(2)}"
    subprocess.run(["groupadd", group], check=True, capture_output=True)
    try:
        with users.Session("bpnta") as one, users.Session("bpnta") as two:
            tas = [one.user, two.user]
            for ta in tas:
                subprocess.run(["usermod", "-aG", group, ta.name], check=True, capture_output=True)
            yield group, [(ta, ta.venv()) for ta in tas]
    finally:
        subprocess.run(["groupdel", group], capture_output=True)


def _run(ta, venv: Path, args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    base = Path(getattr(sys, "_base_executable", sys.executable)).parent  # nbgrader runs alembic from there
    env = ta.env(PATH=f"{venv / 'bin'}:{base}:/usr/bin:/bin", JUPYTER_CONFIG_DIR=str(ta.home / ".jupyter"))
    return ta.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


def test_two_tas_share_a_course_and_course_check_verifies_it(staff, tmp_path):
    group, [(first, first_venv), (second, second_venv)] = staff
    place = Path(f"/tmp/bpn-shared-{secrets.token_hex(3)}")
    place.mkdir(mode=0o755)
    os.chown(place, first.uid, first.gid)
    try:
        shutil.copy(COURSE_FILE, place / "course.yml")
        os.chown(place / "course.yml", first.uid, first.gid)
        # In a folder init makes, under umask 077 (the fifth TA trial made /srv/courses by hand: made by init, it
        # was the instructor's alone, and no TA could reach the course)
        course = place / "courses" / "course"
        done = _run(first, first_venv, ["sh", "-c", f"umask 077 && backprop-ninja course init {course} --course "
                                        f"{place / 'course.yml'} --group {group}"], place)
        assert done.returncode == 0, done.stderr
        above = course.parent.stat()
        assert (stat.S_IMODE(above.st_mode), above.st_gid) == (0o750, __import__("grp").getgrnam(group).gr_gid)
        top = course.stat()
        assert (stat.S_IMODE(top.st_mode), top.st_gid) == (0o2770, __import__("grp").getgrnam(group).gr_gid)
        assert stat.S_IMODE((course / "course.yml").stat().st_mode) == 0o660  # the salt: the staff's, no one else's
        python = str(first_venv / "bin" / "python")
        done = _run(first, first_venv, [python, "-m", "nbgrader", "generate_assignment", COURSE.assignment], course)
        assert done.returncode == 0, done.stderr[-2000:]
        done = _run(second, second_venv, [str(second_venv / "bin" / "python"), "-m", "nbgrader", "generate_assignment",
                                          COURSE.assignment, "--force"], course)
        assert done.returncode == 0, done.stderr[-2000:]  # the first TA's gradebook.db and release/ replaced
        assert stat.S_IMODE((course / "gradebook.db").stat().st_mode) & 0o067 == 0o060
        # The docs' try before the students do, run in the course by a TA with the usual umask 022: it wrote
        # the hidden suite's bytecode into autotests/, which no other TA could replace (a TA trial).
        tries = place / "tries"
        tries.mkdir()
        shutil.copy(SOLVED, tries / "solved.ipynb")
        for path in (tries, tries / "solved.ipynb"):
            os.chown(path, first.uid, first.gid)
        done = _run(first, first_venv, ["sh", "-c", f"umask 022 && backprop-ninja grade {tries} --out "
                                        f"{place / 'tries-results'} --course course.yml"], course)
        assert done.returncode == 0, done.stderr[-2000:]
        assert not list(course.rglob("__pycache__"))
        done = _run(second, second_venv, ["backprop-ninja", "course", "check", str(course)], course)
        assert done.returncode == 0, done.stdout + done.stderr
        assert f"group {group}" in done.stdout and "Traceback" not in done.stderr
        os.chmod(course / "release", 0o770)  # a folder made without the setgid bit
        (course / "nbgrader_config.py").write_text((course / "nbgrader_config.py").read_text().replace(
            "os.umask(0o007)", ""))
        done = _run(second, second_venv, ["backprop-ninja", "course", "check", str(course)], course)
        assert done.returncode == 1, done.stdout
        assert f"{course / 'release'}: chmod g+rwxs" in done.stderr and "sets no umask" in done.stderr
    finally:
        shutil.rmtree(place, ignore_errors=True)


def test_a_course_under_a_folder_only_root_writes_is_one_line_with_the_administrators_command(staff):
    """The sixth TA trial's `course init /srv/courses/ml101 --group staff` as the instructor: a traceback
    ending in PermissionError. It is one line naming the folder and the command an administrator runs."""
    group, [(ta, venv), _] = staff
    place = Path(tempfile.mkdtemp(prefix="bpn-srv-"))
    place.chmod(0o755)  # root's, as /srv is
    try:
        done = _run(ta, venv, ["backprop-ninja", "course", "init", str(place / "courses" / "ml101"), "--group",
                               group], ta.home)
    finally:
        shutil.rmtree(place)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and f"could not write {place / 'courses'}: permission denied" in lines[0], lines
    assert f"sudo install -d -o {ta.name} -g {group} -m 0750 {place / 'courses'}" in lines[0], lines


def test_course_check_warns_of_home_folders_others_may_enter(staff, tmp_path):
    """Debian's default 0755 homes let every student read the others' notebooks and feedback: said, for the
    administrator, without failing the check of a private course."""
    from click.testing import CliRunner

    from grader.cli import main

    _, [(ta, _), _] = staff
    course = tmp_path / "course"
    course.mkdir(mode=0o700)
    mode = stat.S_IMODE(ta.home.stat().st_mode)
    try:
        ta.home.chmod(0o755)
        done = CliRunner().invoke(main, ["course", "check", str(course)])
    finally:
        ta.home.chmod(mode)
    assert done.exit_code == 0, done.output
    assert "home folder(s) other users may enter or list" in done.stderr and "chmod 700" in done.stderr


def test_a_graders_environment_only_the_staff_may_read_grades(staff, tmp_path):
    """The README's graders' environment on a hub: every folder and file of it the staff group's, closed to
    others (the solved notebook is among its files). A TA's sandboxed child once failed to start there
    (`FileNotFoundError` on its work dir): the folders others cannot enter inside the environment were
    covered again after it was bound back, hiding the grader beneath them. Root grades from it too: its
    sandboxed child, a uid of its own in no group, still imports the grader, behind every required wall."""
    group, [(ta, _), _] = staff
    base = getattr(sys, "_base_executable", sys.executable)
    env = Path(tempfile.mkdtemp(prefix="bpn-graders-", dir="/srv" if os.path.isdir("/srv") else None))
    try:
        subprocess.run([base, "-m", "venv", "--without-pip", "--system-site-packages", str(env)], check=True)
        site = env / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"
        shutil.copytree(ROOT / "grader", site / "grader", ignore=shutil.ignore_patterns("__pycache__"))
        solved = site / "grader" / "course_data" / "solutions" / SOLVED.name
        solved.parent.mkdir(parents=True)
        shutil.copy(SOLVED, solved)
        subprocess.run(["chgrp", "-R", group, str(env)], check=True)
        subprocess.run(["chmod", "-R", "g+rX,g-w,o-rwx", str(env)], check=True)  # the README's recipe
        done = ta.run([str(env / "bin" / "python"), "-c", "from grader.cli import main; main()", "sandbox", "check"],
                      env=ta.env(PATH=f"{env / 'bin'}:/usr/bin:/bin"), capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stdout + done.stderr
        assert "every required wall holds" in done.stdout and "failed to start" not in done.stderr
        where = ta.run([str(env / "bin" / "python"), "-c", "import grader; print(grader.__file__)"],
                       capture_output=True, text=True)
        assert where.stdout.startswith(str(site / "grader")), where
        # root grading from it: the child becomes a uid of its own, in no group, and still imports the grader
        done = subprocess.run([str(env / "bin" / "python"), "-c", "from grader.cli import main; main()", "grade",
                               str(SOLVED), "--course", str(COURSE_FILE), "--out", str(tmp_path / "results")],
                              cwd=tmp_path, capture_output=True, text=True,
                              timeout=600, env={"PATH": f"{env / 'bin'}:/usr/bin:/bin", "HOME": str(tmp_path)})
        assert done.returncode == 0 and f"{sum(COURSE.points.values()):g} / " in done.stdout, done.stderr[-3000:]
        with users.Session("bpnstu") as student:
            seen = student.user.run(["cat", str(solved)], capture_output=True, text=True)
        assert seen.returncode != 0 and "Permission denied" in seen.stderr
    finally:
        shutil.rmtree(env, ignore_errors=True)
