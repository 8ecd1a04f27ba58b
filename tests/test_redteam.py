"""The red-team corpus (tests/redteam/) graded through the real command, as an instructor runs it, on
the three kinds of host the grader meets: as root (CI), as a normal user (most instructors, every
JupyterHub), and as a normal user on a host that refuses user namespaces (Ubuntu 24.04, Docker's
default profile: tests/helpers/refuse.py).

Every host runs the `floor` vehicle (redteam.VEHICLES): the command with the static check switched off
(tests/helpers/nostatic.py), each payload then running its escape directly, so that the kernel walls
alone stand in its way; the floor's wiretap shows everything a child sent back, even where the feedback
replaces it. The `checked` vehicle, the product as it is, runs on one host: the static check is the
trusted process's own analysis of the source, the same on every host, and what gets past it meets the
walls the floor already proves on each host, so a second or third checked host would prove nothing new.

In each mode three batches run from a course folder of the grading user's own
(`backprop-ninja grade submitted --out results --course course.yml --html`, then, in two modes, `report` and
`export`):
the wall attacks, the input attacks and the killers, each beside the released notebook left blank (the
baseline) and one answered correctly (`zz-correct`, graded after the attacks). Required of every attack, in every mode:
it gains no credit (it scores what the blank scores), leaks no secret into any file or terminal line,
proves no capability it should not have, leaves nothing behind (processes, SysV objects, files outside
the results folder) and breaks no batch (the correct notebook keeps full marks, every command exits 0
and writes clean files). A host that cannot raise the walls may instead refuse up front: grade exits
non-zero with one line, before any student code runs, and writes no result.
"""
from __future__ import annotations

import contextlib
import html
import html.parser
import json
import os
import re
import secrets
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import redteam
import yaml

from grader.safe_text import output_stem
from grader.vocabulary import GRADE_CELL_PREFIX
from helpers import ipc, nostatic, refuse, users
from helpers.cli import export_formats
from helpers.paths import COURSE, ROOT
from solutions import reference

NOUSERNS = [str(Path(refuse.__file__).resolve()), "--user-namespaces"]
NOSTATIC = Path(nostatic.__file__).resolve()
MODES = ("root", "user", "nouserns")
CHECKED_HOST = "user"  # most instructors' and every JupyterHub's: the product as it is, walls and check together
NB = "backprop_ninja"
ASSIGNMENT = COURSE.assignment
# The nbgrader route: in the floor, where every payload runs and meets the walls alone (the static check before
# them is the same code on both routes, grader.pipeline.grading.Grader), on the hosts where instructors run
# nbgrader as themselves: with user namespaces (every JupyterHub) and without (Ubuntu 24.04). As root the walls
# it meets are the fast route's, which the root floor proves, and nbgrader's own handling is the same code.
NBGRADER_VEHICLE = "floor"
NBGRADER_HOSTS = ("user", "nouserns")
# `report` and `export` read the results and course.yml and run no student code, the same on every host: they
# run on the results the weakest walls let attacks shape most (the floor without user namespaces) and on the
# product's as it is (the checked vehicle), each command as its normal user.
REPORT_MODES = (("nouserns", "floor"), (CHECKED_HOST, "checked"))
# Its hostile student: these attacks' cells, every XSS payload, a copied and a deleted answer cell; and
# one whose right answers sit beside cells that crash or hang their child.
HOSTILE = ("ipc", "sysv", "leak_salt", "hidden_values")
STOPPED = ("crash_child", "timeout_swallow")
UID_BASE = 1_000_000_000  # grader.sandbox.parent gives each child a uid of its own from here (as root)
LIMITS = {"timeout_seconds": 40, "cell_timeout_seconds": 2, "memory_mb": 2048, "file_size_mb": 16, "processes": 32,
          "analysis_cpu_seconds": 5}
# No gradient here needs a file: a child that could write this much to the host's disk was not capped.
DISK_CAP_MB = 256
# A cell stopped at its time limit costs that limit once, not once per configuration and check; one that
# will not stop costs it with the parent's grace twice at most: in the exchange of many cells the parent
# stopped, and alone in a fresh child, which finds it among them (grader.sandbox.parent).
ONE_TIMEOUT_SECONDS = 2 * (LIMITS["cell_timeout_seconds"] + 5) + 5
# What the grader writes in a results folder: a result and a page per submission, and the class files.
CLASS_FILES = {"grades.csv", "report.html", "grade_ids.csv", "canvas.csv"}
ATTACKS = {a.name: a for a in redteam.attacks()}
INPUT_NOTEBOOKS = ("deep-nesting", "huge-outputs", "forged-grades", "bad-name", "ansi-name", "symlink", "student-html",
                   "copied-cells", "nested-prints", "report")
# A submission named after the class report: its files must take another name, the report keeps its own.
CLASHING_NAME = "report"
# The hostile notebook's copied answer cell (three copies, two of them right) and its deleted one.
COPIED, DELETED = "dW2", "dcounts"
WALLS_REFUSAL = re.compile(r"wall|sandbox|namespace|landlock|seccomp|isolat", re.IGNORECASE)
# What a payload achieved, as its error says it (not its own source, which quotes the words before a quote).
EVIDENCE = re.compile(r"REDTEAM-(?:PROOF|LEAK) (?!'|&#39;|&#x27;|\\)[^\"\\<]{0,200}")
HIDDEN_VALUE = re.compile(r"REDTEAM-HIDDEN n\d")  # the hidden_values cell's text, once filled in


def _sleep_marker() -> str:
    """A sleep(1) argument no other process on the machine has: it marks processes as this test's."""
    return f"{900 + secrets.randbelow(90)}.{secrets.randbelow(10**9):09d}"


# ---------------------------------------------------------------------------------------------
# What the machine holds, before and after


def _status_uid(pid: str) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("Uid:"):
                return int(line.split()[1])
    except (OSError, ValueError):
        return None
    return None


def _processes() -> dict[int, tuple[int | None, bytes]]:
    """pid -> (real uid, command line) of every living process."""
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
            state = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if state != "Z":
            found[int(entry)] = (_status_uid(entry), cmdline)
    return found


