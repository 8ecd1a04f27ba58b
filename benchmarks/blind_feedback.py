"""How often feedback names a mistake nobody listed, measured on answers written blind.

tests/corpus/blind/ holds wrong answers written by helpers who saw only the released notebooks, never
the grader, its search or its tests, frozen before the search was tuned: `tune.yml` / `heldout.yml` on the
lecture's and three variants' notebooks, `gallery-tune.yml` / `gallery-heldout.yml` on two gallery
exercises' (the attention head and the RNN, written after the first set was tuned on); the tune files to
tune on, the held-out ones never. Each entry is the answer cell and, in the writer's words, what is wrong
with it.

    python benchmarks/blind_feedback.py grade --set tests/corpus/blind/heldout.yml --out /tmp/blind
        makes each notebook's course (course init --variant, from this checkout), grades one batch per course
        (the solved notebook with that one cell replaced) and writes /tmp/blind/feedback.yml: per entry, the
        grade ids that lost points and their feedback.
    python benchmarks/blind_feedback.py grade --set tests/corpus/blind/issue35/networks-tune.yml \
            --networks tests/corpus/blind/issue35/networks --out /tmp/blind35
        the same for networks in no gallery: a notebook named after a file of --networks is that exercise's
        (tests/corpus/blind/issue35/: four networks written blind for issue 35, and the answer sets on them).
    python benchmarks/blind_feedback.py rates tests/corpus/blind/judged/heldout-after.yml
        prints named / generic / misleading, overall, for the lecture's notebook and for the parts the
        variants add, from a feedback file whose entries carry a `label`: whether the feedback names the
        writer's mistake (named), claims another one (misleading) or claims no cause (generic), as judged
        by a reader who saw the two texts and nothing of the grader (an answer that lost no point is
        `accepted`). tests/corpus/blind/judged/ holds the feedback of grader versions so judged.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import nbformat
import yaml

ROOT = Path(__file__).resolve().parents[1]
LECTURE = "tanh-batchnorm"
GALLERY = ROOT / "grader" / "exercises" / "gallery"  # a notebook named after a file here is that exercise's
CLI = [sys.executable, "-c", "from grader.cli import main; main()"]


def _entries(path: Path) -> list[dict]:
    entries = yaml.safe_load(path.read_text(encoding="utf-8"))
    return [{**e, "id": f"{path.stem}-{i:03d}"} for i, e in enumerate(entries)]


def _own_exercise(notebook: str, networks: Path | None) -> Path | None:
    """The exercise file a notebook is named after: in --networks first, then in the gallery."""
    for folder in (networks, GALLERY):
        if folder is not None and (folder / f"{notebook}.py").is_file():
            return folder / f"{notebook}.py"
    return None


def _variant_specific(notebook: str, grade_id: str, own: bool) -> bool:
    """A part the variant adds: a grade id the lecture lacks, or one whose backward goes through other steps."""
    from grader.exercise import load
    from grader.lms.course_init import steps_reached

    if own:
        return False  # an exercise of its own: no lecture to share parts with
    lecture, variant = load("makemore-mlp"), load(f"makemore-mlp/{notebook}")
    if grade_id not in lecture.by_grade_id or grade_id not in variant.by_grade_id:
        return notebook != LECTURE
    return steps_reached(variant, grade_id) != steps_reached(lecture, grade_id) \
        if variant.by_grade_id[grade_id].kind != "function" else notebook != LECTURE


def _cell_of(notebook: str, own: Path | None, grade_id: str) -> str:
    """The answer cell a grade id is written in: its own, or, for a function's gradient (exercise 4's ex4_dC),
    the function's cell, which the writer gives whole."""
    from grader.exercise import load

    exercise = load(f"{own}:EXERCISE" if own else f"makemore-mlp/{notebook}")
    answer = exercise.by_grade_id.get(grade_id)
    return answer.cell_id if answer is not None else grade_id


