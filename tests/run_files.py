"""``make test``'s runner: every test file in its own process, ``--jobs`` at a time, each in a random order.

Each file alone in a fresh process is the check that a file does not need another file's fixtures, imports
or leftovers (it was CI's second pass, ``make test-files``, a second run of the whole suite); running the
files side by side is also what uses the machine's cores. Beside the files run the workflow
suite again with every handler in the Lambda runtime (``CHANGEFLOW_LAMBDA_RUNTIME=emulator``) and the
second interpreter's opinion on the ASL (``make diff-asl``): one pool of jobs, the longest first (from the
last run's times in ``build/test-times.json``, else those checked in, ``tests/job_times.json``), so that the
cores finish together.

A test file's process is forked from a fork server (``tests/fork_server.py``) that has imported pytest,
boto3, moto and the project once: a fresh child per file, in its own process group, that has run no other
file (``--no-fork``: each a new interpreter, as before). The emulator's workflow suite is forked too (its
environment set in the child before pytest starts); ``make diff-asl`` runs on its own python3.13.

The seed is printed first; ``--seed N`` replays every file's order, and the line printed for a failed
job replays that job alone. A job's output is shown when it fails; every job's is kept in a directory of
its run, ``build/test-logs/<start>-<pid>/`` (``build/test-logs/latest`` names the newest; the last
``KEEP_RUNS`` are kept). Two runs at once in one checkout (``make test`` beside ``make test``) share
nothing they write: each has its own logs, and each merges its times into ``build/test-times.json``
under a lock, the file replaced whole.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import random
import re
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import fork_server

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(os.environ.get("CHANGEFLOW_BIN", ROOT / ".venv" / "bin"))
BUILD = ROOT / "build"
TIMES = BUILD / "test-times.json"
# Each job's time in a run of make test, checked in: the order of a checkout that has no times of its own (a
# fresh clone, CI). Without it every job counted as long alike, the files ran in name order and the two
# longest jobs, the emulator's suite and make diff-asl, last: a fresh clone's run ended with a minute of one
# job on two cores (2026-11-26). Refreshed by copying build/test-times.json over it when the order drifts.
CHECKED_IN_TIMES = Path(__file__).resolve().parent / "job_times.json"
LOGS = BUILD / "test-logs"
KEEP_RUNS = 5
# The workflow suite in the Lambda runtime: every Lambda task of the state machine, on every path. The patch
# suite's second run in the runtime was cut from make test (21 CPU s, 2026-11-26): its API and events tests
# reach submit_change and read_api, which tests/test_runtime.py already runs in the emulator with every
# function's events/ payloads, and its merge code is the layer the workflow suite imports there on 3.13.
# `make test-emulator` still runs it.
EMULATOR_FILES = ["tests/test_workflow.py"]
# A job that hangs (a deadlock) is stopped, not left to CI's 90 minutes: each test that runs past
# HANG_DUMP_SECONDS has every thread's stack written to its log (pytest's faulthandler_timeout), and a job past
# JOB_TIMEOUT_SECONDS is killed (a forked one with its process group: its own children too) and reported
# failed. The longest job takes about 90 s with a second suite beside it.
HANG_DUMP_SECONDS = 300
JOB_TIMEOUT_SECONDS = 1200


@dataclass
class Job:
    name: str
    command: list[str]
    env: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0
    status: int | None = None
    cpu: float = 0.0  # user + system seconds, its children's included
    summary: str = ""
    forked: bool = False  # run by the fork server (a pytest job) rather than as a process of its own
    logs: Path = LOGS  # its run's directory (run_directory)

    @property
    def log(self) -> Path:
        return self.logs / (re.sub(r"[^\w.-]+", "_", self.name) + ".log")

    def replay(self) -> str:
        env = " ".join(f"{k}={v}" for k, v in self.env.items())
        return (env + " " if env else "") + " ".join(str(part) for part in self.command)


def pytest_job(path: str, seed: int, emulator: bool = False) -> Job:
    command = [str(BIN / "pytest"), "-q", "-p", "no:cacheprovider", "--durations=10", "--random-order",
               f"--random-order-seed={seed}", "-o", f"faulthandler_timeout={HANG_DUMP_SECONDS}", path]
    if emulator:
        return Job(f"{path} (emulator)", command, {"CHANGEFLOW_LAMBDA_RUNTIME": "emulator"}, forked=True)
    return Job(path, command, forked=True)


def jobs_for(files: list[str], seed: int, extras: bool) -> list[Job]:
    jobs = [pytest_job(path, seed) for path in files]
    if extras:
        jobs += [pytest_job(path, seed, emulator=True) for path in EMULATOR_FILES]
        jobs.append(Job("make diff-asl", ["make", "--no-print-directory", "diff-asl"]))
    return jobs


def run_directory(logs: Path = LOGS, keep: int = KEEP_RUNS) -> Path:
    """A new directory for this run's logs, ``<UTC start>-<pid>`` (no other run, at once or later, has its
    name); ``latest`` is made to name it (a symlink, replaced whole), and all but the newest ``keep`` runs'
    directories are removed (a run still going is among the newest)."""
    here = logs / (time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + f"-{os.getpid()}")
    here.mkdir(parents=True)
    link = logs / f".latest-{os.getpid()}"
    link.unlink(missing_ok=True)
    link.symlink_to(here.name)
    os.replace(link, logs / "latest")
    runs = sorted((d for d in logs.iterdir() if d.is_dir() and not d.is_symlink() and re.fullmatch(r"\d{8}T\d{6}Z-\d+", d.name)),
                  key=lambda d: d.name)
    for old in runs[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return here


def read_times(path: Path = TIMES) -> dict[str, float]:
    """The last known time of each job (none if the file is missing or not JSON)."""
    try:
        known = json.loads(path.read_text(encoding="utf-8"))
    except (FileNotFoundError, ValueError):
        return {}
    return known if isinstance(known, dict) else {}


def record_times(measured: dict[str, float], path: Path = TIMES) -> None:
    """Merge ``measured`` into the times file: under an exclusive lock (another run at once adds its own
    times, none lost), written to a file of this process and renamed over the old one (a reader never sees
    half a file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(path.name + ".lock"), "a", encoding="utf-8") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        merged = {**read_times(path), **measured}
        written = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        written.write_text(json.dumps(merged, indent=1, sort_keys=True) + "\n", encoding="utf-8")
        os.replace(written, path)


