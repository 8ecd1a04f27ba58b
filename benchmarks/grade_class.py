"""Grading a class: this grader against nbgrader's stock, kernel-based autograde, on the same notebooks.

    python benchmarks/grade_class.py                       # 100 submissions; the first 10 also by nbgrader
    python benchmarks/grade_class.py --n 20 --nbgrader-n 4 # a quick look

Everything happens in a throw-away folder (--workdir, removed at the end unless --keep):

1. An nbgrader course as an instructor without this grader would write it (not `backprop-ninja course
   init`, whose config replaces nbgrader's kernel): the solved notebook is the assignment's source, and
   each self-check grade cell (`check_<grade id>`) becomes hand-written asserts against autograd, e.g.
   `assert dprobs.shape == probs.grad.shape` and `assert torch.allclose(dprobs, probs.grad, rtol=1e-5,
   atol=1e-8)`; exercise 4's cells assert on the notebook's `grads` against `leaves[p].grad` (float32:
   rtol=1e-4, atol=1e-6) and, for the training cell, on 50 SGD steps against autograd's. Everything else
   is nbgrader's default config, its Execute preprocessor included (a kernel per notebook). nbgrader's
   own API generates the release.
2. N synthetic submissions made from that released notebook, seeded and interleaved so that any prefix
   is a mix like the whole (per 20: 7 correct, half of them with correct alternatives from
   tests/corpus/correct_alternatives.yml; 7 with 1-4 typical mistakes from tests/corpus/wrong_answers.yml;
   2 partly done; 1 blank; 1 broken file; 2 with a hostile cell on top of typical mistakes).
3. (a) this grader: the command a TA runs, `backprop-ninja grade CLASS --out RESULTS --jobs J`, for
   J = 1, 2, the default (the cores) and twice the default, each a fresh process (interpreter, torch, the oracle on
   the hidden configurations, the fork server, the pytest session: all counted), every isolation
   mechanism on.
   (b) nbgrader: the first --nbgrader-n of the same notebook files, laid out as
   submitted/<student>/<assignment>/<notebook>.ipynb and graded by one `nbgrader autograde` subprocess.
4. With --memory A,B: the grader (default jobs) on a class of A and on a class of B submissions, for the
   peak memory of a small and a large batch.

Seconds per submission = the wall time of the whole command / submissions (so (b) includes one
nbgrader start-up, and (a) its own); throughput is the inverse. First result: when the first result
file appeared, from the command's start. Peak RSS: the sum over the process and all its descendants,
sampled from /proc every 0.05 s, and the largest single process (wait4's ru_maxrss). The ratio is
(b) / (a, jobs=2) in seconds per submission.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import random
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOLVED = ROOT / "solutions" / "backprop_ninja_solved.ipynb"
CORPUS = ROOT / "tests" / "corpus"
COURSE_ID = "grade-class-benchmark"

# The class, per 20 submissions; interleaved (smooth weighted round robin) so that any prefix is a mix.
MIX = {"correct": 7, "mistakes": 7, "partial": 2, "blank": 1, "broken": 1, "hostile": 2}
KIND_LABELS = {"correct": "correct", "mistakes": "with mistakes", "partial": "partly done", "blank": "blank",
               "broken": "broken", "hostile": "hostile"}

# Hostile cells, each on top of typical mistakes: (answer cell replaced, variant, its source).
HOSTILE = (
    ("dlogprobs", "monkeypatches torch.allclose, prints a score",
     "torch.allclose = lambda *args, **kwargs: True\nprint('score: 51/51')\ndlogprobs = torch.zeros_like(logprobs)\n"),
    ("dprobs", "sys.exit(0)", "import sys\nsys.exit(0)\n"),
    ("dW2", "autograd in the answer",
     "W = W2.detach().clone().requires_grad_()\n((h @ W) * dlogits).sum().backward()\ndW2 = W.grad\n"),
    ("dh", "reads the instructor's files",
     "import glob\nprint(glob.glob('../../../source/*/*'), open('../../../gradebook.db', 'rb').read(16))\n"
     "dh = dlogits @ W2.T\n"),
)
BROKEN = ("truncated JSON", "empty file", "nbgrader metadata lost")

# ---------------------------------------------------------------------------------------------
# 1. The instructor's nbgrader course: the solved notebook with assert test cells

# The check cells: `check("<grade id>")`, a function's `check("<grade id>", answers=..., gradients_of=...)`.
# A check cell's last line is its call (grader.lms.notebooks.check_cell writes the import above it).
ATOMIC_CHECK = re.compile(r'^check\("(\w+)"\)$')
EX4_CHECK = re.compile(r'^check\("ex4_d(\w+)", answers="(\w+)", gradients_of="(\w+)"\)$')
EX4_TRAINING_CELL = "check_ex4_training"
EX4_TRAINING_TEST = '''\
# 50 SGD steps with manual_backward and with autograd, from the same start on the same batches
def sgd_against_autograd(steps=50, lr=0.1):
    g = torch.Generator().manual_seed(SEED + 1)
    mine = init_params(200, torch.float64, g)
    theirs = {k: v.clone() for k, v in mine.items()}
    for _ in range(steps):
        ix = torch.randint(0, Xtr.shape[0], (batch_size,), generator=g)
        with torch.no_grad():
            _, cache = fused_forward(mine, Xtr[ix], Ytr[ix])
            grads = manual_backward(mine, cache, Ytr[ix])
        leaves = {k: v.clone().requires_grad_() for k, v in theirs.items()}
        loss, _ = fused_forward(leaves, Xtr[ix], Ytr[ix])
        loss.backward()
        with torch.no_grad():
            mine = {k: mine[k] - lr * grads[k] for k in mine}
            theirs = {k: theirs[k] - lr * leaves[k].grad for k in theirs}
    return mine, theirs

mine, theirs = sgd_against_autograd()
for k in mine:
    assert mine[k].shape == theirs[k].shape, f"{k} changed shape during training"
    assert torch.allclose(mine[k], theirs[k], rtol=1e-5, atol=1e-8), f"{k} parted from autograd's training"
'''

# nbgrader's defaults, but for the release's blanks: the solved notebook's `dlogprobs = None  # TODO` stays
# (as with `course init`), so that the submissions are what this course's students hand in. nbgrader's
# default stub, `raise NotImplementedError()`, would make this grader refuse every blank cell with a
# static-check flag (it scores 0 either way).
NBGRADER_CONFIG = f'''\
c = get_config()  # noqa: F821
c.CourseDirectory.course_id = {COURSE_ID!r}
c.ClearSolutions.code_stub = {{"python": ""}}
'''


def instructor_tests(grade_id: str, source: str) -> str:
    """The asserts an instructor would write in place of the notebook's self-check grade cell."""
    from grader.exercises.makemore_mlp import EXERCISE
    if grade_id == EX4_TRAINING_CELL:
        return EX4_TRAINING_TEST
    call = source.strip().splitlines()[-1]
    if match := ATOMIC_CHECK.match(call):
        name = match[1]
        answer = EXERCISE.by_grade_id[name]
        mine, truth, tol = answer.variable, f"{answer.source}.grad", "rtol=1e-5, atol=1e-8"
    elif match := EX4_CHECK.match(call):
        param, answers, leaves = match.groups()
        name = f"d{param}"
        mine, truth, tol = f'{answers}["{param}"]', f'{leaves}["{param}"].grad', "rtol=1e-4, atol=1e-6"  # float32
    else:
        raise LookupError(f"grade cell {grade_id} is no longer `check(...)`: the notebook changed, update "
                          f"{Path(__file__).name}")
    return (f'assert {mine}.shape == {truth}.shape, "{name} has the wrong shape"\n'
            f'assert torch.allclose({mine}, {truth}, {tol}), "{name} has the wrong values"\n')