def grade(entries: list[dict], out: Path, networks: Path | None = None) -> list[dict]:
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for notebook in sorted({e["notebook"] for e in entries}):
        course = out / notebook
        own = _own_exercise(notebook, networks)
        if not (course / "course.yml").is_file():
            which = ["--exercise", str(own.resolve())] if own else ["--variant", notebook]
            subprocess.run([*CLI, "course", "init", str(course), *which], check=True, cwd=ROOT, capture_output=True)
        config = yaml.safe_load((course / "course.yml").read_text())
        solved = nbformat.read(course / "source" / config["assignment"] / config["notebook"], as_version=4)
        subs = out / f"{notebook}-submissions"
        subs.mkdir(exist_ok=True)
        mine = [e for e in entries if e["notebook"] == notebook]
        for entry in mine:
            nb = nbformat.from_dict(json.loads(json.dumps(solved)))
            cell_id = _cell_of(notebook, own, entry["grade_id"])
            cells = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == cell_id]
            if len(cells) != 1:
                raise SystemExit(f"{entry['id']}: no answer cell {entry['grade_id']} in {notebook}")
            cells[0].source = entry["code"]
            nbformat.write(nb, subs / f"{entry['id']}.ipynb")
        results = out / f"{notebook}-results"
        # `grade` exits non-zero when a result carries a flag (a grader error among them), results written: each
        # entry's own result says what happened to it, and one course's never stops the others'.
        subprocess.run([*CLI, "grade", str(subs), "--out", str(results), "--course", str(course / "course.yml")],
                       check=False, cwd=course, capture_output=True)
        for entry in mine:
            path = results / f"{entry['id']}.json"
            if not path.is_file():
                raise SystemExit(f"{entry['id']}: grading {notebook} wrote no result")
            result = json.loads(path.read_text())
            lost = [t for t in result["tests"] if t["score"] < t["max_score"]]
            rows.append({"id": entry["id"], "notebook": notebook, "grade_id": entry["grade_id"],
                         "variant_specific": _variant_specific(notebook, entry["grade_id"], own is not None),
                         "own_exercise": own is not None,
                         "mistake": entry["mistake"], "lost": [t["name"] for t in lost],
                         "flags": [f["kind"] for f in result.get("flags", [])],
                         "feedback": "\n".join(t["output"] for t in lost)})
    return rows


def _own(row: dict) -> bool:
    """An exercise of its own (a gallery or --networks file); files judged before the field existed name
    only the gallery's."""
    return row.get("own_exercise", (GALLERY / f"{row['notebook']}.py").is_file())


def rates(rows: list[dict]) -> None:
    groups = {"all": rows, "lecture (tanh-batchnorm)": [r for r in rows if r["notebook"] == LECTURE],
              "variants, parts they add": [r for r in rows if r["variant_specific"]],
              "variants, parts shared with the lecture": [r for r in rows
                                                          if r["notebook"] != LECTURE and not r["variant_specific"]
                                                          and not _own(r)],
              "exercises of their own": [r for r in rows if _own(r)],
              **{f"  {notebook}": [r for r in rows if r["notebook"] == notebook]
                 for notebook in sorted({r["notebook"] for r in rows if _own(r)})}}
    for name, group in groups.items():
        if not group:
            continue
        counts = Counter(r["label"] for r in group)
        total = len(group) or 1
        print(f"{name:<42} n={len(group):>3}  " + "  ".join(
            f"{k} {100 * counts[k] / total:5.1f}%" for k in ("named", "generic", "misleading", "accepted")))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    g = sub.add_parser("grade")
    g.add_argument("--set", type=Path, required=True)
    g.add_argument("--out", type=Path, required=True)
    g.add_argument("--networks", type=Path, help="a folder of exercise files, each a notebook named after it")
    r = sub.add_parser("rates")
    r.add_argument("judged", type=Path)
    args = parser.parse_args()
    if args.command == "grade":
        if args.networks is not None and not args.networks.is_dir():
            raise SystemExit(f"--networks {args.networks}: no such folder")
        rows = grade(_entries(args.set), args.out, args.networks)
        (args.out / "feedback.yml").write_text(yaml.safe_dump(rows, sort_keys=False, width=120), encoding="utf-8")
        print(f"{len(rows)} entries graded: {args.out / 'feedback.yml'}")
    else:
        rates(yaml.safe_load(args.judged.read_text(encoding="utf-8")))


if __name__ == "__main__":
    main()
