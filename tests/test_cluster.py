"""`grade --scheduler`: the same batch graded on a Dask cluster (a LocalCluster of two worker processes on
loopback) gives the files that grading on this machine gives; a worker killed mid-chunk loses no
submission silently; a wrong address or a missing extra is one line."""
from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import shutil
import signal
import sys
import threading
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from grader.cli import main
from grader.outputs.feedback_page import STAMP
from helpers.notebooks import submission, write
from helpers.paths import COURSE_FILE, STUB

distributed = pytest.importorskip("distributed")
psutil = pytest.importorskip("psutil")  # a dependency of distributed

IDS = ["a-solved", "b-wrong", "c-blank", "d-broken"]


@pytest.fixture(scope="module")
def batch(tmp_path_factory):
    root = tmp_path_factory.mktemp("cluster") / "subs"
    write(root / "a-solved.ipynb", submission())
    write(root / "b-wrong.ipynb", submission(replace={"dcounts": "dcounts = counts_sum_inv * dprobs\n",
                                                      "db1": "db1 = torch.zeros_like(b1)\n"}))
    shutil.copy(STUB, root / "c-blank.ipynb")
    (root / "d-broken.ipynb").write_bytes(b"{ not json")
    return root


def grade(batch: Path, out: Path, *options: str):
    return CliRunner().invoke(main, ["grade", str(batch), "--out", str(out), "--course", str(COURSE_FILE),
                                     *options])


def comparable(out: Path) -> dict[str, dict]:
    """Each result file less what legitimately differs between two runs: times and the sandbox report."""
    found = {}
    for sid in IDS:
        result = json.loads((out / f"{sid}.json").read_text(encoding="utf-8"))
        del result["execution_time"], result["extra_data"]["isolation"]
        for test in result["tests"]:
            extra = test.get("extra_data", {})
            for key in [k for k in extra if k.endswith("_ms_per_step")]:
                del extra[key]
        found[sid] = result
    return found


@pytest.fixture(scope="module")
def local(batch, tmp_path_factory):
    out = tmp_path_factory.mktemp("local")
    done = grade(batch, out, "--jobs", "2", "--html")
    assert done.exit_code == 0, done.output
    return out


def workers(cluster) -> dict[str, int]:
    """Worker address -> pid, waiting for both (a killed one is restarted by its nanny)."""
    with distributed.Client(cluster, set_as_default=False) as client:
        client.wait_for_workers(2, timeout=60)
        return client.run(os.getpid)


def processes(pids) -> list:
    """These processes and all they started (the fork servers and their sandboxed children)."""
    found = []
    for pid in pids:
        with contextlib.suppress(psutil.NoSuchProcess):
            found += [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
    return found


def assert_gone(found: list) -> None:
    _, alive = psutil.wait_procs(found, timeout=20)
    assert not alive, [p.cmdline() for p in alive]


@pytest.fixture(scope="module")
def cluster():
    """Two worker processes with one thread each; afterwards, every process they started is gone."""
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                                  dashboard_address=None, silence_logs=logging.CRITICAL) as started:
        yield started
        spawned = processes(workers(started).values())
    assert_gone(spawned)


def test_the_cluster_listens_on_loopback_only(cluster):
    assert cluster.scheduler_address.startswith("tcp://127.0.0.1:")
    for address, pid in workers(cluster).items():
        assert address.startswith("tcp://127.0.0.1:")
        sockets = psutil.Process(pid).net_connections(kind="inet")
        assert sockets and all(s.laddr.ip == "127.0.0.1" for s in sockets), sockets


def test_a_batch_graded_on_the_cluster_gives_the_files_grading_here_gives(batch, local, cluster, tmp_path,
                                                                         monkeypatch):
    from grader.pipeline import batch as grading

    monkeypatch.setattr(grading, "CHUNK", 2)  # two chunks: one for each worker
    out = tmp_path / "out"
    done = grade(batch, out, "--scheduler", cluster.scheduler_address, "--html")
    assert done.exit_code == 0, done.output
    assert "grading on the Dask cluster at tcp://127.0.0.1:" in done.output
    assert "4/4 graded" in done.output and "ran a-solved in" in done.output
    there, here = comparable(out), comparable(local)
    for sid in IDS:
        assert there[sid] == here[sid], sid
    assert (out / "grades.csv").read_bytes() == (local / "grades.csv").read_bytes()
    for sid in IDS:  # the feedback pages, heatmaps and all, less the stamp of their result file
        pages = [re.sub(rf'<meta name="{STAMP}" content="\w+">', "", (o / f"{sid}.html").read_text())
                 for o in (out, local)]
        assert pages[0] == pages[1], sid
    assert "data:image/png" in (out / "b-wrong.html").read_text()  # drawn from the worker's evidence
    walls = [json.loads((o / "a-solved.json").read_text())["extra_data"]["isolation"] for o in (out, local)]
    assert walls[0] and set(walls[0]) == set(walls[1])  # sandboxed on the worker, with the same kinds of walls
    with distributed.Client(cluster, set_as_default=False) as client:
        courses = client.run(lambda: len(sys.modules["grader.pipeline.cluster"]._courses))
    assert sorted(courses.values()) == [1, 1]  # both workers graded a chunk, each from its own copy of the course


