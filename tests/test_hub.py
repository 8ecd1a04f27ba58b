"""A term on a real JupyterHub, run from the README alone: the hub (PAM logins of unix users made here, each
user's server spawned as that user, configurable-http-proxy in front), the students' and graders' environments
made by the README's hub recipe, its own lines run as they stand, and the README's TA steps on a course two TAs
share (`course init --group`). Students fetch, submit and fetch their feedback through nbgrader's API on the
server the hub started for them; the TAs grade in turn with the README's commands from the graders' environment,
one sets a score by hand and the due date in formgrader through the hub; a student submits late (the course's
late penalty), another resubmits a truncated notebook (a regrade that fails, said, never the old score). Whatever
the README would leave to a workaround fails here, and so does any score that is not the final one.

The environments find torch, nbgrader and jupyterhub where this Python has them (a path file, instead of the
recipe's torch download); everything else the recipe says is done as it says. The wheels are the run's
(tests/helpers/wheels.py, shared with tests/test_package.py); each server starts once, all at the same time."""
from __future__ import annotations

import csv
import grp
import io
import json
import os
import pwd
import re
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from importlib.metadata import entry_points
from pathlib import Path

import nbformat
import pytest
import requests  # jupyterhub's own dependency (the test extra installs jupyterhub)

from helpers import users
from helpers.nbgrader_course import set_answers
from helpers.notebooks import reference_sources
from helpers.paths import COURSE, COURSE_FILE, ROOT, SOLVED

pytestmark = [pytest.mark.slow, pytest.mark.skipif(os.getuid() != 0, reason="a hub spawning users' servers needs root"),
              pytest.mark.skipif(shutil.which("configurable-http-proxy") is None and shutil.which("npm") is None,
                                 reason="no node here: the hub's proxy is configurable-http-proxy (npm)")]

COURSE_ID = "ml101"
ASSIGNMENT, NOTEBOOK = COURSE.assignment, COURSE.notebook
SCRIPTS = {"jupyter", "jupyter-server", "jupyter-labextension", "nbgrader", "jupyterhub-singleuser", "alembic"}
OURS = ("backprop_ninja", "__editable__", "grader", "student", "solutions", "autotests")
WAIT = 300  # seconds for a server to start on a busy machine


def recipe() -> tuple[str, str, str]:
    """The README's hub recipe: the students' lines, the graders' lines and the hub's configuration."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text[text.index("## The hub image recipe"):text.index("## A course on a shared server")]
    students, graders, hub = (textwrap.dedent(block) for block in re.findall(r"```(?:bash|python)\n(.*?) *```",
                                                                             section, re.S))
    return students, graders, hub


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_lines(lines: str, env_bin: Path, swap: dict[str, str], place: Path) -> None:
    """The recipe's shell lines as an administrator runs them, in `place` (which holds wheels/), with the
    environment's `python`, `pip` and `jupyter` first on PATH; the torch line is left out (the environments
    see this Python's torch)."""
    for old, new in swap.items():
        lines = lines.replace(old, new)
    lines = "\n".join(row for row in lines.splitlines() if "download.pytorch.org" not in row)
    env = {"PATH": f"{env_bin}:/usr/local/bin:/usr/bin:/bin", "HOME": str(place), "LANG": "C.UTF-8",
           "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", lines], cwd=place, env=env, capture_output=True,
                          text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]


def environment(path: Path) -> Path:
    """`python -m venv PATH` (the recipe's own first line for the graders), with this Python's packages behind
    it and Jupyter's configuration and data files as pip would have put them in it."""
    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base, "-m", "venv", "--without-pip", str(path)], check=True, timeout=600)
    site = path / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"
    deps = path / "dependencies"  # what this Python has, but neither backprop-ninja package: pip installs those
    deps.mkdir()
    for folder in (Path(p) for p in sys.path if p.endswith("site-packages")):
        for entry in folder.iterdir():
            if not entry.name.startswith(OURS) and not (deps / entry.name).exists():
                (deps / entry.name).symlink_to(entry)
    (site / "dependencies.pth").write_text(f"{deps}\n")
    (path / "bin" / "pip").write_text(f"#!/bin/sh\nexec {sys.executable} -m pip --python {path / 'bin' / 'python'} "
                                      f'"$@"\n')  # the recipe's `ENV/bin/pip`, installing into ENV
    for entry in entry_points(group="console_scripts"):  # the commands pip installs with what ENV finds here
        if entry.name in SCRIPTS:
            module, _, function = entry.value.partition(":")
            (path / "bin" / entry.name).write_text(f"#!{path / 'bin' / 'python'}\nimport sys\nimport {module} as m\n"
                                                   f"sys.exit(m.{function}())\n")
    for script in (path / "bin").iterdir():
        script.chmod(0o755)
    import nbgrader

    prefix = Path(nbgrader.__file__).resolve().parents[4]
    shutil.copytree(prefix / "etc" / "jupyter", path / "etc" / "jupyter")
    (path / "share").mkdir(exist_ok=True)
    (path / "share" / "jupyter").symlink_to(prefix / "share" / "jupyter", target_is_directory=True)
    return path