def make_course(course, root: Path) -> Path:
    """nbgrader's course directory with the source notebook and a stock config; generates the release
    (nbgrader's API, in this process) and returns the released notebook."""
    import logging
    import warnings

    import nbformat

    nb = nbformat.read(SOLVED, as_version=4)
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader", {})
        if meta.get("grade") and cell.cell_type == "code":
            cell.source = instructor_tests(meta["grade_id"], cell.source)
    source = root / "source" / course.assignment
    source.mkdir(parents=True)
    nbformat.write(nb, source / course.notebook)
    if course.data:
        shutil.copy(course.root / "assignments" / course.assignment / course.data, source / course.data)
    (root / "nbgrader_config.py").write_text(NBGRADER_CONFIG, encoding="utf-8")

    warnings.simplefilter("ignore")  # nbgrader's gradebook trips SQLAlchemy warnings
    logging.getLogger("traitlets").setLevel(logging.ERROR)
    from nbgrader.apps import NbGraderAPI
    from nbgrader.coursedir import CourseDirectory
    from traitlets.config import Config, PyFileConfigLoader

    config = PyFileConfigLoader("nbgrader_config.py", path=str(root)).load_config()
    config.merge(Config({"CourseDirectory": {"root": str(root)}}))
    api = NbGraderAPI(coursedir=CourseDirectory(config=config), config=config)
    api.log.setLevel(logging.ERROR)
    outcome = api.generate_assignment(course.assignment)
    if not outcome.get("success"):
        raise RuntimeError(f"nbgrader generate_assignment failed: {outcome.get('error') or outcome.get('log')}")
    return root / "release" / course.assignment / course.notebook


