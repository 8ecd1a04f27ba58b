"""grader.outputs.files: what the grader writes is its owner's alone, or its staff group's in a setgid folder,
never other users', whatever the umask (on a shared server every other user is a student)."""
from __future__ import annotations

import os
import stat

import pytest

from grader.outputs.files import atomic_write, private_dir


def mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.fixture
def open_umask():
    old = os.umask(0o000)  # the worst a shell could hand the grader
    yield
    os.umask(old)


def test_files_and_folders_are_the_owners_alone_whatever_the_umask(tmp_path, open_umask):
    tmp_path.chmod(0o777)
    atomic_write(tmp_path / "results" / "alice" / "a.json", "{}")
    assert mode(tmp_path / "results") == mode(tmp_path / "results" / "alice") == 0o700
    assert mode(tmp_path / "results" / "alice" / "a.json") == 0o600


def test_a_setgid_folder_shares_with_its_group_and_never_with_others(tmp_path, open_umask):
    staff = tmp_path / "course"
    staff.mkdir()
    staff.chmod(0o2770)
    atomic_write(staff / "results" / "a.json", "{}")
    assert mode(staff / "results") == 0o2770 and mode(staff / "results" / "a.json") == 0o660
    staff.chmod(0o2750)
    atomic_write(staff / "b.csv", "x")
    assert mode(staff / "b.csv") == 0o640


def test_an_explicit_mode_and_an_existing_folder_are_kept(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o755)
    atomic_write(shared / "course.yml", "x", mode=0o600)
    assert mode(shared) == 0o755 and mode(shared / "course.yml") == 0o600
    assert private_dir(shared) == shared and mode(shared) == 0o755


def test_an_interrupt_straight_after_the_rename_keeps_the_file_and_stays_an_interrupt(tmp_path, monkeypatch):
    """Ctrl-C on a threaded batch lands between any two steps of the main thread (a worker thread took the
    signal the main thread held): the file is whole and in place, and the command still exits as interrupted,
    not with "No such file" for a temporary file that had become the result."""
    rename = os.replace

    def replace_then_interrupt(src, dst):
        rename(src, dst)
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "replace", replace_then_interrupt)
    with pytest.raises(KeyboardInterrupt):
        atomic_write(tmp_path / "a.json", "{}")
    assert [p.name for p in tmp_path.iterdir()] == ["a.json"] and (tmp_path / "a.json").read_text() == "{}"
