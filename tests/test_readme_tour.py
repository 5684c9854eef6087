"""The README's five-minute tour, run as written (issue 38.5): its code blocks are read from README.md, so a
change to the tour changes this test, and every line runs verbatim in a fresh checkout as a newcomer runs it:
no AWS configuration, a home of its own, `make run` first, then `changeflow serve` and the commands beside it.

Two things differ from a newcomer's terminal, and only in the environment: `serve` listens on a free port
(its line with `--port 0`, so that two runs of the suite never share 4566), and `CHANGEFLOW_ENDPOINT_URL`
points the other commands at it, as the README says to do for serve on another port. What the tour writes
goes outside the checkout (`~` is a temporary home), and the checkout is left as it was found: nothing
untracked, nothing modified (it left digest.json and proof.json behind)."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import urllib.request
from pathlib import Path

import pytest

from conftest import ROOT

pytestmark = pytest.mark.enable_socket

README = ROOT / "README.md"
TOUR_HEADING = "## A five-minute tour"


def tour_blocks(text: str) -> list[list[str]]:
    """The ``sh`` code blocks of the README's tour section, each as its command lines."""
    section = text.split(TOUR_HEADING, 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"^```sh\n(.*?)^```", section, re.M | re.S)
    return [[line for line in block.splitlines() if line.strip()] for block in blocks]


def claimed(line: str) -> list[str]:
    """What a line's comment says its command prints, after its last colon: ``# a change request: SUCCEEDED
    applied 1`` claims ``SUCCEEDED applied 1`` (a comment with no colon claims nothing)."""
    comment = line.partition("  # ")[2]
    return comment.rpartition(": ")[2].split() if ": " in comment else []


def shows(output: str, words: list[str]) -> bool:
    """Whether one line of ``output`` has ``words`` in that order, each a whole token."""
    pattern = r"(?:^|\s)" + r"\s+(?:\S+\s+)*?".join(re.escape(w) for w in words) + r"(?:\s|$)"
    return any(re.search(pattern, line) for line in output.splitlines())


@pytest.fixture
def checkout(tmp_path) -> Path:
    """A fresh checkout of this working tree (what a commit of it would hold, with its files' times), its own
    git repository so that what the tour leaves behind shows in ``git status``, and this checkout's
    ``.venv`` (make's stamp in it is newer than pyproject.toml, so `make run` installs nothing)."""
    fresh = tmp_path / "changeflow"
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            check=True, capture_output=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        source = ROOT / name
        if source.is_symlink() or not source.is_file():  # the lead's shared tool directories, deleted files
            continue
        (fresh / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, fresh / name)
    (fresh / ".venv").symlink_to(ROOT / ".venv")
    git = ["git", "-c", "user.name=tour", "-c", "user.email=tour@example.com", "-c", "commit.gpgsign=false"]
    for command in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "fresh"]):
        subprocess.run(git + command, cwd=fresh, check=True, capture_output=True)
    up_to_date = subprocess.run(["make", "-q", ".venv/.installed"], cwd=fresh, capture_output=True)
    if up_to_date.returncode != 0:
        pytest.skip(".venv is older than pyproject.toml: run `make` once (make test's set-up does)")
    return fresh


def newcomer_env(home: Path) -> dict[str, str]:
    """A terminal with no AWS configuration and no changeflow settings: only the system's own variables."""
    home.mkdir()
    keep = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "CHANGEFLOW_", "MAKE", "MFLAGS"))}
    return {**keep, "HOME": str(home)}


def run(line: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", line], cwd=cwd, env=env, capture_output=True, text=True, timeout=300,
                          stdin=subprocess.DEVNULL)


def test_the_tour_is_two_blocks_whose_commands_are_the_documented_ones():
    # GIVEN the README as it is THEN the tour has the demo's block and the endpoint's block, which starts
    # serve first (this test depends on that shape: a README that changes it must change this test too)
    demo, endpoint = tour_blocks(README.read_text(encoding="utf-8"))
    assert [line.split("#")[0].split() for line in demo] == [["make", "run"]]
    assert "changeflow serve" in endpoint[0] and "--port 4566" in endpoint[0]
    assert all(".venv/bin/changeflow " in line for line in endpoint), "every tour command is the project's CLI"
    assert claimed("x  # a change request: SUCCEEDED applied 1") == ["SUCCEEDED", "applied", "1"]
    assert shows("x  SUCCEEDED  applied  1", ["SUCCEEDED", "applied", "1"])
    assert not shows("x  SUCCEEDED  stale  1", ["SUCCEEDED", "applied", "1"])


def test_the_readme_tour_runs_verbatim_on_a_fresh_checkout(checkout, tmp_path, sigint_reaches_children):
    text = (checkout / "README.md").read_text(encoding="utf-8")
    demo, endpoint = tour_blocks(text)
    env = newcomer_env(tmp_path / "home")

    # the demo: `make run` prints the version table the README shows (its rows, the columns it keeps)
    [make_run] = demo
    done = run(make_run, checkout, env)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    # the whole story (this is make run's test: tests/test_make_targets.py ran it a second time for these)
    assert all(said in done.stdout for said in ("roll back to version 2", "ValidationError", "ExecutionSucceeded"))
    table = text.split("It ends with the version table", 1)[1].split("```", 2)[1]
    rows = [line.split() for line in table.splitlines() if line.strip() and line.strip() != "..."]
    assert rows and all(shows(done.stdout, row) for row in rows if "..." not in row), done.stdout[-3000:]

    # the endpoint: serve as written but on a free port, until Ctrl-C
    serve_line = endpoint[0].replace("--port 4566", "--port 0")
    serve = subprocess.Popen(["bash", "-c", "exec " + serve_line], cwd=checkout, env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True, stdin=subprocess.DEVNULL)
    try:
        first = serve.stdout.readline()
        found = re.search(r"http://127\.0\.0\.1:\d+", first)
        assert found, first + serve.stdout.read(2000)
        url = env["CHANGEFLOW_ENDPOINT_URL"] = found.group()
        for line in endpoint[1:]:
            done = run(line, checkout, env)
            assert done.returncode == 0, (line, done.stdout[-2000:], done.stderr[-2000:])
            assert "Traceback" not in done.stderr, (line, done.stderr)
            words = claimed(line)
            assert not words or shows(done.stdout, words), (line, words, done.stdout[-2000:])
            if "changeflow api " in line:  # the read API answered with the entity (it was 403 unsigned)
                assert '"entityId": "user#1001"' in done.stdout, done.stdout
        # "and http://127.0.0.1:4566/console shows the executions"
        with urllib.request.urlopen(f"{url}/console/executions", timeout=60) as page:
            assert page.status == 200 and "user#1001" in page.read().decode("utf-8")
    finally:
        serve.send_signal(signal.SIGINT)  # Ctrl-C
        try:
            stopped = serve.wait(timeout=30)
        except subprocess.TimeoutExpired:
            serve.kill()
            raise
    assert stopped == 0, serve.stdout.read()[-2000:]

    # what the tour wrote is in the newcomer's home, and the checkout is as it was
    assert {p.name for p in (tmp_path / "home").iterdir()} >= {"digest.json", "proof.json"}
    left = subprocess.run(["git", "status", "--porcelain", "--untracked-files=all"], cwd=checkout, check=True,
                          capture_output=True, text=True).stdout
    assert left == "", f"the tour left files in the checkout:\n{left}"