def _sysv() -> set[tuple[str, int, int]]:
    """(kind, id, creator uid) of every SysV shared memory segment, message queue and semaphore set."""
    found = set()
    for kind in ("shm", "msg", "sem"):
        lines = Path(f"/proc/sysvipc/{kind}").read_text().splitlines()
        header = lines[0].split()
        for line in lines[1:]:
            row = dict(zip(header, line.split()))
            found.add((kind, int(row[{"shm": "shmid", "msg": "msqid", "sem": "semid"}[kind]]), int(row["cuid"])))
    return found


SHARED = ("/tmp", "/var/tmp", "/dev/shm")


def _shared_entries() -> dict[str, int]:
    """path -> owner of every entry at the top of the world-writable places."""
    found = {}
    for place in SHARED:
        for name in os.listdir(place):
            with contextlib.suppress(OSError):
                found[os.path.join(place, name)] = os.lstat(os.path.join(place, name)).st_uid
    return found


# What the trusted grader itself writes: pytest's caches of the hidden suite in the course folder,
# matplotlib's font cache in the grading user's home.
GRADER_CACHES_RE = re.compile(r"/(__pycache__|\.pytest_cache|\.benchmarks|\.cache/matplotlib|\.config/matplotlib)(/|$)")


def _fingerprint(root: Path, skip: tuple[Path, ...] = ()) -> dict[str, tuple]:
    """relative path -> (mode, owner, size, mtime, bytes) of every file and symbolic link under `root`
    (a folder changes only by what is put in it)."""
    found = {}
    for path in sorted(root.rglob("*")):
        if any(path == s or s in path.parents for s in skip) or GRADER_CACHES_RE.search(path.as_posix()):
            continue
        if path.is_symlink() or path.is_file():
            st = path.lstat()
            found[path.relative_to(root).as_posix()] = (st.st_mode, st.st_uid, st.st_size, st.st_mtime_ns,
                                                        None if path.is_symlink() else path.read_bytes())
    return found


def _site_dirs(*extra: Path) -> list[Path]:
    return sorted({Path(p) for p in sys.path if p.endswith("site-packages")} | set(extra))


PLANTED_PTH = "zz_redteam.pth"  # the name plant_pth writes


# ---------------------------------------------------------------------------------------------
# One mode: where its files are, how its commands run


@dataclass
class Batch:
    name: str
    dir: Path
    course: Path
    # what each submission is (an attack's name, ...) -> text its id holds, however the grader spells it
    submissions: dict[str, str] = field(default_factory=dict)
    commands: list[dict] = field(default_factory=list)
    results: dict[str, dict] = field(default_factory=dict)
    files: list[str] = field(default_factory=list)
    refused: str | None = None
    # floor vehicle: submission id -> what its child sent back (tests/helpers/nostatic.py's wiretap)
    crossed: dict[str, list[dict]] = field(default_factory=dict)

    @property
    def out(self) -> Path:
        return self.course / "results"

    def command(self, verb: str) -> dict:
        return next(c for c in self.commands if c["verb"] == verb)

    @property
    def wiretap(self) -> Path:
        # beside the batch folders, out of every place a payload walks or the tests fingerprint
        return self.dir.with_name(f"{self.name}.wiretap.jsonl")