def shown(path: Path) -> str:
    """A path as the project's own (relative to it), or whole when it is elsewhere."""
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def run(job: Job, server: fork_server.Client | None = None) -> Job:
    """Run ``job``: forked from ``server`` if given (a pytest job), otherwise as a process of its own."""
    started = time.monotonic()
    if server is not None and job.forked:
        status, job.cpu, killed = server.run(job.command, job.env, job.log, JOB_TIMEOUT_SECONDS)
        job.status = 125 if status is None else status
    else:
        with open(job.log, "w", encoding="utf-8") as out:
            job.status, job.cpu, killed = spawned(job, out)
    with open(job.log, "a", encoding="utf-8") as out:
        if killed:
            job.status = 124
            out.write(f"\nkilled after {JOB_TIMEOUT_SECONDS} s: the job hung (the stacks above, if a test ran "
                      f"past {HANG_DUMP_SECONDS} s)\n")
        elif job.status == 125:
            out.write("\nthe fork server ended before this job did (its error is in make test's output)\n")
    job.seconds = time.monotonic() - started
    lines = [line for line in job.log.read_text(encoding="utf-8", errors="replace").splitlines() if line.strip()]
    job.summary = lines[-1].strip("= ") if lines else ""
    mark = "ok    " if job.status == 0 else "FAILED"
    print(f"{job.seconds:7.1f} s {job.cpu:6.1f} CPU s  {mark}  {job.name}  ({job.summary})", flush=True)
    return job


def spawned(job: Job, out) -> tuple[int, float, bool]:
    """``job`` as a process of its own, its output in ``out``: ``(status, CPU seconds, killed at the
    timeout)``, the CPU its own and its reaped children's (wait4's)."""
    process = subprocess.Popen(job.command, cwd=ROOT, env={**os.environ, **job.env}, stdout=out,
                               stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    deadline = time.monotonic() + JOB_TIMEOUT_SECONDS
    killed = False
    while True:
        pid, status, usage = os.wait4(process.pid, 0 if killed else os.WNOHANG)
        if pid:
            break
        if time.monotonic() > deadline:
            process.kill()
            killed = True
        time.sleep(0.2)
    process.returncode = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
    return process.returncode, usage.ru_utime + usage.ru_stime, killed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="*", help="test files (default: every tests/test_*.py)")
    parser.add_argument("--jobs", type=int, default=3,
                        help="jobs at once (default %(default)s: 2 cores, each job waiting part of its time)")
    parser.add_argument("--seed", type=int, default=None, help="the random order's seed (default: a new one)")
    parser.add_argument("--no-extras", action="store_true",
                        help="only the test files: not the emulator suites, not make diff-asl")
    parser.add_argument("--no-fork", action="store_true",
                        help="start each pytest job as a process of its own, not forked from the fork server")
    parser.add_argument("--build-dir", type=Path, default=BUILD,
                        help="where the logs and the times go (default %(default)s)")
    args = parser.parse_args(argv)
    seed = args.seed if args.seed is not None else random.randrange(1, 10**6)
    files = args.files or sorted(str(p.relative_to(ROOT)) for p in (ROOT / "tests").glob("test_*.py"))
    jobs = jobs_for(files, seed, extras=not args.no_extras and not args.files)
    times = args.build_dir / TIMES.name
    known = {**read_times(CHECKED_IN_TIMES), **read_times(times)}
    # the longest first (a job timed nowhere counts as long): the cores then finish at about the same time
    jobs.sort(key=lambda job: -known.get(job.name, 60.0))
    logs = run_directory(args.build_dir / LOGS.name)
    for job in jobs:
        job.logs = logs
    print(f"changeflow tests: {len(jobs)} jobs, {args.jobs} at a time, random order seed {seed} "
          f"(replay: --seed {seed}); logs in {shown(logs)}/", flush=True)
    started = time.monotonic()
    server = None if args.no_fork else fork_server.Client()
    pool = ThreadPoolExecutor(max_workers=args.jobs)
    try:
        done = list(pool.map(lambda job: run(job, server), jobs))
    finally:  # an interrupted run too: no job starts, and the server kills the children still running
        pool.shutdown(wait=False, cancel_futures=True)
        if server is not None:
            server.close()
    record_times({job.name: round(job.seconds, 1) for job in done}, times)
    failed = [job for job in done if job.status != 0]
    for job in failed:
        print(f"\n==== {job.name} failed; its output ({shown(job.log)}):")
        print(job.log.read_text(encoding="utf-8", errors="replace")[-20000:])
        print(f"replay it: {job.replay()}")
    print(f"\nchangeflow tests: {len(done) - len(failed)} of {len(done)} jobs passed in "
          f"{time.monotonic() - started:.0f} s, {sum(job.cpu for job in done):.0f} CPU s (seed {seed})" + (f"; FAILED: {', '.join(j.name for j in failed)}"
                                                                  if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
