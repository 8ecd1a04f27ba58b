"""A student's environment for a graded course (course.yml `solutions: off`): backprop-ninja-student,
built from this checkout's student/ and installed alone into a fresh virtual environment, runs the
released notebook's self-checks, and nothing in that environment holds a reference answer, the solved
notebook, the hidden suite or a command that prints one.

The environment takes torch, numpy and matplotlib from this Python's site-packages through a path file
(not --system-site-packages, which would also bring in an editable install of the full package).
"""
from __future__ import annotations

import dataclasses
import json
import re
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import nbformat
import pytest
import yaml
from test_nbgrader import DISTINCTIVE, KNOWN_MISTAKES, SOLUTION_LINES

from grader import __version__
from grader import course as course_config
from grader.course import material
from grader.exercise import DEFAULT
from grader.lms import slip_prints
from grader.lms.course_init import INSTALL_CELL
from grader.sandbox import static_check
from helpers.paths import COURSE, ROOT, STUB

pytestmark = pytest.mark.slow

# The hidden suite's named mistakes, as its feedback says them.
HIDDEN_FEEDBACK = sorted({m["feedback"] for mistakes in KNOWN_MISTAKES.values() for m in mistakes})
# A slip of the rule table: the self-check names it from the fingerprints beside the notebook, in the
# grader's words, though the student package has no rule table.
WRONG = {"dlogprobs": "dlogprobs = torch.zeros_like(logprobs)\ndlogprobs[range(n), Yb] = -1.0 / n\n",
         "dprobs": "dprobs = dlogprobs / logprobs\n"}
SLIP = "your dprobs divides by logprobs, the output, where the derivative of log divides by its input probs"


@pytest.fixture(scope="module")
def student_env(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("student")
    src = tmp / "src"
    shutil.copytree(ROOT / "student", src / "student", ignore=shutil.ignore_patterns("build", "*.egg-info"))
    shutil.copytree(ROOT / "grader", src / "grader", ignore=shutil.ignore_patterns("__pycache__", "course_data"))
    shutil.copytree(ROOT / material.ASSIGNMENT, src / material.ASSIGNMENT)
    subprocess.run([sys.executable, "-m", "pip", "wheel", str(src / "student"), "--no-deps", "--no-build-isolation",
                    "--no-index", "-q", "-w", str(tmp / "dist")], check=True, capture_output=True, timeout=600)
    (wheel,) = (tmp / "dist").glob("backprop_ninja_student-*.whl")
    venv = fresh_venv(tmp / "venv")
    subprocess.run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "--no-deps",
                    "--no-index", "-q", str(wheel)], check=True, capture_output=True, timeout=600)
    return venv, wheel