class Hub:
    """The hub's URL and a logged-in user's API calls, by a token the user asked for after a PAM login."""

    def __init__(self, url: str):
        self.url = url
        self.tokens: dict[str, str] = {}

    def login(self, name: str, password: str) -> None:
        """A PAM login, a token, and the user's server asked for (ready() waits for it)."""
        session = requests.Session()
        session.get(f"{self.url}/hub/login", timeout=60)
        xsrf = session.cookies.get("_xsrf")
        answer = session.post(f"{self.url}/hub/login", data={"username": name, "password": password, "_xsrf": xsrf},
                              allow_redirects=False, timeout=120)
        assert answer.status_code == 302, f"PAM login of {name}: {answer.status_code} {answer.text[-500:]}"
        made = session.post(f"{self.url}/hub/api/users/{name}/tokens", json={"note": "term"},
                            headers={"X-XSRFToken": session.cookies.get("_xsrf", path="/hub/") or xsrf}, timeout=60)
        assert made.status_code == 201, made.text
        self.tokens[name] = made.json()["token"]
        started = self.call(name, "POST", f"/hub/api/users/{name}/server")
        assert started.status_code in (201, 202), started.text

    def ready(self, name: str) -> None:
        deadline = time.monotonic() + WAIT
        while not self.call(name, "GET", f"/hub/api/users/{name}").json()["servers"].get("", {}).get("ready"):
            assert time.monotonic() < deadline, f"{name}'s server did not start"
            time.sleep(1)

    def call(self, name: str, method: str, path: str, **kwargs):
        return requests.request(method, self.url + path, headers={"Authorization": f"token {self.tokens[name]}"},
                                timeout=300, **kwargs)

    def server(self, name: str, method: str, path: str, **kwargs):
        """A call to `name`'s own server, through the hub's proxy."""
        return self.call(name, method, f"/user/{name}{path}", **kwargs)

    def terminal(self, name: str, command: str) -> list[str]:
        """The lines `command` prints in a new terminal of `name`'s server, opened as JupyterLab opens one."""
        import asyncio

        from tornado.httpclient import HTTPRequest
        from tornado.websocket import websocket_connect

        opened = self.server(name, "POST", "/api/terminals")
        assert opened.status_code == 200, opened.text
        url = self.url.replace("http", "ws", 1) + f"/user/{name}/terminals/websocket/{opened.json()['name']}"

        async def run() -> str:
            socket = await websocket_connect(HTTPRequest(url, headers={"Authorization": f"token {self.tokens[name]}"}))
            await socket.write_message(json.dumps(["stdin", f"echo BEGIN; {command}; echo END\r"]))
            out = ""
            while "\nEND" not in out.replace("\r", ""):
                message = await asyncio.wait_for(socket.read_message(), WAIT)
                assert message is not None, out
                kind, *text = json.loads(message)
                out += "".join(text) if kind == "stdout" else ""
            socket.close()
            return out.replace("\r", "")

        out = asyncio.run(run())
        self.server(name, "DELETE", f"/api/terminals/{opened.json()['name']}")
        lines = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07", "", out).splitlines()  # the shell's colours
        assert "BEGIN" in lines and "END" in lines, out
        return lines[lines.index("BEGIN") + 1:lines.index("END")]

    def nbgrader(self, name: str, action: str) -> list[dict]:
        """nbgrader's Assignments tab: `action` (fetch, submit, fetch_feedback) done as the student's server does."""
        done = self.server(name, "POST", f"/assignments/{action}",
                           json={"assignment_id": ASSIGNMENT, "course_id": COURSE_ID})
        assert done.status_code == 200 and done.json()["success"], done.text
        return done.json()["value"]


