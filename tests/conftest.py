"""Shared by every test: the default selection (slow tests only in CI or when asked for), the page
fixture, a normal unix user; and for the foundation tests a seeded batch with the lecture's init and the
notebook's own autograd pass (micrograd style: every intermediate retains its gradient), independent of
grader/judge/oracle.py so that the oracle itself can be tested against it."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
import torch

from grader import derive
from grader.exercises.makemore_mlp import EXERCISE
from grader.judge import neighbourhood
from solutions.reference import forward

# `check_page` (helpers/browser.py) for every module, one browser for the whole session; every variant's
# course made from the start of the session (helpers/variant_courses.py); `pytester` for
# tests/test_default_run.py, which runs this file on a suite of its own.
pytest_plugins = ["helpers.browser", "helpers.variant_courses", "pytester"]

# `course init` names its course in the caller's own Jupyter configuration (formgrader's course): the tests write
# one of their own, never the developer's.
os.environ["JUPYTER_CONFIG_DIR"] = tempfile.mkdtemp(prefix="bpn-tests-jupyter-")

# Tiny tensors: intra-op threads only cost time here (measured ~25x slower with 2 threads than with 1).
torch.set_num_threads(1)

FAST = "not slow"
_CUT = pytest.StashKey[bool]()


def _chooses_by_marker(config: pytest.Config) -> bool:
    return bool(config.option.markexpr) or any(arg == "-m" or arg.startswith("--markexpr")
                                               for arg in config.invocation_params.args)


def _runs_everything(config: pytest.Config) -> bool:
    """CI runs every test; so does a run that chooses by marker (`-m`, even `-m ""`) or names what to run
    (a file, a folder, `file::test`): only a plain local `python -m pytest` is cut to the fast tier."""
    return (os.environ.get("CI", "").lower() in ("1", "true", "yes") or _chooses_by_marker(config)
            or config.args_source is pytest.Config.ArgsSource.ARGS)


def _groups_work(config: pytest.Config) -> None:
    """pytest-xdist 3.8 hands a group to one worker through the node ids it rewrites, a write pytest 9.2's
    structured node ids ignore (pytest-xdist issue 1386): every test would go out alone and each module's
    set-up be made on both workers, silently doubling the run. Said, with the fix, before anything runs."""
    if config.getoption("dist", None) != "loadgroup" or hasattr(config, "workerinput"):
        return
    from importlib.metadata import version

    from packaging.version import Version

    if Version(pytest.__version__) >= Version("9.2") and Version(version("pytest-xdist")) <= Version("3.8.0"):
        raise pytest.UsageError(f"pytest {pytest.__version__} with pytest-xdist {version('pytest-xdist')} groups no "
                                "test under --dist loadgroup (pytest-xdist issue 1386): pip install 'pytest<9.2'")


def pytest_configure(config: pytest.Config) -> None:
    """Locally a plain `python -m pytest` leaves out the slow tier (real notebooks, nbgrader, wheels, red
    team modes, unix users, browsers: each test over ~10 s), so that the run before a commit stays short."""
    _groups_work(config)
    if not hasattr(config, "workerinput"):  # the run's own process, before any worker or test starts
        _compiled()
    config.stash[_CUT] = not _runs_everything(config)
    if not config.stash[_CUT]:
        config.pluginmanager.register(TimePerFile(), "time-per-file")
    # The tests judge as the grader does: with the rule table (a test of the self-check without it chooses so).
    neighbourhood.use_rule_table(derive)
    if config.stash[_CUT]:
        config.option.markexpr = FAST


def _compiled() -> None:
    """The checkout's modules compiled before any test starts a process. Where PYTHONDONTWRITEBYTECODE is set
    (this project's CI machine sets it) no process writes the bytecode it compiles, so each of the run's
    processes (every command, nbgrader, kernel and fork server) compiled the grader from source again: a tenth
    of the CPU time of the suites that start many (the walls: 164 CPU s, 150 with this). Python reads what is
    written here whatever the setting, and compiles again only what has changed since."""
    import compileall

    root = Path(__file__).resolve().parents[1]
    for folder in ("grader", "tests", "solutions", "autotests", "benchmarks"):
        compileall.compile_dir(root / folder, quiet=2)  # templates that are not Python stay as they are


def _shared_scope(item: pytest.Item) -> str:
    """The work an item shares with others through a fixture wider than a test (a module's course, a red-team
    mode): the module and the parameters of those fixtures; the item's own id where it shares none."""
    marked = item.get_closest_marker("xdist_group")
    if marked:
        return marked.args[0]
    definitions = item._fixtureinfo.name2fixturedefs
    wide = [name for name in item.fixturenames
            if name in definitions and definitions[name][-1].scope in ("class", "module", "package")]
    if not wide:
        return item.nodeid
    indices = item.callspec.indices if hasattr(item, "callspec") else {}
    return "-".join([item.module.__name__, *(f"{name}{indices[name]}" for name in wide if name in indices)])


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Two tests at once (pytest-xdist, `-n` in pyproject.toml): the items that share a module's or a
    mode's set-up go to one worker together (a set-up made twice costs more than the second core gives),
    and the scopes holding slow tests are handed out first, the most slow tests first, so that the last
    minutes are many short tests spread over both workers instead of one long scope on one."""
    if not getattr(config.option, "loadgroup", False):  # set in xdist's workers under --dist loadgroup
        return
    scopes: dict[str, list[pytest.Item]] = {}
    for item in items:
        scopes.setdefault(_shared_scope(item), []).append(item)
    for scope, members in scopes.items():
        if len(members) > 1 or scope != members[0].nodeid:
            for item in members:
                item.add_marker(pytest.mark.xdist_group(scope))
    ordered = sorted(scopes.values(), key=lambda members: -sum(bool(i.get_closest_marker("slow")) for i in members))
    items[:] = [item for members in ordered for item in members]


def pytest_report_header(config: pytest.Config) -> str | None:
    if config.stash[_CUT]:
        return "slow tests left out (the local default): CI=true or -m '' runs them all, -m slow only them"
    return None


class TimePerFile:
    """Where a run's time goes, by test file (set-ups shared by a file's tests included), for the CI figures
    docs/developing.md keeps: the slowest tests alone hide a file of many middling ones. Summed in the process
    that reports (xdist's controller, or the one process under -n0), so that it is the whole run's."""

    SHOWN = 30

    def __init__(self):
        self.seconds: dict[str, float] = {}

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        where = report.nodeid.split("::")[0]
        self.seconds[where] = self.seconds.get(where, 0.0) + report.duration

    def pytest_terminal_summary(self, terminalreporter) -> None:
        total = sum(self.seconds.values())
        if not total:
            return
        terminalreporter.write_sep("=", f"time per test file: {total:.0f} s of worker time in all")
        for where, seconds in sorted(self.seconds.items(), key=lambda kv: -kv[1])[:self.SHOWN]:
            terminalreporter.write_line(f"{seconds:8.1f} s {100 * seconds / total:5.1f}%  {where}")


def _make_batch(sizes, dtype=torch.float64, seed=0):
    """Lecture init from a seeded generator, and a batch (Xb, Yb) drawn from the same generator."""
    generator = torch.Generator().manual_seed(seed)
    params = EXERCISE.init(sizes, generator, dtype=dtype)
    Xb = torch.randint(0, sizes.vocab, (sizes.n, sizes.block_size), generator=generator)
    Yb = torch.randint(0, sizes.vocab, (sizes.n,), generator=generator)
    return params, Xb, Yb


def _autograd_pass(params, Xb, Yb):
    """Forward with parameters requiring grad, .retain_grad() on every intermediate, loss.backward().

    Returns the forward values (still attached to the graph); `.grad` of each is its true gradient.
    """
    leaves = {k: v.detach().clone().requires_grad_(True) for k, v in params.items()}
    values = forward(leaves, Xb, Yb)
    for name in EXERCISE.network.intermediates:
        values[name].retain_grad()
    values["loss"].backward()
    return values


@pytest.fixture(scope="session")
def make_batch():
    return _make_batch


@pytest.fixture(scope="session")
def autograd_pass():
    return _autograd_pass


@pytest.fixture(scope="session")
def generated_course(tmp_path_factory) -> Path:
    """The bundled course as `course init` and generate_assignment leave it, made once per run: copy it,
    never change it."""
    from helpers.nbgrader_course import generated
    from helpers.paths import COURSE, ROOT

    return generated(_run_folder(tmp_path_factory), ROOT / "course.yml", ROOT, COURSE.assignment)


@pytest.fixture(scope="session")
def wheels(tmp_path_factory):
    """The folder holding both packages' wheels, built once per run (tests/helpers/wheels.py)."""
    from helpers import wheels

    return wheels.shared(_run_folder(tmp_path_factory))


def _run_folder(tmp_path_factory) -> Path:
    """A folder of this run that every xdist worker sees (a worker's own temporary folder is inside it),
    for what the run builds once, under a lock."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


@pytest.fixture(scope="session")
def unix_user():
    """A normal unix user for the session (tests/helpers/users.py: the Session, its `.user`), made and
    removed here: the grader as most instructors run it. Needs root, as CI has."""
    import os

    if os.getuid() != 0:
        pytest.skip("creating a user needs root")
    from helpers import users

    with users.Session() as session:
        yield session