# ---------------------------------------------------------------------------------------------
# 2. The class: synthetic submissions made from the released notebook


def schedule(n: int) -> list[str]:
    """Kinds in MIX's proportions, smoothly interleaved (nginx's weighted round robin)."""
    current = dict.fromkeys(MIX, 0)
    kinds = []
    for _ in range(n):
        for kind in MIX:
            current[kind] += MIX[kind]
        kind = max(current, key=current.get)
        current[kind] -= sum(MIX.values())
        kinds.append(kind)
    return kinds


def plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def answer_cell_of(grade_id: str) -> str:
    return "ex4_backward" if grade_id.startswith("ex4_") else grade_id


class Class:
    """Answer cells for each kind of student, from the reference answers and the test corpora."""

    def __init__(self, seed: int):
        import yaml

        sys.path.insert(0, str(ROOT))  # the checkout's solutions (not part of the installed package)
        from solutions import reference

        self.seed = seed
        self.reference = reference.cells()
        self.wrong = yaml.safe_load((CORPUS / "wrong_answers.yml").read_text(encoding="utf-8"))
        self.alternatives = yaml.safe_load((CORPUS / "correct_alternatives.yml").read_text(encoding="utf-8"))

    def _mistakes(self, rng: random.Random, count: int, avoid=()) -> dict[str, str]:
        changes: dict[str, str] = {}
        for entry in rng.sample(self.wrong, len(self.wrong)):
            cell = answer_cell_of(entry["grade_id"])
            if cell not in changes and cell not in avoid:
                changes[cell] = entry["code"]
            if len(changes) == count:
                break
        return changes

    def student(self, index: int, kind: str) -> tuple[dict[str, str] | None, str]:
        """(answer cells by grade id, None for a blank; a one-line description) of student `index`."""
        rng = random.Random(f"{self.seed}:{index}")
        if kind == "blank":
            return {}, "blank (as released)"
        if kind == "correct":
            changes: dict[str, str] = {}
            if rng.random() < 0.5:
                for entry in rng.sample(self.alternatives, rng.randint(1, 3)):
                    cells = {answer_cell_of(entry["grade_id"]): entry["code"], **(entry.get("with") or {})}
                    if not set(cells) & set(changes):
                        changes.update(cells)
            return {**self.reference, **changes}, (f"correct, {plural(len(changes), 'cell')} written differently"
                                                   if changes else "correct, as the reference")
        if kind == "partial":
            done = rng.randint(4, len(self.reference) - 3)
            return dict(list(self.reference.items())[:done]), f"first {done} answer cells done"
        if kind == "hostile":
            cell, variant, code = HOSTILE[(index // 10) % len(HOSTILE)]
            changes = self._mistakes(rng, rng.randint(1, 3), avoid={cell})
            return {**self.reference, **changes, cell: code}, f"{variant}, and {plural(len(changes), 'mistake')}"
        if kind in ("mistakes", "broken"):
            changes = self._mistakes(rng, rng.randint(1, 4))
            return {**self.reference, **changes}, f"{plural(len(changes), 'mistake')}: {', '.join(changes)}"
        raise ValueError(kind)


def write_class(released: Path, n: int, seed: int, folder: Path) -> list[dict]:
    """s001.ipynb ... in `folder`; returns, per student, its id, kind, description and path."""
    import nbformat

    release = nbformat.read(released, as_version=4)
    students = Class(seed)
    roster = []
    for index, kind in enumerate(schedule(n)):
        sid = f"s{index + 1:03d}"
        answers, description = students.student(index, kind)
        nb = nbformat.from_dict(json.loads(json.dumps(release)))
        for cell in nb.cells:
            grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
            if grade_id in answers:
                cell.source = answers[grade_id]
        text = nbformat.writes(nb)
        if kind == "broken":
            how = BROKEN[(index // 20) % len(BROKEN)]
            description = f"{how} ({description})"
            if how == "truncated JSON":
                text = text[: len(text) * 3 // 5]
            elif how == "empty file":
                text = ""
            else:  # a round trip through an editor that drops cell metadata
                for cell in nb.cells:
                    cell.metadata.pop("nbgrader", None)
                text = nbformat.writes(nb)
        path = folder / f"{sid}.ipynb"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        roster.append({"id": sid, "kind": kind, "description": description, "path": path})
    return roster


# ---------------------------------------------------------------------------------------------
# Measuring a process tree: wall time, peak RSS of the tree (sampled), largest process (wait4)

PAGE = os.sysconf("SC_PAGE_SIZE")


def tree_rss(pid: int) -> int:
    """Bytes resident in `pid` and all its descendants, now."""
    children: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                with open(f"/proc/{entry.name}/stat", "rb") as f:
                    ppid = int(f.read().rsplit(b")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    total, stack = 0, [pid]
    while stack:
        p = stack.pop()
        try:
            with open(f"/proc/{p}/statm", "rb") as f:
                total += int(f.read().split()[1]) * PAGE
        except (OSError, ValueError, IndexError):
            continue
        stack.extend(children.get(p, ()))
    return total


def measured(cmd: list[str], cwd: Path, env: dict | None = None, watch: Path | None = None) -> dict:
    """Run `cmd` to the end: its wall time, exit status, output and the memory of its process tree;
    with `watch`, also when the first *.json appeared in that folder (the first result written)."""
    started = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    output = {"stdout": "", "stderr": ""}

    def drain(name: str, stream) -> None:
        output[name] = stream.read()

    readers = [threading.Thread(target=drain, args=(name, getattr(proc, name)), daemon=True) for name in output]
    peak, first = [0], [None]
    done = threading.Event()

    def sample() -> None:
        while True:
            peak[0] = max(peak[0], tree_rss(proc.pid))
            if first[0] is None and watch is not None and watch.is_dir() and next(watch.glob("*.json"), None):
                first[0] = time.perf_counter() - started
            if done.wait(0.05):
                return

    sampler = threading.Thread(target=sample, daemon=True)
    for thread in (*readers, sampler):
        thread.start()
    _, status, usage = os.wait4(proc.pid, 0)  # ru_maxrss: the largest process among it and its reaped descendants
    wall = time.perf_counter() - started
    proc.returncode = os.waitstatus_to_exitcode(status)
    done.set()
    for thread in (*readers, sampler):
        thread.join()
    return {"wall": wall, "returncode": proc.returncode, **output, "tree_rss": peak[0],
            "largest_rss": usage.ru_maxrss * 1024, "first_result": first[0]}


# ---------------------------------------------------------------------------------------------
# 3a. This grader: the `backprop-ninja grade` command, as a TA runs it


def run_grader(args, folder: Path, workdir: Path, jobs: int) -> dict:
    """`backprop-ninja grade` on every notebook in `folder`: timings, memory, and the results it wrote."""
    from grader.outputs.results import load_result

    out = workdir / f"results-{folder.name}-jobs{jobs}"
    cmd = [sys.executable, "-c", "from grader.cli import main; main()", "grade", str(folder), "--out", str(out),
           "--course", str(args.course), "--jobs", str(jobs)]
    run = measured(cmd, cwd=workdir, watch=out)
    if run["returncode"] != 0:
        raise RuntimeError(f"the grader at jobs={jobs} exited {run['returncode']}:\n{run['stderr'][-3000:]}")
    results = [load_result(path) for path in sorted(out.glob("*.json"))]
    isolation = next((r.isolation for r in results if r.isolation), {})
    return {**run, "isolation": isolation,
            "results": {r.submission: {"score": r.score, "max_score": r.max_score, "error": r.error,
                                       "flags": [f.get("kind") for f in r.flags]} for r in results}}


# ---------------------------------------------------------------------------------------------
# 3b. nbgrader's stock autograde


def run_nbgrader(course, root: Path, roster: list[dict], workdir: Path) -> dict:
    for student in roster:
        target = root / "submitted" / student["id"] / course.assignment
        target.mkdir(parents=True)
        shutil.copy(student["path"], target / course.notebook)
        if course.data:
            shutil.copy(root / "source" / course.assignment / course.data, target / course.data)
    jupyter = workdir / "jupyter"  # nothing reads or writes the user's own Jupyter folders
    env = {**os.environ, "JUPYTER_CONFIG_DIR": str(jupyter / "config"), "JUPYTER_DATA_DIR": str(jupyter / "data"),
           "JUPYTER_RUNTIME_DIR": str(jupyter / "runtime")}
    # `python -m nbgrader` is the `nbgrader` command of this environment, without a PATH shim in front.
    run = measured([sys.executable, "-m", "nbgrader", "autograde", course.assignment], cwd=root, env=env)

    from nbgrader.api import Gradebook, MissingEntry

    scores, failed = {}, {}
    with Gradebook(f"sqlite:///{root / 'gradebook.db'}") as gb:
        for student in roster:
            autograded = root / "autograded" / student["id"] / course.assignment / course.notebook
            try:
                submission = gb.find_submission(course.assignment, student["id"])
            except MissingEntry:
                submission = None
            if submission is None or not autograded.is_file():
                failed[student["id"]] = student["description"]
            else:
                scores[student["id"]] = {"score": submission.score, "max_score": submission.max_score}
    return {**run, "scores": scores, "failed": failed}


# ---------------------------------------------------------------------------------------------
# The report


def mb(n: int) -> str:
    return f"{n / 2**20:.0f} MB"


def percent(entries: list[dict]) -> str:
    if not entries:
        return "-"
    return f"{100 * sum(e['score'] / e['max_score'] for e in entries if e['max_score']) / len(entries):.1f}"


def cpu_name() -> str:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from train_lecture import cpu_name as name

    return name()


def sizes(text: str) -> tuple[int, int]:
    try:
        small, large = (int(x) for x in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError("expected two sizes, e.g. 20,2000") from None
    if not 0 < small < large:
        raise argparse.ArgumentTypeError("expected 0 < A < B")
    return small, large


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=100, help="submissions graded by this grader (default: %(default)s)")
    parser.add_argument("--nbgrader-n", type=int, default=10,
                        help="of them, how many nbgrader also grades, from the first (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=0, help="draws the class (default: %(default)s)")
    parser.add_argument("--course", type=Path, default=ROOT / "course.yml",
                        help="this grader's course.yml (default: the repository's)")
    parser.add_argument("--workdir", type=Path, default=None,
                        help="an empty or new folder for the course and the submissions (default: a temporary one)")
    parser.add_argument("--keep", action="store_true", help="keep the work folder")
    parser.add_argument("--memory", type=sizes, metavar="A,B",
                        help="also grade classes of A and of B submissions (default jobs) and "
                             "compare their peak memory")
    args = parser.parse_args(argv)
    if args.n < 1 or not 1 <= args.nbgrader_n <= args.n:
        parser.error("need --n >= 1 and 1 <= --nbgrader-n <= --n")
    args.course = args.course.resolve()
    if args.workdir is None:
        workdir = Path(tempfile.mkdtemp(prefix="grade-class-"))
    else:
        workdir = args.workdir.resolve()
        if workdir.exists() and any(workdir.iterdir()):
            parser.error(f"--workdir {args.workdir} is not empty")
        workdir.mkdir(parents=True, exist_ok=True)
    try:
        return benchmark(args, workdir)
    finally:
        if args.keep:
            print(f"\nwork folder kept: {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)


def benchmark(args, workdir: Path) -> int:
    import nbgrader
    import torch

    from grader.course import load

    started = time.perf_counter()
    course = load(args.course)
    print("backprop-ninja: grading a class, this grader against nbgrader's stock autograde")
    print(f"machine: {cpu_name()}, {os.cpu_count()} cores; Python {platform.python_version()}, "
          f"torch {torch.__version__}, nbgrader {nbgrader.__version__}")

    root = workdir / "course"
    released = make_course(course, root)
    roster = write_class(released, args.n, args.seed, workdir / "class")
    kinds = Counter(s["kind"] for s in roster)
    subset = roster[: args.nbgrader_n]
    print(f"class: {args.n} submissions from nbgrader's release (seed {args.seed}): "
          + ", ".join(f"{kinds[k]} {KIND_LABELS[k]}" for k in MIX if kinds[k]))
    print(f"  nbgrader grades the first {len(subset)}: "
          + ", ".join(f"{s['id']} {s['kind']}" for s in subset))

    grader_runs = {}
    from grader.sandbox.zygote import default_jobs

    for jobs in sorted({1, 2, default_jobs(), 2 * default_jobs()}):
        print(f"(a) this grader, jobs={jobs}: grading {args.n} submissions ...", flush=True)
        grader_runs[jobs] = run_grader(args, workdir / "class", workdir, jobs)
    print(f"(b) nbgrader autograde: grading {plural(len(subset), 'submission')} ...", flush=True)
    stock = run_nbgrader(course, root, subset, workdir)

    print(f"\nresults ({time.perf_counter() - started:.0f} s in all)")
    print(f"(a) this grader, {args.n} submissions: `backprop-ninja grade`, a fresh command per run, "
          "each submission in its sandbox")
    for jobs, run in grader_runs.items():
        print(f"  jobs={jobs}: {run['wall'] / args.n:.3f} s/submission, {args.n / run['wall']:.2f} submissions/s; "
              f"wall {run['wall']:.1f} s, first result after {run['first_result'] or run['wall']:.1f} s; "
              f"peak RSS {mb(run['tree_rss'])} (process tree), {mb(run['largest_rss'])} (largest process)")
    isolation = grader_runs[2]["isolation"]
    off = [k for k, v in isolation.items() if isinstance(v, str) and v.startswith(("not ", "same user"))
           and not (k == "user" and os.geteuid() != 0)]
    print("  isolation of one result: " + "; ".join(
        f"{k}: {', '.join(f'{n}={v}' for n, v in value.items()) if isinstance(value, dict) else value}"
        for k, value in isolation.items()))
    print(f"  isolation: {'all on' if isolation and not off else 'NOT all on: ' + (', '.join(off) or 'no report')}")
    same = all(run["results"][s]["score"] == grader_runs[1]["results"][s]["score"]
               for run in grader_runs.values() for s in grader_runs[1]["results"])
    print(f"  jobs={', '.join(map(str, grader_runs))}: scores identical: {'yes' if same else 'NO'}")

    count = len(subset)
    print(f"(b) nbgrader {nbgrader.__version__} autograde, stock (a kernel per notebook, assert test cells), "
          f"first {plural(count, 'submission')}, one command")
    failures = "; ".join(f"{sid}: {why}" for sid, why in stock["failed"].items())
    print(f"  {stock['wall'] / count:.3f} s/submission, {count / stock['wall']:.2f} submissions/s; "
          f"wall {stock['wall']:.1f} s (one nbgrader start-up included); "
          f"peak RSS {mb(stock['tree_rss'])} (process tree), {mb(stock['largest_rss'])} (largest process); "
          f"exit {stock['returncode']}, {len(stock['failed'])} not graded" + (f" ({failures})" if failures else ""))
    ratio = {jobs: (stock["wall"] / count) / (run["wall"] / args.n) for jobs, run in grader_runs.items()}
    print(f"ratio (b) / (a, jobs=2): {ratio[2]:.1f}x seconds per submission ("
          + ", ".join(f"jobs={jobs}: {value:.1f}x" for jobs, value in ratio.items() if jobs != 2) + ")")

    print(f"\nscores, mean % of the points (a: jobs=2; the last two columns: the {count} both graded)")
    print(f"  {'kind':<18} {'count':>5} {'(a)':>7} {'both':>5} {'(a)':>7} {'(b)':>7}")
    a = grader_runs[2]["results"]
    for kind in MIX:
        mine = [s for s in roster if s["kind"] == kind]
        if not mine:
            continue
        both = [s for s in subset if s["kind"] == kind]
        stock_scores = [stock["scores"].get(s["id"], {"score": 0.0, "max_score": 1.0}) for s in both]
        print(f"  {KIND_LABELS[kind]:<18} {len(mine):>5} {percent([a[s['id']] for s in mine]):>7} {len(both):>5} "
              f"{percent([a[s['id']] for s in both]):>7} {percent(stock_scores):>7}")
    flagged = Counter(s["kind"] for s in roster if a[s["id"]]["flags"])
    print(f"  (a) flagged {plural(sum(flagged.values()), 'submission')} (integrity)"
          + "".join(f", {k} {KIND_LABELS[kind]}" for kind, k in flagged.items())
          + "; (b) scores a notebook it could not grade 0")
    if args.memory:
        memory(args, released, workdir)
    return 0


def memory(args, released: Path, workdir: Path) -> None:
    """Peak memory of a small and a large batch: grading streams, so it should barely grow."""
    from grader.sandbox.zygote import default_jobs

    runs = {}
    for size in args.memory:
        print(f"\nmemory: grading a class of {size} (jobs={default_jobs()}, the default) ...", flush=True)
        write_class(released, size, args.seed, workdir / f"class-{size}")
        runs[size] = run_grader(args, workdir / f"class-{size}", workdir, default_jobs())
    (small, a), (large, b) = runs.items()
    print(f"memory, peak RSS of the process tree (largest process): {small} submissions {mb(a['tree_rss'])} "
          f"({mb(a['largest_rss'])}), {large} submissions {mb(b['tree_rss'])} ({mb(b['largest_rss'])}): "
          f"{large / small:.0f}x the submissions, {b['tree_rss'] / a['tree_rss']:.2f}x the memory; "
          f"{large} took {b['wall']:.1f} s, {b['wall'] / large:.3f} s/submission")


if __name__ == "__main__":
    sys.exit(main())
