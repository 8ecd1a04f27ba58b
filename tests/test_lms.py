"""zip_collect's collector: the file names Canvas, Moodle and Blackboard give a bulk download, as those
systems write them, read into nbgrader's student id and the LMS's own id (grader.lms.nbgrader)."""
from __future__ import annotations

import pytest

from grader.lms.nbgrader import lms_name


@pytest.mark.parametrize("path, expected", [
    ("submissions/smithjohn_1234_5678901_backprop_ninja.ipynb",
     {"lms": "Canvas", "student_id": "smithjohn", "lms_user_id": "1234", "resubmission": 0, "late": False}),
    ("smithjohn_late_1234_5678902_backprop_ninja-1.ipynb",
     {"lms": "Canvas", "student_id": "smithjohn", "lms_user_id": "1234", "resubmission": 1, "late": True}),
    ("doejane_77_88_Copy of backprop_ninja (2).ipynb",
     {"lms": "Canvas", "student_id": "doejane", "lms_user_id": "77", "resubmission": 0, "late": False}),
    ("Backprop ninja-Ada Lovelace/Ada Lovelace_4321_assignsubmission_file_/backprop_ninja.ipynb",
     {"lms": "Moodle", "student_id": "moodle-4321", "lms_user_id": "4321", "full_name": "Ada Lovelace"}),
    ("Ada Lovelace_4321_assignsubmission_file_backprop_ninja.ipynb",
     {"lms": "Moodle", "student_id": "moodle-4321", "lms_user_id": "4321", "full_name": "Ada Lovelace"}),
    ("Backprop Ninja_bitdiddle_attempt_2026-11-30-15-04-05_backprop_ninja.ipynb",
     {"lms": "Blackboard", "student_id": "bitdiddle", "lms_user_id": None, "timestamp": "2026-11-30 15:04:05"}),
    ("backprop_ninja submissions/eve_backprop_ninja.ipynb",
     {"lms": "", "student_id": "eve", "lms_user_id": None}),
])
def test_download_names_give_the_student_and_the_lms_id(path, expected):
    info = lms_name(path)
    assert info is not None
    assert {k: info[k] for k in expected} == expected


@pytest.mark.parametrize("path", ["notes.ipynb", "submissions/index.html"])
def test_a_file_no_lms_names_so_is_skipped(path):
    assert lms_name(path) is None