@pytest.fixture
def people():
    """Two TAs in the staff's group and three students, unix users with passwords (PAM), homes 0700 as the
    README says an administrator sets them."""
    group = f"bpnhub{secrets.token_hex(2)}"
    subprocess.run(["groupadd", group], check=True, capture_output=True)
    try:
        with users.Session("bpnta") as ta1, users.Session("bpnta") as ta2, users.Session("bpnstu") as one, \
                users.Session("bpnstu") as two, users.Session("bpnstu") as three:
            tas, students = [ta1.user, ta2.user], [one.user, two.user, three.user]
            for ta in tas:
                subprocess.run(["usermod", "-aG", group, ta.name], check=True, capture_output=True)
            passwords = {u.name: secrets.token_urlsafe(12) for u in (*tas, *students)}
            subprocess.run(["chpasswd"], input="".join(f"{n}:{p}\n" for n, p in passwords.items()), text=True,
                           check=True, capture_output=True)
            for person in (*tas, *students):
                person.home.chmod(0o700)
            yield group, tas, students, passwords
    finally:
        subprocess.run(["groupdel", group], capture_output=True)


def proxy_command(place: Path) -> str:
    """configurable-http-proxy, from npm where the machine lacks it."""
    found = shutil.which("configurable-http-proxy")
    if found:
        return found
    subprocess.run(["npm", "install", "--prefix", str(place / "node"), "configurable-http-proxy"], check=True,
                   capture_output=True, timeout=600)
    return str(place / "node" / "node_modules" / ".bin" / "configurable-http-proxy")