def fresh_venv(venv: Path) -> Path:
    """A virtual environment with neither package, which finds pip, torch, numpy and matplotlib in this
    Python's site-packages through a path file."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=600)
    purelib = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    site = Path(subprocess.run([venv / "bin" / "python", "-c", purelib], capture_output=True, text=True,
                               check=True).stdout.strip())
    base = sysconfig.get_paths(vars={"base": sys.base_prefix, "platbase": sys.base_prefix})["purelib"]
    (site / "dependencies.pth").write_text(base + "\n")
    return venv


def run(venv: Path, code: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([venv / "bin" / "python", "-c", code], cwd=cwd, capture_output=True, text=True,
                          timeout=600, env={"PATH": "/usr/bin:/bin", "MPLBACKEND": "Agg", "HOME": str(cwd)})


def test_the_released_notebook_runs_its_self_checks_with_the_student_package(student_env, tmp_path):
    venv, _ = student_env
    shutil.copytree(ROOT / material.ASSIGNMENT, tmp_path / "work")
    nb = nbformat.read(STUB, as_version=4)
    cells = []
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
        source = WRONG.get(grade_id, cell.source)
        cells.append("\n".join(line for line in source.splitlines() if not line.startswith("%")))
        if grade_id == "check_dprobs":
            break
    script = tmp_path / "cells.json"
    script.write_text(json.dumps(cells), encoding="utf-8")
    slip_prints.write(tmp_path / "work", DEFAULT, DEFAULT)  # as course init writes it beside the notebook
    # Each cell run in turn and kept in `In`, as IPython keeps the notebook's history.
    done = run(venv, f"import json\nns = {{'In': ['']}}\nfor cell in json.load(open({str(script)!r})):\n"
                     "    ns['In'].append(cell)\n    exec(cell, ns)\n", tmp_path / "work")
    assert done.returncode == 0, done.stderr
    assert "32033 words" in done.stdout, done.stdout  # the lecture's names.txt, beside the notebook
    assert "dlogprobs      | exact: True" in done.stdout, done.stdout
    dprobs = next(line for line in done.stdout.splitlines() if line.startswith("dprobs "))
    assert "WRONG" in dprobs and SLIP in dprobs, dprobs
    assert "backprop-ninja solution" not in done.stdout, "no pointer to a command that is not installed"
    assert "pip" not in done.stderr, "the install cell installs nothing where the package is present"


def test_the_first_cell_installs_the_student_package_in_a_graded_course():
    from grader.lms.course_init import _source_notebook

    nb = _source_notebook(ROOT / material.SOLVED, dataclasses.replace(COURSE, solutions="off"))
    (install,) = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == INSTALL_CELL]
    assert f"'backprop-ninja-student=={__version__}'" in install.source and "'backprop-ninja=" not in install.source
    gated = _source_notebook(ROOT / material.SOLVED, COURSE)
    assert f"'backprop-ninja=={__version__}'" in next(c.source for c in gated.cells
                                                      if c.metadata.get("nbgrader", {}).get("grade_id") == INSTALL_CELL)


@pytest.mark.parametrize("torch_missing", [True, False])
def test_the_install_cell_never_fetches_a_cuda_build_of_torch(monkeypatch, torch_missing):
    """Where torch is missing (a bare image), the package's own requirement would make pip fetch PyPI's torch, a
    CUDA build of several GB: the cell installs the CPU build from PyTorch's index first, so that the package's
    requirement is already met. Where torch is there (Colab's CUDA build), it is left alone."""
    import importlib.util
    import subprocess as real

    ran = []
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: object() if name == "torch" and not torch_missing
                        else None)
    monkeypatch.setattr(real, "run", lambda args, check=False: ran.append(args[5:]) or real.CompletedProcess(args, 0))
    exec(material.install_cell("off", "/srv/wheels"), {})  # noqa: S102 - the cell as the notebook runs it
    package = f"backprop-ninja-student=={__version__}"
    wanted = [[material.TORCH, "--index-url", "https://download.pytorch.org/whl/cpu"]] if torch_missing else []
    own = ["--no-deps", "--no-index", "--find-links", "/srv/wheels", package]  # the course's own wheel, alone
    assert ran == [*wanted, own, [package, "matplotlib"]]


