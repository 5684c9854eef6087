"""What the tests of the documented make targets share (tests/test_make_targets.py, tests/test_make_bench.py):
the targets the README and docs/ name, a copy of the project to run one in, and running it.

A target runs through make itself (its recipe is the code path that broke unseen: issue 38.1), with
``QUICK=1`` (the Makefile's small budgets), in a copy of the project: the pages a target rewrites (README,
docs/) and the benchmarks (whose paths are their own) are copied, everything else is linked, and the copy's
build/ is its own. The checkout is never written."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

from conftest import ROOT

COPIED = ("README.md", "docs", "benchmarks")
NOT_LINKED = {".git", "build", ".aws-sam", ".pytest_cache", ".hypothesis", "__pycache__", "changeflow.egg-info"}


def documented_targets() -> set[str]:
    """Every `make <target>` the README and the pages of docs/ name."""
    found = set()
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        found |= set(re.findall(r"`make ([a-z][a-z0-9-]*)", page.read_text(encoding="utf-8")))
    return found


def makefile_targets() -> set[str]:
    return set(re.findall(r"^([a-z][a-z0-9-]*):", (ROOT / "Makefile").read_text(encoding="utf-8"), re.M))


def recipe(target: str) -> list[str]:
    """The command lines of ``target``'s recipe, as the Makefile writes them."""
    lines = (ROOT / "Makefile").read_text(encoding="utf-8").splitlines()
    start = next(i for i, line in enumerate(lines) if re.match(rf"^{re.escape(target)}:", line))
    body = []
    for line in lines[start + 1:]:
        if not line.startswith("\t"):
            break
        body.append(line.strip())
    return body


def project_copy(where: Path) -> Path:
    """A copy of the project in ``where`` (the pages and benchmarks copied, the rest linked)."""
    copy = where / "project"
    copy.mkdir()
    for entry in ROOT.iterdir():
        if entry.name in NOT_LINKED:
            continue
        if entry.name in COPIED:
            (shutil.copytree if entry.is_dir() else shutil.copy2)(entry, copy / entry.name)
        else:
            (copy / entry.name).symlink_to(entry)
    return copy


def make(copy: Path, target: str, timeout: float = 600, extra: list[str] | None = None) -> subprocess.CompletedProcess:
    """``make <target> QUICK=1 [EXTRA...]`` in the copy, as a user would run it there (no outer make's flags)."""
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "CHANGEFLOW_ROOT")}
    done = subprocess.run(["make", "--no-print-directory", target, "QUICK=1", *(extra or [])], cwd=copy, env=env,
                          capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"make {target} QUICK=1 exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done
