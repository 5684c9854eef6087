"""make test's runner (tests/run_files.py) beside another run of itself in the same checkout (issue 38.2): two
`make test` at once keep their own logs and both their job times, and a reader of the times file never sees
half of it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import run_files
from conftest import ROOT


def test_two_runs_at_once_keep_their_own_logs_and_both_their_times(tmp_path):
    # GIVEN two small test files, and one build directory for both runs
    for name, outcome in (("test_one.py", "assert True"), ("test_two.py", "assert 1 + 1 == 2")):
        (tmp_path / name).write_text(f"def test_{name[5:-3]}():\n    {outcome}\n", encoding="utf-8")
    build = tmp_path / "build"
    # WHEN two runs start at once, each with its own file
    runs = [subprocess.Popen([sys.executable, str(ROOT / "tests" / "run_files.py"), "--jobs", "1", "--build-dir",
                              str(build), str(tmp_path / name)], cwd=ROOT, stdout=subprocess.PIPE,
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


def test_a_hung_job_is_killed_and_reported_failed_with_its_stacks(tmp_path, monkeypatch):
    # GIVEN a test that never ends (a deadlock, as a fresh clone's run met), and short limits
    (tmp_path / "test_hang.py").write_text("import threading\n\ndef test_hang():\n    threading.Event().wait()\n",
                                           encoding="utf-8")
    monkeypatch.setattr(run_files, "HANG_DUMP_SECONDS", 2)
    monkeypatch.setattr(run_files, "JOB_TIMEOUT_SECONDS", 8)
    job = run_files.pytest_job(str(tmp_path / "test_hang.py"), seed=1)
    job.logs = tmp_path
    # WHEN the runner runs it
    done = run_files.run(job)
    # THEN it is killed and failed, and its log has the stack it hung in and says what happened
    log = done.log.read_text(encoding="utf-8")
    assert done.status == 124 and done.seconds < 60
    assert "Timeout (0:00:02)!" in log and "test_hang" in log and "killed after 8 s" in log