def test_the_readmes_hub_recipe_gives_each_image_what_the_hub_starts_and_the_cpu_torch():
    """Each image of the README's hub recipe is what JupyterHub starts a user's server from: without the
    jupyterhub package there is no jupyterhub-singleuser to start. Each installs torch from the CPU index
    before the package that requires it, and the package from the wheels alone, never from an index (where
    neither name is this project's), before its requirements."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    recipe = text[text.index("## The hub image recipe"):text.index("## A course on a shared server")]
    images = re.findall(r"```bash\n(.*?)```", recipe, re.S)
    assert len(images) == 2, recipe
    for lines in images:
        installs = [line for line in lines.splitlines() if " install " in line]
        torch, package = [line for line in installs if "torch numpy" in line], [line for line in installs
                                                                                 if "backprop-ninja" in line]
        assert len(torch) == 1 and len(package) == 2 and lines.index(torch[0]) < lines.index(package[0]), lines
        assert "--index-url https://download.pytorch.org/whl/cpu" in torch[0]
        assert "--no-index --no-deps --find-links wheels/" in package[0] and "--find-links" not in package[1]
        assert "jupyterhub" in package[1].split()


def test_the_students_image_leaves_formgrader_off(tmp_path):
    """The students' image of the README's hub recipe: nbgrader, installed there for the Assignments tab, turns
    on its formgrader for everyone; the recipe's own lines turn it off, run here in an environment where
    nbgrader's configuration is its own, as pip leaves it."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    recipe = text[text.index("## The hub image recipe"):text.index("## A course on a shared server")]
    students = re.findall(r"```bash\n(.*?)```", recipe, re.S)[0]
    venv = fresh_venv(tmp_path / "image")
    shipped = Path(sys.base_prefix) / "etc" / "jupyter" / "jupyter_server_config.d" / "nbgrader.json"
    (venv / "etc" / "jupyter" / "jupyter_server_config.d").mkdir(parents=True)
    shutil.copy(shipped, venv / "etc" / "jupyter" / "jupyter_server_config.d" / "nbgrader.json")
    for script, module in (("jupyter-server", "jupyter_server.serverapp"), ("jupyter-labextension",
                                                                            "jupyterlab.labextensions")):
        (venv / "bin" / script).write_text(f"#!{venv / 'bin' / 'python'}\nimport sys\nfrom {module} import main\n"
                                           "sys.exit(main())\n")  # as pip installs them in the image
        (venv / "bin" / script).chmod(0o755)
    env = {"PATH": f"{venv / 'bin'}:/usr/bin:/bin", "HOME": str(tmp_path), "JUPYTER_CONFIG_DIR": str(tmp_path / "cfg")}

    def jupyter(*args: str) -> str:
        done = subprocess.run([venv / "bin" / "python", "-m", "jupyter", *args], capture_output=True, text=True,
                              env=env, timeout=300)
        assert done.returncode == 0, (args, done.stderr)
        return done.stdout + done.stderr

    assert json.loads(shipped.read_text())["ServerApp"]["jpserver_extensions"][
        "nbgrader.server_extensions.formgrader"] is True
    lines = [line.split()[1:] for line in students.replace("/opt/students/bin/", "").splitlines()
             if line.strip().startswith("jupyter ")]
    assert len(lines) == 3, students
    for line in lines:
        jupyter(*line)
    listed = jupyter("server", "extension", "list")
    assert re.search(r"nbgrader\.server_extensions\.formgrader \S*disabled", listed), listed
    assert re.search(r"nbgrader\.server_extensions\.assignment_list \S*enabled", listed), listed
    lab = json.loads((venv / "etc" / "jupyter" / "labconfig" / "page_config.json").read_text())
    assert lab["disabledExtensions"] == {"@jupyter/nbgrader:formgrader": True,
                                         "@jupyter/nbgrader:create-assignment": True}
    # and locked, so that a student cannot enable them again in their own settings (the fifth TA trial)
    assert lab["lockedExtensions"] == {"@jupyter/nbgrader:formgrader": True,
                                       "@jupyter/nbgrader:create-assignment": True}, lab


