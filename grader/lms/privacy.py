"""`backprop-ninja course check DIR`: what of a course other users of a shared server could read.

On a JupyterHub every other unix user is a student. A course folder holds what none of them may read:
the solved notebook (source/), the secret salt (course.yml, the Gradescope zip), every classmate's
submission, score and feedback (submitted/, autograded/, feedback/, gradebook.db, results/). The check
walks the folder as another user's permissions would let them: a file is exposed when each folder above
it (the course folder's own parents included) lets others in, and the file lets them read it. The
exchange is nbgrader's, made for students to reach, and is left out. Access by a group is named with
the group's members, for the instructor to judge (a TAs' group is meant to read; `users` is everyone).
"""
from __future__ import annotations

import grp
import os
import stat
from pathlib import Path

# What the check names first for each kind of thing it finds: why it matters.
WHY = {"source": "the solved notebook", "course.yml": "the secret salt", "gradebook.db": "every student's scores",
       "submitted": "every submission", "autograded": "every graded notebook", "feedback": "every student's feedback",
       "results": "every result", "autotests": "the hidden suite", "release": "the release (public anyway)"}


def _others_can(mode: int, bits: int) -> bool:
    return mode & bits == bits


def _group(gid: int) -> str:
    try:
        entry = grp.getgrgid(gid)
    except KeyError:
        return f"group {gid}"
    return f"group {entry.gr_name} (members: {', '.join(entry.gr_mem) or 'only the users whose own group it is'})"


def check(course: Path, exchange: Path | None = None) -> tuple[list[str], list[str]]:
    """(warnings: what other users can read or list, notes: what a group can) for the course folder."""
    course = Path(course).resolve()
    warnings, notes = [], []
    top = os.stat(course)
    if top.st_mode & 0o070:
        notes.append(f"{course}: {_group(top.st_gid)} has access (mode {stat.S_IMODE(top.st_mode):o})")
    if not all(_others_can(os.stat(parent).st_mode, stat.S_IXOTH) for parent in course.parents):
        if top.st_mode & 0o007:  # private only while a folder above stays closed to other users
            notes.append(f"{course}: mode {stat.S_IMODE(top.st_mode):o} would let other users in, but a folder "
                         f"above it is closed to them; chmod o-rwx {course} to keep it so")
        return warnings, notes
    if top.st_mode & 0o007:
        warnings.append(f"{course}: other users may {'enter' if top.st_mode & stat.S_IXOTH else 'list'} it (mode "
                        f"{stat.S_IMODE(top.st_mode):o}): chmod o-rwx {course}")
    closed = not _others_can(top.st_mode, stat.S_IXOTH)
    behind = 0  # readable by their mode, behind the closed course folder
    for folder, dirs, files in os.walk(course):
        here = Path(folder)
        dirs[:] = sorted(d for d in dirs if (exchange is None or (here / d).resolve() != Path(exchange).resolve())
                         and (closed or _others_can(os.lstat(here / d).st_mode, stat.S_IXOTH)))
        for name in sorted(files + dirs):
            path = here / name
            mode = os.lstat(path).st_mode
            if stat.S_ISLNK(mode) or not _others_can(mode, stat.S_IROTH):
                continue
            if closed:
                behind += 1
                continue
            part = path.relative_to(course).parts[0]
            why = f" ({WHY[part]})" if part in WHY else ""
            warnings.append(f"{path}: other users may read it{why} (mode {stat.S_IMODE(mode):o})")
    if behind:
        notes.append(f"{course}: closed to other users (mode {stat.S_IMODE(top.st_mode):o}), which keeps out {behind} "
                     f"thing(s) in it their modes would let them read; chmod -R o-rwx {course} closes those too")
    return warnings, notes


SHOWN = 20  # lines of one kind at most; the rest are counted


def shared(course: Path, exchange: Path | None = None) -> list[str]:
    """For a course its staff's group shares (the course folder lets its group in): what a TA other than the
    one who made it could not replace, and the umask nbgrader needs for its own files (course init --group
    writes both ways). Empty for a course of one owner."""
    course = Path(course).resolve()
    top = os.stat(course)
    if not top.st_mode & 0o070:
        return []
    group = _group(top.st_gid).split(" (")[0].removeprefix("group ")
    problems = []
    config = course / "nbgrader_config.py"
    if config.is_file() and "os.umask(0o007)" not in config.read_text(encoding="utf-8", errors="replace"):
        problems.append(f"{config}: sets no umask, so what nbgrader writes (gradebook.db, autograded/, feedback/) is "
                        "for its writer alone: add `import os; os.umask(0o007)` (course init --group writes it)")
    found = []
    if not top.st_mode & stat.S_ISGID:
        found.append(f"{course}: chmod g+s (what is made in it does not take the group {group})")
    for folder, dirs, files in os.walk(course):
        here = Path(folder)
        dirs[:] = sorted(d for d in dirs if exchange is None or (here / d).resolve() != Path(exchange).resolve())
        for name in sorted(dirs + files):
            path = here / name
            st = os.lstat(path)
            if stat.S_ISLNK(st.st_mode):
                continue
            # A file is replaced through its folder (nbgrader removes, then writes): only the gradebook, which
            # SQLite writes in place, needs the group's write too.
            need, fix = ((0o070 | stat.S_ISGID, "g+rwxs") if stat.S_ISDIR(st.st_mode) else
                         (0o060, "g+rw") if name == "gradebook.db" else (0o040, "g+r"))
            fixes = ([f"chgrp {group}"] if st.st_gid != top.st_gid else []) + \
                ([f"chmod {fix}"] if st.st_mode & need != need else [])
            if fixes:
                found.append(f"{path}: {' and '.join(fixes)} (another of the staff cannot replace it)")
    problems += found[:SHOWN]
    if len(found) > SHOWN:
        problems.append(f"... and {len(found) - SHOWN} more in {course}: chgrp -R {group} {course} && chmod -R g+rwX "
                        f"{course} && find {course} -type d -exec chmod g+s {{}} +")
    return problems


def homes() -> list[str]:
    """The home folders of this machine's users that other users may enter or list: on a hub each is a
    student's, with their notebooks and feedback (Debian makes them 0755)."""
    import pwd

    found = sorted({p.pw_dir for p in pwd.getpwall() if 1000 <= p.pw_uid < 65534 and os.path.isdir(p.pw_dir)
                    and os.stat(p.pw_dir).st_mode & 0o005})
    if not found:
        return []
    return [f"{len(found)} home folder(s) other users may enter or list (e.g. {found[0]}, mode "
            f"{stat.S_IMODE(os.stat(found[0]).st_mode):o}): students read each other's notebooks and feedback there; "
            "chmod 700 each, and set HOME_MODE 0700 in /etc/login.defs (DIR_MODE=0700 in /etc/adduser.conf) for "
            "new users"]
