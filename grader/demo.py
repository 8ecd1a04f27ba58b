"""`backprop-ninja demo`: the bundled course, end to end, in under a minute.

It executes the solved notebook so its self-checks are seen matching autograd, then grades a small
simulated class (a correct student, typical mistakes, the lecture's own shape slip, a blank stub and a
hostile notebook) and prints the class table and where the feedback files are.
"""
from __future__ import annotations

import shutil
import time
from pathlib import Path

SOLVED = Path("solutions") / "backprop_ninja_solved.ipynb"

# Each simulated student: answer cells replaced in the solved notebook, by grade id.
CLASS = {
    "ada": {},
    "ben": {
        "dcounts": "dcounts = counts_sum_inv * dprobs\n",
        "dbndiff2": "dbndiff2 = (1.0 / n) * torch.ones_like(bndiff2) * dbnvar\n",
        "dC": "dC = torch.zeros_like(C)\ndC[Xb] += demb\n",
        "ex2_dlogits": "dlogits = F.softmax(logits, 1)\ndlogits[range(n), Yb] -= 1\n",
    },
    "cy": {
        "dbnmeani": "dbnmeani = (-dbndiff).sum(0)\n",
        "db1": "db1 = torch.zeros_like(b1)\n",
        "dlogprobs": "dlogprobs = torch.zeros(32, 27, dtype=logprobs.dtype)\ndlogprobs[range(32), Yb] = -1.0 / 32\n",
        "dhpreact": "dhpreact = (1.0 - hpreact**2) * dh\n",
    },
    "eve": {
        "dlogprobs": "import torch\ntorch.allclose = lambda *a, **k: True\nprint('score: 100/100')\n"
                     "dlogprobs = torch.zeros_like(logprobs)\n",
        "dprobs": "import sys\nsys.exit(0)\n",
    },
}


def _simulate(root: Path, course, out: Path) -> Path:
    import nbformat

    solved = nbformat.read(root / SOLVED, as_version=4)
    stub = root / "assignments" / course.assignment / course.notebook
    submissions = out / "submissions"
    shutil.rmtree(submissions, ignore_errors=True)
    for student, changes in CLASS.items():
        notebook = nbformat.from_dict(solved)
        for cell in notebook.cells:
            grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
            if grade_id in changes:
                cell.source = changes[grade_id]
        target = submissions / student / course.notebook
        target.parent.mkdir(parents=True)
        nbformat.write(notebook, target)
    (submissions / "dee").mkdir()
    shutil.copy(stub, submissions / "dee" / course.notebook)
    return submissions


def _self_checks(root: Path, echo) -> int:
    """Execute the solved notebook; return how many self-check lines did not report a match."""
    import nbformat
    from nbclient import NotebookClient

    notebook = nbformat.read(root / SOLVED, as_version=4)
    # The kernel's own log (e.g. its warning about local TCP) is not the demo's business.
    NotebookClient(notebook, timeout=600, kernel_name="python3", extra_arguments=["--IPKernelApp.log_level=ERROR"],
                   resources={"metadata": {"path": str((root / SOLVED).parent)}}).execute()
    lines = [line for cell in notebook.cells if cell.cell_type == "code" for output in cell.get("outputs", [])
             if output.get("name") == "stdout" for line in output["text"].splitlines() if "|" in line]
    matches = [line for line in lines if "approximate: True" in line]
    for line in matches[:3]:
        echo("  " + line)
    echo(f"  ... {len(matches)} of {len(lines)} self-checks match autograd")
    return len(lines) - len(matches)


def run(course, out: Path, echo) -> int:
    from grader.grade import grade
    from grader.results import table

    root = course.root
    out = Path(out).resolve()
    started = time.monotonic()
    echo(f"1. Executing the solved notebook {SOLVED} with its self-checks")
    mismatches = _self_checks(root, echo)
    echo(f"\n2. Simulating a class of {len(CLASS) + 1} students in {out / 'submissions'}")
    submissions = _simulate(root, course, out)
    echo("\n3. Grading them with the hidden suite (each submission in its own sandboxed process)\n")
    results = [result for _, result in grade([submissions], course, out / "results", jobs=2)]
    echo(table(results))
    echo(f"\nFeedback: {out / 'results'}/<student>/{Path(course.notebook).stem}.json (one per student), "
         f"class grades: {out / 'results' / 'grades.csv'}")
    echo(f"Done in {time.monotonic() - started:.0f} s.")
    return 1 if mismatches else 0
