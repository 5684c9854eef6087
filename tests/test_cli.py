"""The command line as a user meets it: `changeflow run` (report, --json, --concurrency, --param, exit
status) and `changeflow serve` started as a process, used, and stopped."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

from changeflow.cli import main
from conftest import EVENTS, ROOT

WORKFLOW = EVENTS / "workflow"


def run_json(capsys, *args):
    status = main(["run", *map(str, args), "--json"])
    out = capsys.readouterr().out
    return status, json.loads(out)  # exactly one JSON document on stdout


def test_run_json_reports_executions_and_entity_versions(capsys):
    files = [WORKFLOW / n for n in ("01-create.json", "02-update.json", "03-stale.json", "06-delete.json")]
    status, doc = run_json(capsys, *files)
    assert status == 0
    assert set(doc) == {"executions", "entities"}
    assert [e["status"] for e in doc["executions"]] == ["SUCCEEDED"] * 4
    assert [e["output"]["outcome"] for e in doc["executions"]] == ["applied", "applied", "stale", "applied"]
    assert set(doc["executions"][0]) == {"name", "status", "input", "output", "error", "cause"}
    entity = doc["entities"]["doc#42"]
    assert entity["latest"]["deleted"] is True and entity["latest"]["version"] == 3
    assert isinstance(entity["latest"]["expiresAt"], int)
    versions = entity["versions"]
    assert [v["version"] for v in versions] == [1, 2, 3]
    assert versions[0]["attributes"] == {"title": "Quarterly report", "status": "draft", "pages": 12}
    assert {"version", "deleted", "effectiveAt", "expiresAt", "changeId", "operation", "attributes"} <= set(versions[0])
    assert '"S"' not in json.dumps(doc)  # plain JSON, no DynamoDB type descriptors


def test_run_accepts_arrays_and_runs_them_concurrently(capsys):
    status, doc = run_json(capsys, WORKFLOW / "05-race.json", "--concurrency", "2")
    assert status == 0
    assert sorted(e["output"]["version"] for e in doc["executions"]) == [1, 2]


def test_run_with_a_named_failure_still_exits_zero(capsys):
    status, doc = run_json(capsys, WORKFLOW / "01-create.json", WORKFLOW / "10-invalid.json")
    assert status == 0
    assert doc["executions"][1]["status"] == "FAILED" and doc["executions"][1]["error"] == "ValidationError"


def test_run_param_overrides_a_template_parameter(capsys):
    files = [WORKFLOW / n for n in ("01-create.json", "02-update.json", "08-revive.json")]
    status, doc = run_json(capsys, *files, "--param", "HistoryRetentionVersions=1")
    assert status == 0
    expiries = [v["expiresAt"] for v in doc["entities"]["doc#42"]["versions"]]
    assert expiries[0] is not None and expiries[1] is not None and expiries[2] is None


def test_run_refuses_a_file_that_is_not_json_and_names_it(tmp_path, capsys):
    bad = tmp_path / "broken.json"
    bad.write_text("{not json")
    assert main(["run", str(WORKFLOW / "01-create.json"), str(bad)]) == 2
    err = capsys.readouterr().err
    assert "broken.json" in err and "not valid JSON" in err


def test_run_refuses_an_unknown_parameter(capsys):
    assert main(["run", str(WORKFLOW / "01-create.json"), "--param", "Nope=1"]) != 0
    assert "Nope" in capsys.readouterr().err


def test_run_prints_a_readable_report_with_version_tables(capsys):
    assert main(["run", str(WORKFLOW / "01-create.json"), str(WORKFLOW / "02-update.json")]) == 0
    out = capsys.readouterr().out
    assert "execution" in out and "applied" in out
    assert "entity doc#42: v0 = version 2 (live" in out
    assert "chg-0001" in out and "chg-0002" in out


def test_python_dash_m_and_console_script_agree():
    env = {**os.environ, "PYTHONPATH": ""}
    for command in ([sys.executable, "-m", "changeflow", "--help"], [str(ROOT / ".venv" / "bin" / "changeflow"), "--help"]):
        if not os.path.exists(command[0]):
            pytest.skip("console script not installed (run make setup)")
        result = subprocess.run(command, capture_output=True, text=True, env=env, cwd=ROOT, timeout=60)
        assert result.returncode == 0 and "run" in result.stdout and "serve" in result.stdout


@pytest.mark.enable_socket
def test_serve_runs_until_stopped_and_answers_the_cli(tmp_path):
    process = subprocess.Popen([sys.executable, "-m", "changeflow", "serve", "--port", "0", "--time-scale", "0.001"],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT)
    try:
        first = process.stdout.readline()
        assert first.startswith("changeflow serve: http://127.0.0.1:"), first
        url = first.split()[2]
        result = subprocess.run([sys.executable, "-m", "changeflow", "submit", str(WORKFLOW / "put.json"),
                                 "--endpoint-url", url, "--json"], capture_output=True, text=True, cwd=ROOT,
                                timeout=120)
        assert result.returncode == 0, result.stderr
        assert json.loads(result.stdout)["output"]["outcome"] == "applied"
    finally:
        process.send_signal(signal.SIGTERM)
        out, _ = process.communicate(timeout=30)
    assert process.returncode == 0 and "stopped" in out


def _run_on_a_terminal(args):
    """Run the CLI with stderr on a pseudo-terminal; return (exit status, stdout, what the terminal showed)."""
    import fcntl
    import pty
    import struct
    import termios

    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))  # a terminal has a size
    process = subprocess.Popen([sys.executable, "-m", "changeflow", *args], stdout=subprocess.PIPE, stderr=follower,
                               cwd=ROOT, env={**os.environ, "COLUMNS": "100"})
    os.close(follower)
    shown = b""
    while True:
        try:
            chunk = os.read(leader, 4096)
        except OSError:
            break
        if not chunk:
            break
        shown += chunk
    out = process.stdout.read().decode()
    process.wait(timeout=120)
    os.close(leader)
    return process.returncode, out, shown.decode("utf-8", "replace")


def test_progress_is_shown_on_a_terminal_and_not_with_json():
    files = [str(WORKFLOW / n) for n in ("01-create.json", "02-update.json", "03-stale.json", "05-race.json")]
    status, out, terminal = _run_on_a_terminal(["run", *files, "--concurrency", "2"])
    assert status == 0 and "0/5" in terminal and "change/s" in terminal  # a bar, cleared at the end
    status, out, terminal = _run_on_a_terminal(["run", *files, "--json"])
    assert status == 0 and "/5" not in terminal
    json.loads(out)


@pytest.mark.enable_socket
def test_a_command_against_no_endpoint_says_so_in_one_line(capsys):
    # nothing listens on this port: a one-line error and exit 1, not a traceback
    assert main(["versions", "x", "--endpoint-url", "http://127.0.0.1:9"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("changeflow: ") and "Traceback" not in err and len(err.strip().splitlines()) == 1