@pytest.mark.slow
def test_a_worker_killed_mid_chunk_leaves_its_submissions_ungraded_and_resume_grades_them(
        batch, local, cluster, tmp_path, monkeypatch):
    from grader.pipeline import batch as grading

    monkeypatch.setattr(grading, "CHUNK", 2)
    monkeypatch.setattr(cluster.scheduler, "allowed_failures", 0)  # no retry: the chunk is lost at once
    pids = workers(cluster)
    killed = []  # what the killed worker had started: its fork server and sandboxed children

    def kill_the_first_worker_running_children():
        deadline = time.monotonic() + 60
        while not killed and time.monotonic() < deadline:
            busy = [pids[ts.processing_on.address] for ts in list(cluster.scheduler.tasks.values())
                    if ts.processing_on is not None]
            started = processes(busy[:1])[1:]
            if started:
                os.kill(busy[0], signal.SIGKILL)
                killed.extend(started)
            time.sleep(0.05)

    killer = threading.Thread(target=kill_the_first_worker_running_children)
    killer.start()
    out = tmp_path / "out"
    try:
        done = grade(batch, out, "--scheduler", cluster.scheduler_address)
    finally:
        killer.join()
    assert killed
    assert_gone(killed)
    assert done.exit_code == 1 and "Traceback" not in done.output, done.output
    error = done.output.splitlines()[-1]
    assert error.startswith("Error: 2 submission(s) not graded, their Dask workers died: ") and "--resume" in error
    lost = error.split("died: ")[1].split(";")[0].split(", ")
    written = sorted(p.stem for p in out.glob("*.json"))
    assert sorted(lost + written) == IDS and len(written) == 2  # every submission written or named, none both
    assert not (out / "grades.csv").exists() and not list(out.rglob("*.tmp"))

    monkeypatch.setattr(cluster.scheduler, "allowed_failures", 3)
    workers(cluster)
    done = grade(batch, out, "--scheduler", cluster.scheduler_address, "--resume")
    assert done.exit_code == 0, done.output
    assert sorted(line.split()[1].rstrip(":") for line in done.output.splitlines() if line.startswith("kept ")) \
        == written
    assert comparable(out) == comparable(local)
    assert (out / "grades.csv").read_bytes() == (local / "grades.csv").read_bytes()


def test_ctrl_c_keeps_what_is_written_and_cancels_the_chunks_still_out(batch, cluster, tmp_path, monkeypatch):
    from grader.outputs import results
    from grader.pipeline import batch as grading

    monkeypatch.setattr(grading, "CHUNK", 1)  # four chunks, two out at a time
    real, writes = results.write_result, []

    def write_result(out, result):
        writes.append(result.submission)
        if len(writes) == 2:
            raise KeyboardInterrupt  # Ctrl-C as the second chunk comes back
        return real(out, result)

    monkeypatch.setattr(results, "write_result", write_result)
    out = tmp_path / "out"
    stopped = grade(batch, out, "--scheduler", cluster.scheduler_address)
    assert stopped.exit_code == 130 and "rerun with --resume" in stopped.output
    assert [p.stem for p in out.glob("*.json")] == writes[:1] and not list(out.rglob("*.tmp"))
    deadline = time.monotonic() + 20
    while cluster.scheduler.tasks and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not cluster.scheduler.tasks  # the chunk sent after the first came back was cancelled


def test_an_unreachable_scheduler_is_one_line(batch, tmp_path, monkeypatch):
    from grader.pipeline import cluster

    monkeypatch.setattr(cluster, "CONNECT_TIMEOUT", 1)
    done = grade(batch, tmp_path / "out", "--scheduler", "tcp://127.0.0.1:9")  # discard port: nothing listens
    assert done.exit_code == 1
    lines = [line for line in done.output.splitlines() if line.startswith("Error")]
    assert lines == [done.output.splitlines()[-1]]
    assert "cannot reach the Dask scheduler at tcp://127.0.0.1:9" in lines[0]
    assert not (tmp_path / "out").exists()


def test_without_distributed_the_error_says_how_to_install_it(batch, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "distributed", None)  # import distributed now raises ImportError
    done = grade(batch, tmp_path / "out", "--scheduler", "tcp://127.0.0.1:9")
    assert done.exit_code == 1 and "Traceback" not in done.output
    assert done.output.splitlines()[-1] == ("Error: grading on a Dask cluster needs distributed: "
                                            "pip install 'backprop-ninja[dask]'")