def test_a_term_on_a_jupyterhub_from_the_readme_alone(people, wheels):
    group, (ta1, ta2), students, passwords = people
    place = Path(tempfile.mkdtemp(prefix="bpn-hub-", dir="/srv" if os.path.isdir("/srv") else None))
    place.chmod(0o755)
    hub_process = None
    try:
        (place / "wheels").symlink_to(wheels, target_is_directory=True)  # the README's `pip wheel` lines' output
        graders, learners, exchange = place / "graders", place / "students", place / "exchange"
        exchange.mkdir(mode=0o1777)
        exchange.chmod(0o1777)  # "a folder an administrator made with mode 1777"
        students_lines, graders_lines, hub_lines = recipe()
        environment(learners)
        run_lines(students_lines.replace("python -m venv /opt/students\n", ""), learners / "bin",
                  {"/opt/students": str(learners)}, place)
        (learners / "etc" / "jupyter" / "nbgrader_config.py").write_text(
            f"c.Exchange.root = {str(exchange)!r}\nc.CourseDirectory.course_id = {COURSE_ID!r}\n")
        graders_lines = graders_lines.replace("python -m venv /opt/graders\n", "")
        environment(graders)
        run_lines(graders_lines, graders / "bin", {"/opt/graders": str(graders), "ml101-staff": group}, place)

        port, proxy_api = free_port(), free_port()
        hub_dir = place / "hub"
        hub_dir.mkdir(mode=0o700)
        hub_config = hub_lines.replace("/opt/graders", str(graders)).replace("/opt/students", str(learners)) \
            .replace("ml101-staff", group)
        (hub_dir / "jupyterhub_config.py").write_text(f"""\
c.JupyterHub.bind_url = "http://127.0.0.1:{port}"
c.JupyterHub.hub_bind_url = "http://127.0.0.1:{free_port()}"
c.ConfigurableHTTPProxy.api_url = "http://127.0.0.1:{proxy_api}"
c.ConfigurableHTTPProxy.command = [{proxy_command(place)!r}]
c.JupyterHub.db_url = "sqlite:///{hub_dir / 'hub.sqlite'}"
c.JupyterHub.cookie_secret_file = "{hub_dir / 'cookie_secret'}"
c.JupyterHub.pid_file = "{hub_dir / 'hub.pid'}"
c.Authenticator.allowed_users = {set(passwords)!r}
c.Spawner.http_timeout = {WAIT}
c.Spawner.start_timeout = {WAIT}
{hub_config}
""")
        log = open(hub_dir / "hub.log", "w")
        hub_process = subprocess.Popen([sys.executable, "-m", "jupyterhub", "-f", "jupyterhub_config.py"], cwd=hub_dir,
                                       stdout=log, stderr=subprocess.STDOUT,
                                       env={"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8",
                                            "HOME": str(hub_dir)})
        hub = Hub(f"http://127.0.0.1:{port}")
        deadline = time.monotonic() + WAIT
        while True:
            try:
                if requests.get(f"{hub.url}/hub/api", timeout=10).status_code == 200:
                    break
            except requests.ConnectionError:
                pass
            assert hub_process.poll() is None and time.monotonic() < deadline, (hub_dir / "hub.log").read_text()
            time.sleep(1)

        def as_ta(ta, *argv: str, cwd: Path | None = None, must: bool = True) -> subprocess.CompletedProcess:
            """A command in a TA's terminal: the hub's hook put the graders' environment first on PATH."""
            env = ta.env(PATH=f"{graders / 'bin'}:/usr/local/bin:/usr/bin:/bin")
            done = ta.run(list(argv), cwd=cwd or ta.home, env=env, capture_output=True, text=True, timeout=900)
            assert "Traceback" not in done.stderr or not must, f"{argv}: {done.stderr[-3000:]}"
            assert done.returncode == 0 or not must, f"{argv}: {done.stdout[-2000:]}{done.stderr[-3000:]}"
            return done

        # the students' servers start while the first TA makes the course the two share, in a folder of its own
        # linked into the TA's home (formgrader serves only a course inside the home a hub starts it in)
        for student in students:
            hub.login(student.name, passwords[student.name])
        courses = place / "courses"
        courses.mkdir(mode=0o755)
        os.chown(courses, ta1.uid, ta1.gid)
        course = courses / "ml101"
        as_ta(ta1, "backprop-ninja", "course", "init", str(course), "--course-id", COURSE_ID, "--solutions", "off",
              "--exchange", str(exchange), "--group", group, "--course", str(COURSE_FILE))
        as_ta(ta1, "ln", "-s", str(course), str(ta1.home / "ml101"))
        as_ta(ta1, "backprop-ninja", "course", "formgrader", str(ta1.home / "ml101"))
        with open(course / "nbgrader_config.py", "a", encoding="utf-8") as config:  # the course's late penalty
            config.write('\nc.LateSubmissionPlugin.penalty_method = "zero"\n')
        hub.login(ta1.name, passwords[ta1.name])
        as_ta(ta2, "backprop-ninja", "course", "check", str(course))
        assert (exchange / COURSE_ID).stat().st_gid == grp.getgrnam(group).gr_gid  # any TA collects and releases
        as_ta(ta1, "nbgrader", "generate_assignment", ASSIGNMENT, cwd=course)
        as_ta(ta1, "nbgrader", "release_assignment", ASSIGNMENT, cwd=course)
        for who in (ta1.name, *(s.name for s in students)):
            hub.ready(who)
        # A terminal of the TA's server, as the TA opens it: the sixth TA trial's `backprop-ninja` was "command not
        # found" there (jupyter_server starts a login shell, whose /etc/profile resets PATH); as_ta's PATH is that
        # terminal's
        said = hub.terminal(ta1.name, "command -v backprop-ninja nbgrader")
        assert said == [str(graders / "bin" / "backprop-ninja"), str(graders / "bin" / "nbgrader")], said
        # and a student's: the eighth TA trial's student terminal found no `python` or `nbgrader` at all
        said = hub.terminal(students[0].name, "command -v python nbgrader backprop-ninja")
        assert said == [str(learners / "bin" / "python"), str(learners / "bin" / "nbgrader")], said

        path = f"{ASSIGNMENT}/{NOTEBOOK}"
        late, blank, truncated = students[2], students[1], students[0]
        answers = {truncated.name: reference_sources(), blank.name: {}, late.name: reference_sources()}

        def submit(student) -> None:
            (listed,) = [a for a in hub.nbgrader(student.name, "fetch") if a["status"] == "fetched"]
            assert (student.home / path).is_file(), listed
            nb = nbformat.from_dict(hub.server(student.name, "GET", f"/api/contents/{path}").json()["content"])
            set_answers(nb, answers[student.name])
            saved = hub.server(student.name, "PUT", f"/api/contents/{path}",
                               json={"type": "notebook", "format": "json", "content": nb})
            assert saved.status_code == 200, saved.text
            assert any(a["status"] == "submitted" for a in hub.nbgrader(student.name, "submit"))

        submit(truncated)
        submit(blank)
        # the due date, set in formgrader through the hub; the third student submits after it
        time.sleep(1)  # the due date is to the second: after the second student's submission
        due = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime())
        dated = hub.server(ta1.name, "PUT", f"/formgrader/api/assignment/{ASSIGNMENT}",
                           json={"duedate_notimezone": due, "duedate_timezone": "UTC"})
        assert dated.status_code == 200 and dated.json()["duedate"], dated.text
        time.sleep(2)
        submit(late)
        # the students' server has no formgrader (the recipe turned it off); the TA's has, on the course init named
        assert hub.server(students[0].name, "GET", "/formgrader/api/assignments").status_code == 404

        notebook_id = Path(NOTEBOOK).stem
        full = sum(COURSE.points.values())

        def formgrader() -> dict[str, dict]:
            listed = hub.server(ta1.name, "GET", f"/formgrader/api/submitted_notebooks/{ASSIGNMENT}/{notebook_id}")
            assert listed.status_code == 200, listed.text
            return {row["student"]: row for row in listed.json()}

        as_ta(ta1, "nbgrader", "collect", ASSIGNMENT, cwd=course)
        as_ta(ta2, "nbgrader", "autograde", ASSIGNMENT, cwd=course)  # the second TA grades the first's course
        rows = formgrader()
        assert {s: r["score"] for s, r in rows.items()} == {truncated.name: full, blank.name: 0, late.name: full}

        # a score set by hand in formgrader: the blank submission's dcounts
        grades = hub.server(ta1.name, "GET", "/formgrader/api/grades",
                            params={"submission_id": rows[blank.name]["id"]}).json()
        (dcounts,) = [g for g in grades if g["name"] == "check_dcounts"]
        hand = COURSE.points["dcounts"]
        set_by_hand = hub.server(ta1.name, "PUT", f"/formgrader/api/grade/{dcounts['id']}",
                                 json={"manual_score": hand, "extra_credit": 0})
        assert set_by_hand.status_code == 200, set_by_hand.text

        # the first student resubmits a notebook cut short (a failed upload); the first TA regrades
        text = (truncated.home / path).read_text(encoding="utf-8")
        cut = hub.server(truncated.name, "PUT", f"/api/contents/{path}",
                         json={"type": "file", "format": "text", "content": text[:len(text) // 2]})
        assert cut.status_code == 200, cut.text
        time.sleep(1)
        assert any(a["status"] == "submitted" for a in hub.nbgrader(truncated.name, "submit"))
        as_ta(ta1, "nbgrader", "collect", "--update", ASSIGNMENT, cwd=course)
        regrade = as_ta(ta1, "nbgrader", "autograde", ASSIGNMENT, cwd=course, must=False)
        assert regrade.returncode != 0 and truncated.name in regrade.stderr, regrade.stderr[-3000:]

        as_ta(ta2, "nbgrader", "generate_feedback", ASSIGNMENT, cwd=course)
        as_ta(ta2, "nbgrader", "release_feedback", ASSIGNMENT, cwd=course)
        report = as_ta(ta1, "backprop-ninja", "report", "results/", "--json", cwd=course)
        exported = as_ta(ta2, "backprop-ninja", "export", "results/", "--format", "canvas", cwd=course)

        # every score is the final one: the gradebook's, less the late penalty; none for the failed regrade
        final = {blank.name: hand, late.name: 0.0}
        said = json.loads(report.stdout)
        assert {s["submission"].split("/")[0]: s["score"] for s in said["submissions"]} == final
        assert truncated.name in report.stderr and "not graded" in report.stderr, report.stderr
        canvas = {row[3]: row[-1] for row in csv.reader(io.StringIO(
            (course / "results" / "canvas.csv").read_text(encoding="utf-8")))}
        assert (canvas[blank.name], canvas[late.name], canvas[truncated.name]) == (f"{hand:g}", "0", ""), canvas
        assert truncated.name in exported.stderr, exported.stderr
        for student, score in final.items():
            result = json.loads((course / "results" / student / ASSIGNMENT / f"{notebook_id}.json").read_text())
            assert result["score"] == pytest.approx(score), student
            hub.nbgrader(student, "fetch_feedback")
            (page,) = (Path(pwd.getpwnam(student).pw_dir) / ASSIGNMENT / "feedback").glob(f"*/{notebook_id}.html")
            text = page.read_text(encoding="utf-8")
            assert f"(Score: {score:g} / {full:g})" in text and f'class="bpn-total">Total: {score:g} / ' in text
            shown = hub.server(ta1.name, "GET", f"/formgrader/submissions/{formgrader()[student]['id']}/")
            assert shown.status_code == 200 and f"Total: {score:g} / {full:g}" in shown.text, student
        # formgrader's own list: a score set by hand counts (nbgrader's manual score); the late penalty and a
        # regrade that failed do not show there (docs/instructors.md says why)
        assert formgrader()[blank.name]["score"] == hand

        # nothing readable that should not be: the solved notebook in the graders' environment, the course,
        # and another student's answers and feedback
        solved = next(graders.rglob(SOLVED.name))
        for what in (solved, course / "course.yml", course / "gradebook.db", blank.home / path,
                     late.home / ASSIGNMENT / "feedback"):
            seen = truncated.run(["ls", "-l", str(what)], capture_output=True, text=True)
            assert seen.returncode != 0 and "Permission denied" in seen.stderr, what
        hub_log = (hub_dir / "hub.log").read_text()
        assert "Traceback" not in hub_log, hub_log[-5000:]
    finally:
        if hub_process is not None:
            hub_process.terminate()
            try:
                hub_process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                hub_process.kill()
        shutil.rmtree(place, ignore_errors=True)
