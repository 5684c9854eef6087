"""make test's runner (tests/run_files.py) beside another run of itself in the same checkout (issue 38.2): two
`make test` at once keep their own logs and both their job times, and a reader of the times file never sees
half of it. Its fork server (tests/fork_server.py): a failing file fails with a replay line that is pytest
itself, no file sees another's leftovers, and a hung file is killed with its children."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import fork_server
import pytest
import run_files
from conftest import ROOT


def test_two_runs_at_once_keep_their_own_logs_and_both_their_times(tmp_path):
    # GIVEN two small test files, and one build directory for both runs
    for name, outcome in (("test_one.py", "assert True"), ("test_two.py", "assert 1 + 1 == 2")):
        (tmp_path / name).write_text(f"def test_{name[5:-3]}():\n    {outcome}\n", encoding="utf-8")
    build = tmp_path / "build"
    # WHEN two runs start at once, each with its own file (each job a process of its own: how a job runs is
    # the fork server tests' below)
    runs = [subprocess.Popen([sys.executable, str(ROOT / "tests" / "run_files.py"), "--jobs", "1", "--no-fork",
                              "--build-dir", str(build), str(tmp_path / name)], cwd=ROOT, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True, stdin=subprocess.DEVNULL)
            for name in ("test_one.py", "test_two.py")]
    outputs = [run.communicate(timeout=300)[0] for run in runs]
    # THEN both pass, each with its own log directory holding its own job's log
    assert [run.returncode for run in runs] == [0, 0], outputs
    directories = sorted(d for d in (build / "test-logs").iterdir() if not d.is_symlink())
    assert len(directories) == 2
    assert sorted(log.name for d in directories for log in d.iterdir()) == sorted(
        run_files.Job(str(tmp_path / name), []).log.name for name in ("test_one.py", "test_two.py"))
    assert (build / "test-logs" / "latest").resolve() in {d.resolve() for d in directories}
    # AND the times file holds both runs' jobs
    times = json.loads((build / "test-times.json").read_text(encoding="utf-8"))
    assert {str(tmp_path / "test_one.py"), str(tmp_path / "test_two.py")} <= set(times)


def test_recorded_times_merge_under_a_lock_and_none_is_lost(tmp_path):
    # GIVEN a times file that four processes update at once, many times each
    path = tmp_path / "test-times.json"
    script = ("import sys, run_files\n"
              "from pathlib import Path\n"
              "for i in range(40):\n"
              "    run_files.record_times({f'{sys.argv[1]}-{i}': float(i)}, Path(sys.argv[2]))\n"
              "    assert isinstance(run_files.read_times(Path(sys.argv[2])), dict)\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT / "tests")}
    writers = [subprocess.Popen([sys.executable, "-c", script, f"w{n}", str(path)], env=env) for n in range(4)]
    assert [w.wait(timeout=120) for w in writers] == [0] * 4
    # THEN every entry of every writer is there, and nothing is left beside the file but its lock
    assert set(run_files.read_times(path)) == {f"w{n}-{i}" for n in range(4) for i in range(40)}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["test-times.json", "test-times.json.lock"]


def test_a_times_file_that_is_not_json_counts_as_no_times(tmp_path):
    (tmp_path / "test-times.json").write_text('{"tests/test_a.py": 1', encoding="utf-8")
    assert run_files.read_times(tmp_path / "test-times.json") == {}
    assert run_files.read_times(tmp_path / "missing.json") == {}


def test_only_the_newest_runs_logs_are_kept(tmp_path, monkeypatch):
    logs = tmp_path / "test-logs"
    for n in range(7):  # older runs, named as run_directory names them
        (logs / f"2026010{n}T000000Z-{100 + n}").mkdir(parents=True)
    (logs / "notes").mkdir()  # not a run's directory: left alone
    made = run_files.run_directory(logs, keep=3)
    kept = sorted(d.name for d in logs.iterdir() if d.is_dir() and not d.is_symlink())
    assert kept == ["20260105T000000Z-105", "20260106T000000Z-106", made.name, "notes"]
    assert (logs / "latest").resolve() == made.resolve() and Path(os.readlink(logs / "latest")) == Path(made.name)


@pytest.fixture(scope="module")
def server():
    """make test's fork server (tests/fork_server.py), one for this file's tests."""
    started = fork_server.Client()
    yield started
    started.close()


def forked_job(path: Path, logs: Path) -> run_files.Job:
    job = run_files.pytest_job(str(path), seed=1)
    job.logs = logs
    return job


def test_a_failing_file_is_reported_failed_with_a_plain_pytest_replay_line(tmp_path, server, capsys):
    # GIVEN a file with a failing test
    (tmp_path / "test_fails.py").write_text("def test_fails():\n    assert 1 + 1 == 3\n", encoding="utf-8")
    job = forked_job(tmp_path / "test_fails.py", tmp_path)
    # WHEN the fork server runs it
    done = run_files.run(job, server)
    # THEN it failed as pytest fails it, its log has pytest's report, and its replay is pytest itself
    assert done.status == 1 and done.cpu > 0
    assert "assert (1 + 1) == 3" in done.log.read_text(encoding="utf-8")  # the assert rewritten, as pytest does
    assert done.replay().split()[0] == str(run_files.BIN / "pytest") and done.replay().endswith("test_fails.py")
    assert "FAILED  " in capsys.readouterr().out
    replayed = subprocess.run(done.replay().split(), cwd=ROOT, capture_output=True, text=True)
    assert replayed.returncode == 1 and "1 failed" in replayed.stdout


def test_no_file_sees_what_another_file_left_in_its_process(tmp_path, server):
    # GIVEN two files: one changes a module that both import, the environment and the working directory;
    # the other passes only if it finds none of that
    (tmp_path / "test_leaves.py").write_text(
        "import os, json\n\ndef test_leaves(tmp_path):\n    json.LEFT = 1\n    os.environ['LEFT'] = '1'\n"
        "    os.chdir(tmp_path)\n", encoding="utf-8")
    (tmp_path / "test_finds.py").write_text(
        "import os, json, sys\n\ndef test_finds():\n    assert not hasattr(json, 'LEFT') and 'LEFT' not in os.environ\n"
        f"    assert os.getcwd() == {str(ROOT)!r} and 'test_leaves' not in sys.modules\n", encoding="utf-8")
    # WHEN the server runs one after the other, in either order
    for order in (("test_leaves.py", "test_finds.py"), ("test_finds.py", "test_leaves.py")):
        done = [run_files.run(forked_job(tmp_path / name, tmp_path), server) for name in order]
        # THEN both pass
        assert [job.status for job in done] == [0, 0], [job.log.read_text(encoding="utf-8") for job in done]


def test_each_file_has_a_process_and_group_of_its_own_and_no_stdin(tmp_path, server):
    (tmp_path / "test_alone.py").write_text(
        "import os, threading\n\ndef test_alone():\n"
        f"    assert os.getpid() == os.getpgrp() != {os.getpgrp()} and os.read(0, 1) == b''\n"
        "    assert threading.active_count() == 1\n", encoding="utf-8")
    done = run_files.run(forked_job(tmp_path / "test_alone.py", tmp_path), server)
    assert done.status == 0, done.log.read_text(encoding="utf-8")


def killed_after_start(monkeypatch, make_job, server, started: Path, lead_s: float = 0.0):
    """Run a job that never ends until it is killed at the runner's time limit, with the limit raised while the
    job was killed before its test had run ``lead_s`` seconds (``started``: the monotonic time its test body
    began, written by the test). Alone the first limit, 8 s, is plenty; `make test` beside another run (six
    jobs on two cores, 2026-11-26) took longer than that to start a job: the kill then said nothing either way."""
    for limit in (8, 20, 60):
        monkeypatch.setattr(run_files, "JOB_TIMEOUT_SECONDS", limit)
        started.unlink(missing_ok=True)
        began = time.monotonic()
        done = run_files.run(make_job(), server)
        if started.exists() and began + done.seconds - float(started.read_text()) >= lead_s:
            return done
    pytest.fail(f"the job's test never ran {lead_s} s before its kill, even with a limit of {limit} s")


@pytest.mark.parametrize("forked", [False, True], ids=["own process", "fork server"])
def test_a_hung_job_is_killed_and_reported_failed_with_its_stacks(tmp_path, monkeypatch, server, forked):
    # GIVEN a test that never ends (a deadlock, as a fresh clone's run met), and short limits
    started = tmp_path / "started"
    (tmp_path / "test_hang.py").write_text(
        "import threading, time\n\ndef test_hang():\n"
        f"    open({str(started)!r}, 'w').write(str(time.monotonic()))\n    threading.Event().wait()\n",
        encoding="utf-8")
    monkeypatch.setattr(run_files, "HANG_DUMP_SECONDS", 2)

    def job():
        made = run_files.pytest_job(str(tmp_path / "test_hang.py"), seed=1)
        made.logs = tmp_path
        return made
    # WHEN the runner runs it (and its test has run past the 2 s stack dump when it is killed)
    done = killed_after_start(monkeypatch, job, server if forked else None, started, lead_s=3)
    # THEN it is killed and failed, and its log has the stack it hung in and says what happened
    log = done.log.read_text(encoding="utf-8")
    assert done.status == 124 and done.seconds < 90
    limit = run_files.JOB_TIMEOUT_SECONDS
    assert "Timeout (0:00:02)!" in log and "test_hang" in log and f"killed after {limit} s" in log


def test_a_killed_forked_job_takes_its_children_with_it(tmp_path, monkeypatch, server):
    # GIVEN a test that starts a process of its own and then hangs
    pid_file, started = tmp_path / "child.pid", tmp_path / "started"
    (tmp_path / "test_spawns.py").write_text(
        "import subprocess, threading, time\n\ndef test_spawns():\n"
        f"    child = subprocess.Popen(['sleep', '600'])\n    open({str(pid_file)!r}, 'w').write(str(child.pid))\n"
        f"    open({str(started)!r}, 'w').write(str(time.monotonic()))\n    threading.Event().wait()\n",
        encoding="utf-8")
    # WHEN the job is killed at its time limit, after it spawned its child
    done = killed_after_start(monkeypatch, lambda: forked_job(tmp_path / "test_spawns.py", tmp_path), server, started)
    # THEN its child was killed with it (the job's process group), not left running
    assert done.status == 124
    pid = int(pid_file.read_text())
    for _ in range(50):
        if not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split()[2]:
            break
        time.sleep(0.1)
    else:
        raise AssertionError(f"the job's child {pid} outlived the job")


@pytest.mark.parametrize("forked", [False, True], ids=["own process", "fork server"])
def test_a_forked_files_stacks_find_their_state_machines_parsed(tmp_path, server, forked):
    """The fork server parses the state machines a new embedded stack creates (``warm_definitions``), once for
    every file, where each file's first stack parsed them (0.2 CPU s); a file of its own process still does."""
    # GIVEN a file that asks whether moto's parse of a new stack's state machines is there before any stack
    (tmp_path / "test_parsed.py").write_text(
        "from changeflow.local.embedded import EmbeddedStack, definition_of\n"
        "from changeflow.local.moto_patches.stepfunctions import parse_cache\n\n"
        "def test_parsed():\n"
        f"    stack = EmbeddedStack({str(ROOT)!r})\n"
        "    specs = stack.template.of_type('AWS::Serverless::StateMachine').values()\n"
        "    texts = [definition_of(stack.template, stack.root, spec)[1] for spec in specs]\n"
        "    assert texts and all(text in parse_cache._PROGRAMS for text in texts)\n", encoding="utf-8")
    # WHEN the runner runs it
    done = run_files.run(forked_job(tmp_path / "test_parsed.py", tmp_path), server if forked else None)
    # THEN they are there in a file the server forked, and not in one of its own process
    assert done.status == (0 if forked else 1), done.log.read_text(encoding="utf-8")


def test_a_checkout_without_times_of_its_own_orders_the_longest_jobs_first():
    # a fresh clone has no build/test-times.json: the checked-in times order its jobs, the longest known first
    checked_in = run_files.read_times(run_files.CHECKED_IN_TIMES)
    longest = sorted(checked_in, key=lambda name: -checked_in[name])[:4]
    # (make bench's test: the emulator's suite was, until its runtimes were reused across stacks, 2026-11-26)
    assert "tests/test_make_bench.py" in longest and all(isinstance(t, float) for t in checked_in.values())