class Mode:
    def __init__(self, name: str, vehicle: str, session: users.Session | None, nbgrader_template: Path | None = None):
        self.name = name
        self.vehicle = vehicle
        self.session = session if name != "root" else None
        self.user = self.session.user if self.session else None
        self.canary = {k: f"CANARY-{k}-{secrets.token_hex(8)}" for k in
                       ("salt", "token", "private", "classmate", "autotests")}
        self.marker, self.victim_marker = _sleep_marker(), _sleep_marker()
        self.base = Path("/srv") / f"bpn-redteam-{secrets.token_hex(4)}"
        self.batches: dict[str, Batch] = {}
        self.grader_pids: list[int] = []
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.setblocking(False)
        self.beacon = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.template = nbgrader_template
        self.nbgrader: Batch | None = None
        self.victim = None
        self.venv = None

    # -- the world -------------------------------------------------------------------------

    def build(self) -> None:
        self.base.mkdir(mode=0o755)
        if self.user:
            self.session.keep_root_traversable()
            self.venv = self.user.home / "venv"
            if not self.venv.exists():
                self.user.venv()
        for batch in redteam.BATCHES:
            self.batches[batch] = self._batch(batch)
        if self.template is not None:
            self.nbgrader = self._nbgrader_course()
        if self.user:
            self.user.give(self.base)
        for batch in self.batches.values():
            # a classmate's private notebook (0600, another uid) that a symlink among the submissions names
            private = batch.dir / "private" / "classmate.ipynb"
            os.chown(private, 65534, 65534)
            private.chmod(0o600)

    def _batch(self, name: str) -> Batch:
        folder = self.base / name
        course = folder / "course"
        raw = yaml.safe_load((ROOT / "course.yml").read_text())
        raw.update(limits=LIMITS, secret_salt=self.canary["salt"], autotests="autotests")
        course.mkdir(parents=True)
        (course / "course.yml").write_text(yaml.safe_dump(raw, sort_keys=False))
        shutil.copytree(ROOT / "autotests", course / "autotests",
                        ignore=shutil.ignore_patterns("__pycache__", ".pytest_cache"))
        conftest = course / "autotests" / "conftest.py"
        conftest.write_text(f"# {self.canary['autotests']}\n" + conftest.read_text())
        (folder / "private").mkdir()
        (folder / "private" / "notes.txt").write_text(self.canary["private"] + "\n")
        (folder / "private" / "notes.txt").chmod(0o600)
        (folder / "open").mkdir()
        (folder / "open").chmod(0o777)
        (folder / "open" / "canary.txt").write_text("untouched\n")
        (folder / "open" / "canary.txt").chmod(0o666)
        batch = Batch(name, folder, course)
        submitted = course / "submitted"
        correct = redteam.with_cell(redteam.correct(), self.canary["classmate"], markdown=True)
        notebooks = {"blank": ("blank", redteam.released()), "zz-correct": ("zz-correct", correct)}
        values = {"port": str(self.listener.getsockname()[1]), "marker": self.marker, "victim": self.victim_marker,
                  "course": str(course)}
        for attack in ATTACKS.values():
            if attack.batch == name:
                place = f"zz~{attack.name}" if attack.last else attack.name
                notebooks[attack.name] = (place, attack.notebook(self.vehicle, **values))
                if name == "killers" and not attack.last:
                    # graded beside it (the next in order): its child shares the fork server with the attack's
                    notebooks[f"{attack.name}~neighbour"] = (f"{attack.name}~neighbour", correct)
        for what, (place, nb) in notebooks.items():
            path = submitted / place / f"{NB}.ipynb"
            path.parent.mkdir(parents=True)
            path.write_text(redteam.notebook_text(nb))
            batch.submissions[what] = f"{place}/"
        (folder / "private" / "classmate.ipynb").write_text(redteam.notebook_text(redteam.correct()))
        if name == "input":
            self._input_notebooks(batch, submitted)
        return batch

    def _nbgrader_course(self) -> Batch:
        """A copy of the course `course init` and generate_assignment made (NBGRADER_STUDENTS submitted in
        it), with this mode's limits, salt and hidden suite, graded by nbgrader's autograde."""
        folder = self.base / "nbgrader"
        course = folder / "course"
        shutil.copytree(self.template, course, symlinks=True)
        raw = yaml.safe_load((course / "course.yml").read_text())
        raw.update(limits=LIMITS, secret_salt=self.canary["salt"])
        (course / "course.yml").write_text(yaml.safe_dump(raw, sort_keys=False))
        conftest = course / "autotests" / "conftest.py"
        conftest.write_text(f"# {self.canary['autotests']}\n" + conftest.read_text())
        batch = Batch("nbgrader", folder, course)
        values = {"port": str(self.listener.getsockname()[1]), "marker": self.marker, "victim": self.victim_marker,
                  "course": str(course)}
        cells = lambda *names: {c: ATTACKS[a].cell(self.vehicle, **values) for a in names  # noqa: E731
                                for c in ATTACKS[a].cells}
        hostile = redteam.released(cells(*HOSTILE))
        students = {
            "blank": redteam.released(),
            "hostile": redteam.copied_cells(redteam.student_html(hostile, self.beacon), COPIED, DELETED),
            "stopped": redteam.released({**reference.cells(), **cells(*STOPPED)}),
            "zz-correct": redteam.with_cell(redteam.correct(), self.canary["classmate"], markdown=True),
        }
        for student, nb in students.items():
            path = course / "submitted" / student / ASSIGNMENT / f"{NB}.ipynb"
            path.parent.mkdir(parents=True)
            path.write_text(redteam.notebook_text(nb))
            batch.submissions[student] = f"{student}/"
        return batch

    def _input_notebooks(self, batch: Batch, submitted: Path) -> None:
        blank = redteam.released()
        huge = [{"output_type": "stream", "name": "stdout", "text": "x" * (30 << 20)}]
        made = {
            "deep-nesting": redteam.released({"dprobs": redteam.deep_nesting()}),
            "huge-outputs": redteam.with_cell(blank, "print('x' * (30 << 20))", outputs=huge),
            "forged-grades": redteam.forged_grades(blank),
            "student-html": redteam.student_html(blank, self.beacon),
            "copied-cells": redteam.copied_cells(blank, COPIED, DELETED),
            "nested-prints": redteam.nested_prints_notebook(),
        }
        for sid, nb in made.items():
            path = submitted / sid / f"{NB}.ipynb"
            path.parent.mkdir(parents=True)
            path.write_text(redteam.notebook_text(nb))
            batch.submissions[sid] = f"{sid}/"
        # a folder name that is not UTF-8, and one that rewrites a terminal
        for sid, name, needle in (("bad-name", b"bad-\xff\xfe", "bad-"),
                                  ("ansi-name", b"\x1b[2J\x1b[H\x1b[1;32mALL-PASS\x1b[0m", "ALL-PASS")):
            folder = os.path.join(os.fsencode(submitted), name)
            os.mkdir(folder)
            with open(os.path.join(folder, NB.encode() + b".ipynb"), "w") as f:
                f.write(redteam.notebook_text(blank))
            batch.submissions[sid] = needle
        (submitted / f"{CLASHING_NAME}.ipynb").write_text(redteam.notebook_text(blank))
        batch.submissions[CLASHING_NAME] = CLASHING_NAME
        link = submitted / "symlink" / f"{NB}.ipynb"
        link.parent.mkdir()
        link.symlink_to(batch.dir / "private" / "classmate.ipynb")
        batch.submissions["symlink"] = "symlink/"

    # -- commands --------------------------------------------------------------------------

    def argv(self, batch: Batch, args: list[str]) -> list[str]:
        python = sys.executable if self.user is None else str(self.venv / "bin" / "python")
        if self.vehicle == "floor":
            command = [python, str(NOSTATIC), "--wiretap", str(batch.wiretap), "--", *args]
        elif args[0] == "nbgrader":
            command = [python, "-m", "nbgrader", *args[1:]]
        elif self.user is None:
            command = [shutil.which("backprop-ninja") or str(Path(sys.executable).parent / "backprop-ninja"), *args]
        else:
            command = [str(self.venv / "bin" / "backprop-ninja"), *args]
        if self.name == "nouserns":
            command = [python, *NOUSERNS, "--", *command]
        return command if self.user is None else self.user.command(command)

    def env(self) -> dict[str, str]:
        # nbgrader's Jupyter folders in the mode's own, not the grading user's home (which must not change)
        token = {"GRADING_API_TOKEN": self.canary["token"],
                 **{f"JUPYTER_{k}_DIR": str(self.base / "jupyter" / k.lower()) for k in ("CONFIG", "DATA", "RUNTIME")}}
        if self.user:
            return self.user.env(**token)
        # as root, the checkout under test (a worktree's PYTHONPATH), not whichever one is installed
        path = {"PYTHONPATH": os.environ["PYTHONPATH"]} if os.environ.get("PYTHONPATH") else {}
        return {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/root"), "LANG": "C.UTF-8", **path, **token}

    def run(self, batch: Batch, verb: str, args: list[str], timeout: float = 300) -> dict:
        if self.session:
            self.session.keep_root_traversable()
        started = time.monotonic()
        proc = subprocess.Popen(self.argv(batch, args), cwd=batch.course, env=self.env(), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, start_new_session=True)
        if verb == "grade":
            self.grader_pids.append(proc.pid)  # setpriv and the wrapper exec: the grader keeps this pid
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
        done = {"verb": verb, "exit": proc.returncode, "stdout": out, "stderr": err,
                "seconds": time.monotonic() - started}
        batch.commands.append(done)
        return done

    def child_uid(self, uid: int | None) -> bool:
        """Whether a process or object of `uid` was made by this mode's grading: a sandboxed child's uid
        (as root: derived from its grader's pid), or the grading user's."""
        if uid is None:
            return False
        if self.user is not None:
            return uid == self.user.uid
        return any(0 <= uid - (UID_BASE + ((pid & 0xFFFF) << 12)) < 4096 for pid in self.grader_pids)

    def grade_all(self) -> None:
        victim = [shutil.which("sleep"), self.victim_marker]
        self.victim = self.user.popen(victim) if self.user else subprocess.Popen(victim)
        self.before = {"processes": set(_processes()), "sysv": _sysv(), "shared": _shared_entries(),
                       "ipc": ipc.inventory(),
                       "site": {d: d.is_dir() and PLANTED_PTH in os.listdir(d) for d in self._site_dirs()},
                       **{f"{b.name}-course": _fingerprint(b.course, (b.out,)) for b in self.batches.values()},
                       **{f"{b.name}-{k}": _fingerprint(b.dir / k) for b in self.batches.values()
                          for k in ("private", "open")}}
        if self.user:
            self.before["home"] = _fingerprint(self.user.home)
        for batch in self.batches.values():
            grade = self.run(batch, "grade", ["grade", "submitted", "--out", "results", "--course", "course.yml",
                                              "--html", "--jobs", "2"])
            if batch.out.is_dir():
                for path in batch.out.rglob("*.json"):
                    with contextlib.suppress(ValueError, UnicodeDecodeError):
                        batch.results[path.relative_to(batch.out).with_suffix("").as_posix()] = json.loads(
                            path.read_text())
            if batch.wiretap.is_file():
                for line in batch.wiretap.read_text(encoding="utf-8").splitlines():
                    crossed = json.loads(line)
                    batch.crossed.setdefault(crossed["id"], []).append(crossed)
            lines = grade["stderr"].decode(errors="replace").strip().splitlines()
            if grade["exit"] != 0 and not batch.results and len(lines) == 1 and WALLS_REFUSAL.search(lines[0]):
                batch.refused = lines[0]
                continue
            if (self.name, self.vehicle) in REPORT_MODES:
                self.run(batch, "report", ["report", "results"])
                for fmt in export_formats():
                    self.run(batch, f"export-{fmt}", ["export", "results", "--format", fmt, "--course", "course.yml"])
            if batch.out.is_dir():
                batch.files = sorted(os.fsdecode(p.relative_to(batch.out)) for p in batch.out.rglob("*") if p.is_file())
        if self.nbgrader is not None:
            self._autograde(self.nbgrader)
        self._observe()

    def _autograde(self, batch: Batch) -> None:
        """nbgrader's autograde of every student, then the hostile one's feedback (rendering costs as much as
        grading): once per mode, beside the fast route."""
        self.run(batch, "autograde", ["nbgrader", "autograde", ASSIGNMENT], timeout=600)
        self.run(batch, "generate_feedback", ["nbgrader", "generate_feedback", ASSIGNMENT, "--student=hostile"])
        from nbgrader.api import Gradebook, MissingEntry

        with Gradebook(f"sqlite:///{batch.course / 'gradebook.db'}") as gb:
            for student in batch.submissions:
                with contextlib.suppress(MissingEntry):
                    notebook = gb.find_submission_notebook(NB, ASSIGNMENT, student)
                    batch.results[student] = {"score": notebook.score, "max_score": notebook.max_score,
                                              "grades": {g.name.removeprefix(GRADE_CELL_PREFIX): g.score
                                                         for g in notebook.grades}}
        with contextlib.closing(sqlite3.connect(batch.course / "gradebook.db")) as db:
            self.gradebook = "\n".join(db.iterdump())
        self.nbgrader_files = {}
        for place in ("autograded", "feedback"):
            for path in (batch.course / place).rglob("*") if (batch.course / place).is_dir() else ():
                if path.is_file() and path.suffix in (".ipynb", ".html"):
                    self.nbgrader_files[path.relative_to(batch.course).as_posix()] = path.read_text(errors="replace")

    def _site_dirs(self) -> list[Path]:
        extra = []
        if self.venv:
            extra = list((self.venv / "lib").glob("python*/site-packages"))
        return _site_dirs(*extra)

    def _observe(self) -> None:
        deadline = time.monotonic() + 5
        while True:
            left = {pid: cmd for pid, (uid, cmd) in _processes().items()
                    if pid not in self.before["processes"] and pid != self.victim.pid
                    and (self.child_uid(uid) or self.marker.encode() in cmd)}
            if not left or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        self.left_processes = left
        self.left_sysv = {o for o in _sysv() - self.before["sysv"] if self.child_uid(o[2])}
        self.left_ipc = ipc.made(self.before["ipc"], ipc.inventory(), self.marker, self.child_uid)
        self.left_shared = {p: uid for p, uid in _shared_entries().items()
                            if p not in self.before["shared"] and (self.child_uid(uid) or self.marker in p)}
        self.site_after = {d: d.is_dir() and PLANTED_PTH in os.listdir(d) for d in self._site_dirs()}
        self.after = {f"{b.name}-course": _fingerprint(b.course, (b.out,)) for b in self.batches.values()}
        self.after.update({f"{b.name}-{k}": _fingerprint(b.dir / k) for b in self.batches.values()
                           for k in ("private", "open")})
        if self.user:
            self.after["home"] = _fingerprint(self.user.home)
        self.victim_alive = self.victim.poll() is None
        try:
            self.connection = self.listener.accept()
        except BlockingIOError:
            self.connection = None

    def texts(self) -> dict[str, str]:
        """Everything the grading wrote or printed: file or stream -> its text."""
        found = {}
        for batch in [*self.batches.values(), *([self.nbgrader] if self.nbgrader else [])]:
            for command in batch.commands:
                for stream in ("stdout", "stderr"):
                    found[f"{batch.name} {command['verb']} {stream}"] = command[stream].decode(errors="replace")
            if batch.wiretap.is_file():  # what a child sent back: the parent has it, whatever it shows
                found[str(batch.wiretap)] = batch.wiretap.read_text(encoding="utf-8")
            if batch.out.is_dir():
                for path in batch.out.rglob("*"):
                    if path.is_file():
                        found[os.fsdecode(path)] = path.read_bytes().decode(errors="replace")
        if self.nbgrader:  # what nbgrader recorded and rendered: the gradebook, autograded notebooks, feedback
            found["gradebook.db"] = self.gradebook
            found.update({f"nbgrader {name}": text for name, text in self.nbgrader_files.items()})
        return found

    # -- clean-up: only what this mode made ------------------------------------------------

    def cleanup(self) -> None:
        self.listener.close()
        if self.victim is not None and self.victim.poll() is None:
            self.victim.kill()
        if self.victim is not None:
            self.victim.wait()
        for pid, (uid, cmd) in _processes().items():
            if pid not in self.before.get("processes", {pid}) and (self.child_uid(uid) or self.marker.encode() in cmd):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        ipc.remove(getattr(self, "left_ipc", set()))
        for kind, ident, uid in _sysv() - self.before.get("sysv", set()):
            if self.child_uid(uid):
                subprocess.run(["ipcrm", {"shm": "-m", "msg": "-q", "sem": "-s"}[kind], str(ident)],
                               capture_output=True)
        for path, uid in _shared_entries().items():
            if path not in self.before.get("shared", {path: 0}) and (self.child_uid(uid) or self.marker in path):
                if os.path.isdir(path) and not os.path.islink(path):
                    shutil.rmtree(path, ignore_errors=True)
                else:
                    with contextlib.suppress(OSError):
                        os.unlink(path)
        for site in self._site_dirs():
            if not self.before.get("site", {}).get(site, True):
                with contextlib.suppress(OSError):
                    (site / PLANTED_PTH).unlink()
        shutil.rmtree(self.base, ignore_errors=True)


@pytest.fixture(scope="module", params=[(m, "floor") for m in MODES] + [(CHECKED_HOST, "checked")],
                ids=lambda p: "-".join(p))
def mode(request):
    if os.getuid() != 0:
        pytest.skip("the red-team modes create a user and read every process: they need root (CI is root)")
    name, vehicle = request.param
    session = request.getfixturevalue("unix_user") if name != "root" else None
    # the course `course init` and generate_assignment made (tests/conftest.py), copied into the mode
    nbgrader = vehicle == NBGRADER_VEHICLE and name in NBGRADER_HOSTS
    template = request.getfixturevalue("generated_course") if nbgrader else None
    m = Mode(name, vehicle, session, template)
    try:
        m.build()
        m.grade_all()
        yield m
    finally:
        m.cleanup()


# ---------------------------------------------------------------------------------------------
# Reading results


def _result(batch: Batch, what: str) -> dict | None:
    found = _results_of(batch, what)
    return found[0] if found else None


def _results_of(batch: Batch, what: str, found: dict | None = None) -> list:
    """The results of one submission (or what else `found` holds by submission id), found by the text its
    id holds (a grader may make an id safe to print, or refuse the submission: then there is none)."""
    needle = batch.submissions[what]
    found = batch.results if found is None else found
    if needle.endswith("/"):  # a folder of its own
        return [r for sid, r in found.items() if sid.startswith(needle)]
    return [r for sid, r in found.items() if needle in sid]


def _blank_score(batch: Batch) -> float:
    blank = _result(batch, "blank")
    assert blank is not None, f"the blank notebook has no result in {batch.name}"
    # a result rewritten after the grader wrote it would make every comparison with it vacuous
    assert blank["score"] == sum(t["score"] for t in blank["tests"]) < blank["max_score"], blank["score"]
    return blank["score"]


def _attack_text(batch: Batch, what: str) -> str:
    """What a submission got back: its result, its page, and (floor) what its child sent the grader."""
    result = _result(batch, what)
    parts = [json.dumps(result, ensure_ascii=False)] if result else []
    parts += [json.dumps(c, ensure_ascii=False) for c in _results_of(batch, what, batch.crossed)]
    page = batch.out / batch.submissions[what] / f"{NB}.html"
    if page.is_file():
        parts.append(page.read_bytes().decode(errors="replace"))
    return "\n".join(parts)


def _measured(batch: Batch, sid: str, kind: str) -> int | None:
    found = re.findall(rf"REDTEAM-MEASURE {kind} (\d+)", _attack_text(batch, sid))
    return max(map(int, found)) if found else None


def _measured_or_stopped(batch: Batch, what: str, value: int | None) -> None:
    """A measuring attack either reports its measure or was visibly stopped (refused, flagged): a result
    with neither would make the limit's check vacuous."""
    result = _result(batch, what)
    assert result is not None, f"{what}: no result"
    assert value is not None or result["flags"], f"{what}: no measure and no flag"


def _may_hold(secret: str, where: str) -> bool:
    """nbgrader keeps each student's notebook as handed in and shows it back (autograded/, feedback/): the
    classmate canary and the reference answers are in some of them by design; its gradebook holds the
    instructor's solved source cells."""
    own = {"classmate": ("zz-correct",), "reference-answers": ("zz-correct", "stopped", "hostile")}.get(secret, ())
    return (where.startswith("nbgrader ") and any(f"/{student}/" in where for student in own)
            or secret == "reference-answers" and where == "gradebook.db")


def _needles(secret: str, mode: Mode) -> list[str]:
    if secret == "reference-answers":
        text = "\n".join(reference.cells().values())
        public = redteam.RELEASED.read_text()  # the scaffold students receive (shown back in nbgrader's feedback)
        lines = [line.strip() for line in text.splitlines()
                 if len(line.strip()) >= 30 and json.dumps(line.strip())[1:-1] not in public]
        return [v for line in lines for v in {line, html.escape(line), html.escape(line, quote=False),
                                               json.dumps(line)[1:-1]}]
    return [mode.canary[secret]]


slow = pytest.mark.slow


def _not_refused(mode: Mode, batch: str) -> Batch:
    b = mode.batches[batch]
    if b.refused:
        pytest.skip(f"grading refused up front in mode {mode.name}: {b.refused}")
    return b


# ---------------------------------------------------------------------------------------------
# Every batch finishes, or is refused before any student code runs


@slow
@pytest.mark.parametrize("batch", redteam.BATCHES)
def test_grading_finishes_or_refuses_up_front(mode, batch):
    b = mode.batches[batch]
    grade = b.command("grade")
    if b.refused:
        assert not b.out.exists() or not list(b.out.rglob("*.json")), b.refused
        return
    assert grade["exit"] == 0, (mode.name, grade["exit"], grade["stderr"][-3000:])
    missing = [what for what in b.submissions if what not in ("symlink", "bad-name") and not _results_of(b, what)]
    assert not missing, (mode.name, missing, grade["stderr"][-2000:])


@slow
@pytest.mark.parametrize("batch", redteam.BATCHES)
def test_every_correct_submission_keeps_full_marks(mode, batch):
    b = _not_refused(mode, batch)
    for what in [w for w in b.submissions if w == "zz-correct" or w.endswith("~neighbour")]:
        found = _results_of(b, what)
        assert found, (what, b.command("grade")["stderr"][-2000:])
        assert found[0]["score"] == found[0]["max_score"], \
            (what, [(t["name"], t["output"][:200]) for t in found[0]["tests"] if t["score"] < t["max_score"]])


@slow
@pytest.mark.parametrize("batch", redteam.BATCHES)
def test_report_and_exports_work_and_files_are_clean(mode, batch):
    b = _not_refused(mode, batch)
    verbs = [command["verb"] for command in b.commands[1:]]
    assert verbs == (["report", *(f"export-{f}" for f in export_formats())]
                     if (mode.name, mode.vehicle) in REPORT_MODES else []), verbs
    for command in b.commands[1:]:
        assert command["exit"] == 0, (command["verb"], command["stderr"][-2000:])
    for name in b.files:
        ours = (name in CLASS_FILES or "/" in name and Path(name).name in (f"{NB}.json", f"{NB}.html")
                or name in (f"{output_stem(CLASHING_NAME)}.json", f"{output_stem(CLASHING_NAME)}.html"))
        assert ours, f"not a file the grader writes: {name!r}"
        (b.out / name).read_bytes().decode("utf-8")  # valid UTF-8, surrogates included
    for command in b.commands:
        text = command["stdout"].decode(errors="replace")
        assert not re.search(r"[\x00-\x08\x0b-\x1f\x7f]", text), (command["verb"], "control characters on the terminal")


@slow
@pytest.mark.parametrize("attack", [*ATTACKS, *INPUT_NOTEBOOKS])
def test_an_attack_gains_no_credit(mode, attack):
    batch = ATTACKS[attack].batch if attack in ATTACKS else "input"
    b = _not_refused(mode, batch)
    results = _results_of(b, attack)
    if attack not in ("symlink", "bad-name"):
        assert results, f"{attack}: no result"
    # an attack beside right answers (`answers: reference`) may keep theirs, and gain nothing in its own cells
    ceiling = _without(ATTACKS[attack].cells) if attack in ATTACKS and ATTACKS[attack].answered else _blank_score(b)
    for result in results:
        assert max(result["score"], sum(t["score"] for t in result["tests"])) <= ceiling, (
            attack, result["score"], ceiling, [(t["name"], t["score"]) for t in result["tests"] if t["score"]])


@slow
@pytest.mark.parametrize("attack", list(ATTACKS))
def test_an_attack_proves_nothing_and_leaks_nothing(mode, attack):
    b = _not_refused(mode, ATTACKS[attack].batch)
    text = _attack_text(b, attack)
    if ATTACKS[attack].static_only and mode.vehicle == "floor":
        # no wall stands against it: its success shows that the floor's cells really ran unchecked
        assert "REDTEAM-PROOF" in text, text[:2000]
        return
    found = re.findall(r"REDTEAM-(?:PROOF|LEAK)[^\"\\<]{0,300}", text)
    assert not found, found[:3]


@slow
@pytest.mark.parametrize("secret", ["salt", "token", "private", "classmate", "autotests", "reference-answers"])
def test_no_secret_reaches_any_file_or_terminal(mode, secret):
    needles = _needles(secret, mode)
    leaks = sorted({where for where, text in mode.texts().items() for n in needles
                    if n in text and not _may_hold(secret, where)})
    assert not leaks, leaks


@slow
def test_the_disk_a_child_can_fill_is_capped(mode):
    b = _not_refused(mode, "walls")
    written = _measured(b, "disk_fill", "disk-mb")
    _measured_or_stopped(b, "disk_fill", written)
    assert written is None or written <= DISK_CAP_MB, f"wrote {written} MB"


@slow
def test_the_memory_limit_holds_for_the_child_as_a_whole(mode):
    b = _not_refused(mode, "walls")
    held = _measured(b, "memory_bomb", "memory-mb")
    _measured_or_stopped(b, "memory_bomb", held)
    assert held is None or held <= LIMITS["memory_mb"], f"held {held} MB at once"


@slow
@pytest.mark.parametrize("attack", ["timeout_rerun", "timeout_swallow"])
def test_a_cell_past_its_time_limit_costs_that_limit_once(mode, attack):
    b = _not_refused(mode, "walls")
    result = _result(b, attack)
    assert result is not None
    assert result["execution_time"] <= ONE_TIMEOUT_SECONDS, result["execution_time"]


@slow
def test_nothing_is_left_running(mode):
    assert not mode.left_processes, {p: c.replace(b"\0", b" ")[:120] for p, c in mode.left_processes.items()}


@slow
def test_no_sysv_object_is_left(mode):
    assert not mode.left_sysv


@slow
def test_no_ipc_object_is_left(mode):
    """POSIX message queues, shared memory, SysV objects, abstract sockets: the host's IPC, inventoried
    before and after grading, holds nothing a submission made."""
    assert not mode.left_ipc


@slow
def test_nothing_is_left_in_shared_places(mode):
    assert not mode.left_shared


@slow
@pytest.mark.parametrize("place", ["course", "private", "open"])
def test_nothing_changes_outside_the_results_folder(mode, place):
    changed = {b: sorted(set(mode.before[f"{b}-{place}"].items()) ^ set(mode.after[f"{b}-{place}"].items()))
               for b in mode.batches}
    changed = {b: sorted({k for k, _ in c}) for b, c in changed.items() if c}
    assert not changed, changed


@slow
def test_the_grading_users_home_and_python_are_unchanged(mode):
    if mode.user:
        changed = sorted({k for k, _ in set(mode.before["home"].items()) ^ set(mode.after["home"].items())})
        assert not changed, changed
    planted = [str(d) for d, now in mode.site_after.items() if now and not mode.before["site"].get(d)]
    assert not planted, planted


@slow
def test_an_unrelated_process_of_the_grading_user_survives(mode):
    assert mode.victim_alive


@slow
def test_no_network_connection_leaves_the_sandbox(mode):
    assert mode.connection is None


@slow
@pytest.mark.parametrize("attack", [a for a in ATTACKS if ATTACKS[a].answered])
def test_a_cell_that_stops_its_child_costs_that_cell_alone(mode, attack):
    """A crash (or a cell the parent had to stop) zeroed the whole notebook once: every answer beside it,
    all right, keeps its points."""
    b = _not_refused(mode, ATTACKS[attack].batch)
    result = _result(b, attack)
    assert result is not None
    lost = {t["name"] for t in result["tests"] if t["score"] < t["max_score"]}
    assert lost == set(ATTACKS[attack].cells), (lost, result["output"][:500])


@slow
def test_hidden_values_reach_no_file_or_terminal(mode):
    """Sizes and data of a hidden configuration, glued to letters in an error raised on hidden runs only (an
    error text masked by whole numbers once let them through): none in any result, page, CSV, gradebook,
    nbgrader feedback or line printed. In the floor, the wiretap shows they were sent: the test is live."""
    found = sorted(where for where, text in mode.texts().items()
                   if not where.endswith(".wiretap.jsonl") and HIDDEN_VALUE.search(text))
    assert not found, found
    if mode.vehicle == "floor":
        for batch in [mode.batches["walls"], *([mode.nbgrader] if mode.nbgrader else [])]:
            assert batch.refused or HIDDEN_VALUE.search(batch.wiretap.read_text(encoding="utf-8")), batch.name


@slow
def test_student_html_is_inert_on_every_page(mode):
    """No XSS payload is live in anything the grader or nbgrader wrote: pages, feedback, the autograded
    notebook formgrader renders (a browser proves the same in test_xss.py, as root). Student HTML was once
    kept as it was in the autograded notebook and nbgrader's feedback: every payload here was live there."""
    live = {where: found for where, text in mode.texts().items()
            if where.endswith((".html", ".ipynb")) and (found := _live_html(text, mode.beacon))}
    assert not live, live
    if mode.nbgrader:  # the payloads reached the pages nbgrader renders (else the check above is vacuous)
        feedback = [t for w, t in mode.texts().items() if w.startswith("nbgrader feedback/hostile")]
        assert feedback and all(redteam.XSS_MARKER in t for t in feedback)


@slow
def test_a_copied_answer_cell_is_graded_like_a_slip(mode):
    """Three copies of one answer cell (right, wrong, right) score 0 there, with a line that says why, not a
    crash of the notebook nor the first or last copy's point; a deleted one scores 0 alone."""
    b = _not_refused(mode, "input")
    result = _result(b, "copied-cells")
    assert result is not None
    tests = {t["name"]: t for t in result["tests"]}
    assert tests[COPIED]["score"] == 0 and "answer cells have grade id" in tests[COPIED]["output"], tests[COPIED]
    assert tests[DELETED]["score"] == 0 and "no answer cell" in tests[DELETED]["output"], tests[DELETED]


@slow
def test_a_submission_named_like_a_class_file_takes_none_of_its_names(mode):
    """report.ipynb's page and the class's report.html once overwrote each other."""
    b = _not_refused(mode, "input")
    stem = output_stem(CLASHING_NAME)
    assert stem != CLASHING_NAME and f"{stem}.json" in b.files and f"{stem}.html" in b.files, b.files
    if (mode.name, mode.vehicle) in REPORT_MODES:
        report = (b.out / "report.html").read_text(encoding="utf-8")
        assert "zz-correct" in report and "blank" in report  # the class report, not one submission's page


@slow
def test_nested_prints_stall_nothing(mode):
    """29 cells of ~200 nested prints once cost the trusted process minutes: now they are read in linear
    time, or refused with one line once over the course's budget, and gain nothing (checked above)."""
    b = _not_refused(mode, "input")
    result = _result(b, "nested-prints")
    assert result is not None
    if result["output"].startswith("refused:"):
        assert "analysis_cpu_seconds" in result["output"] and "\n" not in result["output"], result["output"]


# ---------------------------------------------------------------------------------------------
# The nbgrader route: autograde and generate_feedback in the floor on NBGRADER_HOSTS


def _graded_by_nbgrader(mode: Mode) -> Batch:
    if mode.nbgrader is None:
        pytest.skip(f"nbgrader's route runs in the {NBGRADER_VEHICLE} vehicle on the hosts {NBGRADER_HOSTS}")
    return mode.nbgrader


@slow
def test_nbgrader_autograde_finishes_and_records_every_student(mode):
    b = _graded_by_nbgrader(mode)
    if mode.batches["walls"].refused:  # a host the fast route refused up front: autograde refuses too
        lines = b.command("autograde")["stderr"].decode(errors="replace")
        assert b.command("autograde")["exit"] != 0 and not b.results and WALLS_REFUSAL.search(lines), lines[-2000:]
        return
    for command in b.commands:
        assert command["exit"] == 0, (command["verb"], command["stderr"][-3000:])
        assert b"Traceback" not in command["stderr"], command["stderr"][-3000:]
    assert set(b.results) == set(b.submissions), b.results
    # Walls missing and allowed are said on this route as on the fast one (a red team found it quiet)
    weaker = [batch.command(verb)["stderr"].decode(errors="replace") for batch, verb in
              ((mode.batches["walls"], "grade"), (b, "autograde"))]
    fast, nbgrader = (re.search(r"sandbox: grading without [a-z, ]+", text) for text in weaker)
    assert (fast and fast.group()) == (nbgrader and nbgrader.group()), weaker[1][-2000:]
    assert (b.course / "feedback" / "hostile" / ASSIGNMENT / f"{NB}.html").is_file()


@slow
def test_nbgrader_gains_nothing_and_costs_a_stopped_cell_alone(mode):
    """Through autograde as through the fast route: the hostile student scores what the blank one does, the
    copied cell 0 (nbgrader once failed the whole notebook on it), a crash and a hang cost their cells alone."""
    b = _graded_by_nbgrader(mode)
    _not_refused(mode, "walls")
    scores = {student: r["score"] for student, r in b.results.items()}
    assert scores["zz-correct"] == COURSE.max_score, b.results["zz-correct"]
    assert scores["hostile"] <= scores["blank"] < COURSE.max_score, scores
    stopped = {c for a in STOPPED for c in ATTACKS[a].cells}
    assert scores["stopped"] == _without(stopped), b.results["stopped"]
    assert b.results["hostile"]["grades"][COPIED] == 0, b.results["hostile"]


@slow
def test_nbgrader_shows_no_proof_or_leak(mode):
    """What the hostile student's payloads achieved would be in their error, hence in the grade cells,
    the feedback page and the gradebook: none of it is there."""
    b = _graded_by_nbgrader(mode)
    found = {where: EVIDENCE.findall(text)[:3] for where, text in mode.texts().items()
             if (where.startswith("nbgrader ") or where == "gradebook.db" or b.name in where) and EVIDENCE.search(text)}
    assert not found, found


def _without(cells) -> float:
    """Full marks less the points of `cells`."""
    return COURSE.max_score - sum(COURSE.points[c] for c in cells)


class _LiveHtml(html.parser.HTMLParser):
    """Whatever in a page would run or fetch a payload by itself: an attribute holding the payload's script
    marker, an attribute a browser fetches from holding the beacon's address, or a script or style
    element holding either. Text shown escaped, and a link to the beacon a reader would have to follow
    (markdown makes one of any address), are inert and pass."""

    def __init__(self, marker: str, beacon: str):
        super().__init__(convert_charrefs=True)
        self.marker, self.beacon, self.found, self.inside = marker, beacon, [], []

    def handle_starttag(self, tag, attrs):
        if tag in ("script", "style"):
            self.inside.append(tag)
        for name, value in attrs:
            link = tag in ("a", "area") and name == "href" and value and value.startswith(("http:", "https:"))
            if value and (self.marker in value or self.beacon in value and not link):
                self.found.append(f"<{tag} {name}={value[:80]}>")

    def handle_endtag(self, tag):
        if self.inside and self.inside[-1] == tag:
            self.inside.pop()

    def handle_data(self, data):
        if self.inside and (self.marker in data or self.beacon in data):
            self.found.append(f"<{self.inside[-1]}> {data.strip()[:80]}")


def _live_html(text: str, beacon: str) -> list[str]:
    """Live payloads in a page, or in a notebook's markdown and raw cells and HTML outputs (what formgrader
    renders as HTML)."""
    if text.lstrip().startswith("{"):
        try:
            nb = json.loads(text)
        except ValueError:
            return []
        parts = []
        for cell in nb.get("cells", []):
            if cell.get("cell_type") in ("markdown", "raw"):
                parts.append("".join(cell.get("source", "")))
            for output in cell.get("outputs", []):
                parts += ["".join(v) if isinstance(v, list) else str(v) for k, v in output.get("data", {}).items()
                          if k in ("text/html", "text/markdown", "image/svg+xml")]
        text = "\n".join(parts)
    parser = _LiveHtml(redteam.XSS_MARKER, beacon)
    parser.feed(text)
    parser.close()
    return parser.found


# ---------------------------------------------------------------------------------------------
# The corpus itself, and the helper that refuses user namespaces


def test_every_attack_is_a_cell_python_can_run():
    values = {"port": "1", "marker": "1.5", "victim": "2.5", "course": "/srv/course"}
    assert {a.batch for a in ATTACKS.values()} == set(redteam.BATCHES)
    for attack in ATTACKS.values():
        assert attack.claim and attack.cells, attack.name
        for vehicle in redteam.VEHICLES:
            compile(attack.cell(vehicle, **values), attack.name, "exec")
            assert "$" not in attack.cell(vehicle, **values), attack.name


UNSHARE = ("import ctypes, os, sys\n"
           "libc = ctypes.CDLL(None, use_errno=True)\n"
           "print(libc.unshare(int(sys.argv[1])), ctypes.get_errno())\n")


def _unshare(flags: int, wrapper: list[str] = ()) -> tuple[int, int]:
    done = subprocess.run([*wrapper, sys.executable, "-c", UNSHARE, str(flags)], capture_output=True, text=True,
                          timeout=60, check=True)
    result, err = done.stdout.split()
    return int(result), int(err)


@pytest.mark.skipif(os.getuid() != 0, reason="unshare(CLONE_NEWUSER) without the wrapper needs root here")
def test_the_wrapper_refuses_a_user_namespace_with_eperm():
    assert _unshare(refuse.CLONE_NEWUSER) == (0, 0)  # without it, the same call succeeds
    wrapper = [sys.executable, *NOUSERNS, "--"]
    assert _unshare(refuse.CLONE_NEWUSER, wrapper) == (-1, 1)  # EPERM
    assert _unshare(0x40000000 | 0x00020000, wrapper) == (0, 0)  # other namespaces: allowed
    everything = [sys.executable, refuse.__file__, "--all-namespaces", "--"]
    assert _unshare(0x40000000, everything) == (-1, 1)


def test_under_the_wrapper_threads_and_processes_still_start():
    code = ("import threading, subprocess\n"
            "t = threading.Thread(target=print, args=('thread',)); t.start(); t.join()\n"
            "print(subprocess.run(['unshare', '--user', 'true']).returncode)\n")
    done = subprocess.run([sys.executable, *NOUSERNS, "--", sys.executable, "-c", code], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["thread", "1"], done.stdout
    assert "Operation not permitted" in done.stderr


def test_the_wrapper_with_no_command_says_so():
    done = subprocess.run([sys.executable, *NOUSERNS], capture_output=True, text=True, timeout=60)
    assert done.returncode != 0 and "no command" in done.stderr


def test_the_floor_helper_with_no_command_says_so():
    done = subprocess.run([sys.executable, str(NOSTATIC)], capture_output=True, text=True, timeout=60)
    assert done.returncode != 0 and "no command" in done.stderr