def test_the_install_cell_installs_the_pinned_student_package_and_nothing_heavy(student_env, tmp_path):
    """A fresh environment without `grader` (a hub image or Colab), the package index standing in as a folder
    holding the student wheel: the released notebook's first cell installs that very version, and the wheel
    asks for nothing beyond torch and numpy (matplotlib only where the notebook finds it missing)."""
    _, wheel = student_env
    requires = [line for line in zipfile.ZipFile(wheel).read(
        next(n for n in zipfile.ZipFile(wheel).namelist() if n.endswith("METADATA"))).decode().splitlines()
        if line.startswith("Requires-Dist:")]
    assert sorted(re.match(r"Requires-Dist: ([\w-]+)", r)[1] for r in requires) == ["numpy", "torch"], requires
    assert wheel.stat().st_size < 400_000
    venv = fresh_venv(tmp_path / "fresh")
    nb = nbformat.read(STUB, as_version=4)
    (install,) = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == INSTALL_CELL]
    source = material.install_cell("off", str(wheel.parent))
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "PIP_NO_INDEX": "1", "PIP_CONFIG_FILE": "/dev/null"}
    done = subprocess.run([venv / "bin" / "python", "-c", source], cwd=tmp_path, capture_output=True, text=True,
                          timeout=600, env=env)
    assert done.returncode == 0, done.stderr
    version = run(venv, "from importlib.metadata import version; print(version('backprop-ninja-student'))", tmp_path)
    assert version.stdout.strip() == __version__, version.stderr
    assert "pip" in install.source and f"=={__version__}" in install.source
    # A notebook of another grader's version, where that version cannot be installed: the cell stops with
    # the command that can install it, instead of leaving the installed self-check to give another
    # grader's verdicts. Nothing says where the course's wheels are: the command says what to fill in.
    other = source.replace(f"=={__version__}'", "==0.0.1'").replace(f", '{__version__}'", ", '0.0.1'")
    assert other.count("0.0.1") == 2
    assert _last_line(venv, other, tmp_path, env) == (
        "could not install backprop-ninja-student==0.0.1, which comes only from the course's wheels or a clone of "
        "backprop-ninja (one of that name on a package index is not this course's): run  pip install --no-index "
        f"--no-deps --find-links {wheel.parent} backprop-ninja-student==0.0.1 && pip install "
        "backprop-ninja-student==0.0.1  in a terminal, then restart the kernel (Kernel > Restart)")
    # In a clone of backprop-ninja (a self-learner's), it names the clone's own student package.
    clone = tmp_path / "clone"
    (clone / "grader" / "course").mkdir(parents=True)
    (clone / "grader" / "course" / "material.py").touch()
    (clone / "assignments").mkdir()
    mine = material.install_cell("off").replace(f"=={__version__}'", "==0.0.1'").replace(f", '{__version__}'",
                                                                                          ", '0.0.1'")
    assert _last_line(venv, mine, clone / "assignments", env) == (
        "could not install backprop-ninja-student==0.0.1, which comes only from the course's wheels or a clone of "
        f"backprop-ninja (one of that name on a package index is not this course's): run  pip install {clone}/student"
        "  in a terminal, then restart the kernel (Kernel > Restart)")


def _last_line(venv: Path, source: str, cwd: Path, env: dict) -> str:
    done = subprocess.run([venv / "bin" / "python", "-c", source], cwd=cwd, capture_output=True, text=True,
                          timeout=600, env=env)
    assert done.returncode == 1, (done.stdout, done.stderr)
    return done.stderr.strip().splitlines()[-1]


def test_the_install_cell_takes_the_course_wheels_and_names_them_when_they_fail(student_env, tmp_path):
    """course.yml's `wheels` (here a folder, as on a shared server) is where pip finds the package when no
    index has it; where that folder lacks it, the command to run names it."""
    _, wheel = student_env
    venv = fresh_venv(tmp_path / "fresh")
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "PIP_NO_INDEX": "1", "PIP_CONFIG_FILE": "/dev/null"}
    course = course_config.parse({**yaml.safe_load((ROOT / "course.yml").read_text()), "solutions": "off",
                                  "wheels": str(wheel.parent)}, ROOT / "course.yml")
    done = subprocess.run([venv / "bin" / "python", "-c", material.install_cell(course.solutions, course.wheels)],
                          cwd=tmp_path, capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 0, done.stderr
    version = run(venv, "from importlib.metadata import version; print(version('backprop-ninja-student'))", tmp_path)
    assert version.stdout.strip() == __version__, version.stderr
    empty = tmp_path / "no wheels"
    empty.mkdir()
    source = material.install_cell("off", str(empty))
    package = f"backprop-ninja-student=={__version__}"
    assert _last_line(fresh_venv(tmp_path / "fresh2"), source, tmp_path, env) == (
        f"could not install {package}, which comes only from the course's wheels or a clone of backprop-ninja (one "
        f"of that name on a package index is not this course's): run  pip install --no-index --no-deps --find-links "
        f"'{empty}' {package} && pip install {package}  in a terminal, then restart the kernel (Kernel > Restart)")


def test_the_install_cell_never_takes_the_package_from_an_index(student_env, tmp_path):
    """A red team's finding: neither package name is this project's on PyPI, and the cell searched the index
    beside the course's wheels, so whoever uploaded the name ran code in every student's kernel (pip took a
    platform-tagged upload of the same version over the course's wheel). Here a local index holds such an
    upload: the cell installs the course's wheel where course.yml names them, and nothing from the index where
    it names none or they lack the package; the index still serves what the package requires."""
    _, wheel = student_env
    squat = tmp_path / "squat"
    (squat / "grader").mkdir(parents=True)
    (squat / "grader" / "__init__.py").write_text("import pathlib; pathlib.Path('SQUATTED').touch()\n")
    (squat / "pyproject.toml").write_text(f'[project]\nname = "backprop-ninja-student"\nversion = "{__version__}"\n'
                                          '[tool.setuptools]\npackages = ["grader"]\n')
    index = tmp_path / "index" / "backprop-ninja-student"
    subprocess.run([sys.executable, "-m", "pip", "wheel", str(squat), "--no-deps", "--no-build-isolation", "--no-index",
                    "-q", "-w", str(index)], check=True, capture_output=True, timeout=600)
    (squatted,) = index.glob("*.whl")
    (index / "index.html").write_text(f'<a href="{squatted.name}">{squatted.name}</a>\n')
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "PIP_CONFIG_FILE": "/dev/null",
           "PIP_INDEX_URL": (tmp_path / "index").as_uri()}
    package = f"backprop-ninja-student=={__version__}"
    venv = fresh_venv(tmp_path / "with-wheels")
    done = subprocess.run([venv / "bin" / "python", "-c", material.install_cell("off", str(wheel.parent))],
                          cwd=tmp_path, capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 0, done.stderr
    files = run(venv, "import importlib.metadata as m; print(m.distribution('backprop-ninja-student').files)",
                tmp_path)
    assert "selfcheck" in files.stdout and not (tmp_path / "SQUATTED").exists(), files.stdout
    for wheels in (None, str(tmp_path / "index")):  # no wheels named, or a folder without the package
        venv = fresh_venv(tmp_path / f"without-{bool(wheels)}")
        line = _last_line(venv, material.install_cell("off", wheels), tmp_path, env)
        assert line.startswith(f"could not install {package}, which comes only from the course's wheels"), line
        found = run(venv, "import importlib.util; print(importlib.util.find_spec('grader'))", tmp_path)
        assert found.stdout.strip() == "None" and not (tmp_path / "SQUATTED").exists(), found.stdout


@pytest.mark.parametrize("wheels", ["", "a\nb", " /srv/wheels", 3])
def test_a_bad_wheels_setting_is_a_one_line_error(wheels):
    with pytest.raises(course_config.CourseError, match=r"course.yml: wheels: expected"):
        course_config.parse({**yaml.safe_load((ROOT / "course.yml").read_text()), "wheels": wheels},
                            ROOT / "course.yml")


def test_a_check_cell_without_the_package_says_so_in_one_line(tmp_path):
    """A kernel with no self-check (the first cell not run, or its install failed): each check cell of the
    released notebook prints one line saying what to run, and raises nothing, so Run All goes on."""
    venv = fresh_venv(tmp_path / "fresh")
    nb = nbformat.read(STUB, as_version=4)
    checks = {c.source for c in nb.cells if c.cell_type == "code" and "grader.student.check import check" in c.source
              and c.id != "setup_imports"}
    assert len(checks) > 20
    for source in sorted(checks):
        done = run(venv, source, tmp_path)
        assert done.returncode == 0 and done.stderr == "", (source, done.stderr)
        assert done.stdout == ("not checked: No module named 'grader'. The notebook's first code cell installs "
                               "the self-check: run it (where it stopped, the command it printed), then this "
                               "cell\n"), source


def test_no_command_prints_a_reference_answer(student_env, tmp_path):
    venv, _ = student_env
    assert not (venv / "bin" / "backprop-ninja").exists()
    done = run(venv, "import grader.student.solution", tmp_path)
    assert done.returncode != 0 and "No module named 'grader.student.solution'" in done.stderr
    done = run(venv, "import grader.student.check, grader.exercises.makemore_mlp.data, grader; print(grader.__file__)",
               tmp_path)
    assert done.returncode == 0 and str(venv) in done.stdout, done.stderr


def test_the_student_package_ships_no_sandbox(student_env):
    """The self-check reads course.yml, whose limits and walls are plain values (grader.limits):
    none of the code that runs or walls in student code comes with them."""
    _, wheel = student_env
    shipped = set(zipfile.ZipFile(wheel).namelist())
    assert "grader/limits.py" in shipped and "grader/sandbox/static_check.py" in shipped
    sandbox = {f"grader/sandbox/{name}.py" for name in ("jail", "landlock", "seccomp", "parent", "child", "zygote")}
    assert shipped & sandbox == set()


def test_the_student_package_ships_the_gallery_but_not_the_answer_generator(student_env):
    """The self-check loads a gallery exercise by name, so its short form comes along; grader.derive writes
    reference answers from forward lines, so no exercise module may import it (the wheel would carry it)."""
    _, wheel = student_env
    shipped = set(zipfile.ZipFile(wheel).namelist())
    gallery = {f"grader/exercises/gallery/{n}.py" for n in ("wavenet", "attention", "rnn")}
    assert gallery | {"grader/authoring/define.py"} <= shipped
    assert not [n for n in shipped if n.startswith("grader/derive/")]


def test_the_student_environment_holds_no_reference_answer(student_env):
    """Every file of the environment and the wheel, searched for the reference answers' lines and their
    distinctive fragments, the solution markers and the hidden suite's text; and no notebook or suite
    file among them. (A fragment the self-check's own hints use is a named mistake there, not an
    answer, and a bare torch name such as `index_add` is one the static check's allowlist spells out;
    both are left out of the search.)"""
    venv, wheel = student_env
    hints = "".join((ROOT / "grader" / "judge" / f"{name}.py").read_text(encoding="utf-8")
                    for name in ("diagnose", "neighbourhood"))
    names = static_check.TORCH | static_check.ATTRIBUTES
    wanted = (*SOLUTION_LINES, *(d for d in DISTINCTIVE if d not in hints and d not in names), "BEGIN SOLUTION",
              "def test_chain", *HIDDEN_FEEDBACK)
    texts = {f"{wheel}:{n}": zipfile.ZipFile(wheel).read(n).decode("utf-8", "replace")
             for n in zipfile.ZipFile(wheel).namelist()}
    texts.update({str(p): p.read_bytes().decode("utf-8", "replace") for p in venv.rglob("*")
                  if p.is_file() and not p.is_symlink()})
    assert len(texts) > 20
    found = [(where, s) for where, text in texts.items() for s in wanted if s in text]
    found += [(where, "a notebook or hidden-suite file") for where in texts
              if where.endswith(".ipynb") or "autotests" in where or "known_mistakes" in where]
    assert found == [], found[:10]
