"""The command line as a user meets it: `changeflow run` (report, --json, --concurrency, --param, exit
status) and `changeflow serve` started as a process, used, and stopped."""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import traceback

import pytest

from changeflow.cli import main
from conftest import EVENTS, ROOT

WORKFLOW = EVENTS / "workflow"


@pytest.fixture
def stack_logs(monkeypatch):
    """The function logs of the embedded stack the next ``changeflow run`` starts: ``{logical id: lines}``."""
    from changeflow.local.embedded import EmbeddedStack

    logs = {}
    stop = EmbeddedStack.stop

    def keep_logs(self):
        logs.update({f.logical_id: list(f.logs) for f in self.lambdas.functions.values()})
        return stop(self)

    monkeypatch.setattr(EmbeddedStack, "stop", keep_logs)
    return logs


def run_json(capsys, *args):
    status = main(["run", *map(str, args), "--json"])
    out = capsys.readouterr().out
    return status, json.loads(out)  # exactly one JSON document on stdout


def test_run_json_reports_executions_and_entity_versions(capsys):
    files = [WORKFLOW / n for n in ("01-create.json", "02-update.json", "03-stale.json", "07-delete.json")]
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


def test_run_time_scale_defaults(monkeypatch, tmp_path, capsys):
    """One at a time the default stays 0.001; with --concurrency above 1 it is 0.1; a given
    --time-scale always wins."""
    from changeflow.local import embedded

    scales = []
    original = embedded.EmbeddedStack.__init__

    def spy(self, *args, **kwargs):
        scales.append(kwargs.get("time_scale"))
        original(self, *args, **kwargs)

    monkeypatch.setattr(embedded.EmbeddedStack, "__init__", spy)
    for extra in ([], ["--concurrency", "2"], ["--concurrency", "2", "--time-scale", "0.5"], ["--time-scale", "0"]):
        run_json(capsys, WORKFLOW / "01-create.json", *extra)
    assert scales == [0.001, 0.1, 0.5, 0.0]


def test_run_with_a_named_failure_exits_one_and_its_cause_is_the_message(stack_logs, capsys):
    status, doc = run_json(capsys, WORKFLOW / "01-create.json", WORKFLOW / "11-invalid.json")
    assert status == 1  # the same rule as submit: a change the workflow rejected
    failed = doc["executions"][1]
    assert failed["status"] == "FAILED" and failed["error"] == "ValidationError"
    # the cause is the error message, not a JSON document with a Python stack trace and local paths
    assert failed["cause"] == "attributes: must be an object, not list"
    # the trace stays in the function's log, as the Lambda runtime logs an unhandled error
    [logged] = [line for line in stack_logs["FetchLatestFunction"] if line.startswith("[ERROR] ValidationError")]
    assert "Traceback (most recent call last)" in logged and "app.py" in logged
    assert "lambdas.py" not in logged  # the in-process dispatcher is no part of the handler's trace


def test_run_param_overrides_a_template_parameter(capsys):
    files = [WORKFLOW / n for n in ("01-create.json", "02-update.json", "09-revive.json")]
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
        banner = []
        while not (line := process.stdout.readline()).lstrip().startswith("try:"):
            banner.append(line)
        # the REST API at its local URL; not the execute-api URL the template would have on AWS
        assert any(f"{url}/v1" in line for line in banner) and not any("execute-api" in line for line in banner)
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
def test_a_command_against_no_endpoint_says_so_in_one_line(capsys, monkeypatch):
    # nothing listens on this port: a one-line error and exit 3 (could not do it), not a traceback
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")  # the same error, without botocore's back-offs first (~10 s)
    assert main(["versions", "x", "--endpoint-url", "http://127.0.0.1:9"]) == 3
    err = capsys.readouterr().err
    assert err.startswith("changeflow: ") and "Traceback" not in err and len(err.strip().splitlines()) == 1


# --- user errors: one line on stderr saying what to do, a documented exit status, never a traceback ----
def cli(capsys, *args):
    """``main(args)`` as a shell runs it: ``(exit status, stdout, stderr)``; an exception escaping main is
    the traceback a user would see, and fails the test."""
    try:
        status = main([str(a) for a in args])
    except SystemExit as exc:  # argparse: its usage line and status 2
        status = exc.code
    except Exception:  # noqa: BLE001
        pytest.fail(f"changeflow {' '.join(map(str, args))} ended with a traceback:\n{traceback.format_exc()}")
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return status, out, err


@pytest.fixture
def on_stack(stack, cf, monkeypatch):
    """The remote commands against the embedded stack (the same client code path as serve and AWS)."""
    from changeflow.client import targets

    monkeypatch.setattr(targets, "client_for", lambda args: cf)
    return cf


@pytest.fixture
def taken_port():
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        yield listener.getsockname()[1]


NOT_JSON = "{not json"


@pytest.mark.enable_socket
@pytest.mark.parametrize("args, status, says", [
    # run: files, parameters, names
    (["run", "missing.json"], 2, "missing.json: no such file"),
    (["run", "events/workflow"], 2, "is a directory"),
    (["run", "{bad}"], 2, "not valid JSON"),
    (["run", "{nested}"], 2, "not valid JSON"),  # nested past the JSON parser's depth
    (["run", WORKFLOW / "01-create.json", "--param", "x"], 2, "expected KEY=VALUE"),
    (["run", WORKFLOW / "01-create.json", "--param", "Nope=1"], 2, "Nope"),
    (["run", WORKFLOW / "01-create.json", "--history", "nope"], 2, "--history nope: no execution of this run"),
    (["run", WORKFLOW / "01-create.json", "--concurrency", "two"], 2, "'two' is not a whole number"),
    (["run", WORKFLOW / "01-create.json", "--concurrency", "0"], 2, "give a whole number 1 or more"),
    (["run", WORKFLOW / "01-create.json", "--time-scale", "-1"], 2, "give a number from 0.0 to 1000.0"),
    (["run"], 2, "required: FILE"),
    (["nope"], 2, "invalid choice"),
    # the remote commands, against a stack that answers
    (["submit", "missing.json"], 2, "no such file"),
    (["submit", "{nested}"], 2, "not valid JSON"),
    (["submit", WORKFLOW / "put.json", "--timeout", "soon"], 2, "'soon' is not a number of seconds"),
    (["submit", WORKFLOW / "put.json", "--via", "carrier-pigeon"], 2, "invalid choice"),
    (["versions", "nobody"], 1, "no such entity: 'nobody'"),
    (["history", "nope"], 1, "no such execution: 'nope'"),
    (["history", "arn:aws:states:us-east-1:123456789012:execution:changeflow-ChangeStateMachine:nope"], 1,
     "no such execution"),
    (["executions", "--limit", "0"], 2, "--limit: 0 is out of range"),
    (["verify", "doc#42"], 1, "no such entity: 'doc#42'"),
    (["verify"], 2, "one of the arguments entity --all --digests is required"),
    (["repair", "nobody"], 1, "no such entity"),
    (["repair", "nobody", "--json"], 1, "no such entity"),
    (["serve", "--param", "x"], 2, "expected KEY=VALUE"),
    (["serve", "--port", "PORT_TAKEN"], 3, "is taken"),
    (["serve", "--port", "70000"], 2, "give a port number from 0 to 65535"),
    # the other commands that serve on 127.0.0.1 say the same, before anything starts (docs/console.md)
    (["console", "--port", "PORT_TAKEN"], 3, "is taken"),
    (["console", "--port", "70000"], 2, "give a port number from 0 to 65535"),
    (["console", "--port", "-1"], 2, "give a port number from 0 to 65535"),
    (["demo", "--serve", "--port", "PORT_TAKEN"], 3, "is taken"),
])
def test_a_user_error_is_one_line_on_stderr_with_its_exit_status(request, capsys, tmp_path, monkeypatch, taken_port,
                                                                  args, status, says):
    monkeypatch.chdir(ROOT)
    if args[0] not in ("run", "serve", "demo", "nope"):  # `run` starts its own stack: one per process
        request.getfixturevalue("on_stack")
    bad = tmp_path / "bad.json"
    bad.write_text(NOT_JSON)
    nested = tmp_path / "nested.json"
    nested.write_text("[" * 5000 + "]" * 5000)
    args = [str(bad) if a == "{bad}" else str(nested) if a == "{nested}" else str(taken_port) if a == "PORT_TAKEN"
            else a for a in args]
    got, out, err = cli(capsys, *args)
    assert got == status, err
    assert says in err
    if got != 2 or not err.startswith("usage:"):  # argparse adds its usage line to its own errors
        assert err.startswith("changeflow: ") and len(err.strip().splitlines()) == 1, err
    assert out == ""  # nothing half-done on stdout


def test_stack_name_without_a_region_says_to_give_one(capsys, monkeypatch):
    monkeypatch.delenv("AWS_DEFAULT_REGION")
    monkeypatch.delenv("AWS_REGION", raising=False)
    for command in (["versions", "x"], ["history", "x"], ["executions"], ["verify", "--all"], ["repair", "x"],
                    ["submit", str(WORKFLOW / "put.json")]):
        status, out, err = cli(capsys, *command, "--stack-name", "changeflow")
        assert status == 2 and err == "changeflow: --stack-name needs a region: pass --region REGION or set AWS_REGION\n"


@pytest.mark.enable_socket
def test_the_issue_reproductions_print_no_traceback_in_a_real_process():
    # issue 13: `changeflow history nope` (ExecutionDoesNotExist) and --stack-name without a region (NoRegionError)
    from changeflow.local.server import EmbeddedServer

    env = {k: v for k, v in os.environ.items() if k not in ("AWS_DEFAULT_REGION", "AWS_REGION")}
    with EmbeddedServer(port=0, time_scale=0.001) as server:
        for args, status in ((["history", "nope", "--endpoint-url", server.url], 1),
                             (["versions", "user#1001", "--stack-name", "changeflow"], 2)):
            result = subprocess.run([sys.executable, "-m", "changeflow", *args], capture_output=True, text=True,
                                    cwd=ROOT, env=env, timeout=120)
            assert result.returncode == status and "Traceback" not in result.stderr, result.stderr
            assert len(result.stderr.strip().splitlines()) == 1 and result.stderr.startswith("changeflow: ")


# --- exit statuses: one rule, documented in every command's --help ---------------------------------
def test_run_and_submit_agree_on_a_named_failure(request, capsys):
    # GIVEN the same invalid change WHEN run (embedded, in this process) and submit (against a stack) handle it
    run_status, _, _ = cli(capsys, "run", WORKFLOW / "invalid.json")
    request.getfixturevalue("on_stack")
    submit_status, out, _ = cli(capsys, "submit", WORKFLOW / "invalid.json")
    # THEN both exit 1: the workflow rejected the change with one of its named errors
    assert run_status == submit_status == 1
    assert "ValidationError" in out


def test_submit_exit_status_follows_the_rule(on_stack, capsys):
    assert cli(capsys, "submit", WORKFLOW / "put.json")[0] == 0
    assert cli(capsys, "submit", WORKFLOW / "stale.json")[0] == 0  # stale is a success (nothing to write)
    assert cli(capsys, "submit", WORKFLOW / "rollback.json", WORKFLOW / "put.json")[0] == 0
    status, out, _ = cli(capsys, "submit", WORKFLOW / "invalid.json", WORKFLOW / "put.json", "--json")
    assert status == 1  # one rejected change among successes
    lines = [json.loads(line) for line in out.splitlines()]
    assert lines[0]["error"] == "ValidationError" and lines[0]["cause"] == "entityId: must not be empty"


def test_an_execution_that_ends_with_an_error_the_workflow_does_not_name_exits_three(capsys):
    from changeflow.commands.output import execution_status
    from changeflow.client import Execution

    def ended(status, error=None):
        return Execution(name="x", arn="arn", status=status, input={}, error=error)

    named = {"ValidationError", "NotFound"}
    assert execution_status([ended("SUCCEEDED")], named) == 0
    assert execution_status([ended("SUCCEEDED"), ended("FAILED", "NotFound")], named) == 1
    assert execution_status([ended("REFUSED", "ValidationError")], named) == 1
    assert execution_status([ended("REJECTED", "HTTP 400")], named) == 1
    assert execution_status([ended("REJECTED", "HTTP 502")], named) == 3
    assert execution_status([ended("FAILED", "States.Runtime"), ended("FAILED", "NotFound")], named) == 3
    for status in ("TIMED_OUT", "ABORTED"):
        assert execution_status([ended(status)], named) == 3
    assert "States.Runtime" in capsys.readouterr().err


def _subcommands():
    from changeflow.cli import build_parser

    parser = build_parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return parser, action.choices


def test_every_command_documents_its_exit_statuses_and_every_option(capsys):
    parser, commands = _subcommands()
    assert {"run", "demo", "serve", "submit", "versions", "history", "executions", "verify", "repair"} <= set(commands)
    assert "exit status" in parser.format_help()
    for name, sub in commands.items():
        text = sub.format_help()
        assert "exit status:" in text, name
        for status in ("0 ", "2 "):
            assert f"\n  {status}" in text, (name, status)
        assert sub.description, f"{name} has no description"
        for action in sub._actions:
            if not action.option_strings or isinstance(action, argparse._HelpAction):
                continue
            assert action.help, f"{name} {action.option_strings[0]} has no help"
            if action.default not in (None, False, [], argparse.SUPPRESS):
                assert "%(default)" in action.help or str(action.default) in action.help, \
                    f"{name} {action.option_strings[0]}: the help does not give the default"
    assert "seconds" in commands["submit"].format_help()  # --timeout's unit


def test_documented_exit_statuses_are_the_ones_main_returns():
    from changeflow.common import errors

    assert (errors.OK, errors.REJECTED, errors.USAGE, errors.FAILED) == (0, 1, 2, 3)
    _, commands = _subcommands()
    for name, sub in commands.items():  # each command's exit-status section, as its --help prints it
        codes = {int(line.split()[0]) for line in sub.epilog.splitlines()[1:] if line[2:3].isdigit()}
        assert codes <= {0, 1, 2, 3} and 0 in codes, name


# --- flags do what they say ------------------------------------------------------------------------
def test_executions_and_repair_print_json_with_json(on_stack, capsys):
    assert cli(capsys, "submit", WORKFLOW / "put.json")[0] == 0
    status, out, _ = cli(capsys, "executions", "--json")
    [execution] = json.loads(out)
    assert status == 0 and execution["status"] == "SUCCEEDED" and execution["name"].startswith("user-1001--")
    status, out, _ = cli(capsys, "repair", "user#1001", "--json")
    assert status == 0 and json.loads(out) == {"entityId": "user#1001", "repaired": [], "cannotRepair": []}


def test_run_history_with_json_includes_the_history(capsys):
    status, doc = run_json(capsys, WORKFLOW / "put.json")
    name = doc["executions"][0]["name"]
    status, doc = run_json(capsys, WORKFLOW / "put.json", "--history", name)
    assert status == 0
    types = [event["type"] for event in doc["histories"][name]]
    assert types[0] == "ExecutionStarted" and types[-1] == "ExecutionSucceeded"


# --- answers that say what is there ---------------------------------------------------------------
def test_verify_lists_the_missing_versions_in_its_summary_line(on_stack, capsys):
    for i in range(3):
        on_stack.submit({"entityId": "e", "operation": "put", "attributes": {"i": i}, "changeId": f"c{i}"})
    on_stack.dynamodb.delete_item(TableName=on_stack.history_table,
                                  Key={"pk": {"S": "e"}, "sk": {"S": "v#0000000002"}})
    status, out, _ = cli(capsys, "verify", "e")
    assert status == 1
    assert out.splitlines()[0] == "e: PROBLEMS (versions 1, 3; missing 2)"
    status, out, _ = cli(capsys, "verify", "e", "--json")
    assert json.loads(out)[0]["missing"] == [2]


def test_report_ranges_shows_gaps():
    from changeflow.report import ranges

    assert ranges([1, 2, 3]) == "1..3"
    assert ranges([5, 1, 3, 4, 9]) == "1, 3..5, 9"
    assert ranges([]) == ""


def test_security_summary_says_the_findings_are_all_in_the_skip_table():
    from changeflow.checks.security import Finding, Step, step_status

    covered = [Finding("checkov", f"CKV_{i}", "R", "m") for i in range(27)]
    step = Step("checkov", "template", findings=covered)
    assert step_status(step, []) == "27 findings, all in the skip table"
    left = Finding("checkov", "CKV_X", "R", "m")
    assert step_status(Step("c", "t", findings=covered + [left]), [left]) == "28 findings, 1 not in the skip table"
    assert step_status(Step("c", "t"), []) == "no findings"
    assert step_status(Step("c", "t", error="boom"), []) == "ERROR"


def test_a_cause_shows_as_its_message():
    from changeflow.report import error_message

    lambda_cause = json.dumps({"errorMessage": "entityId: must not be empty", "errorType": "ValidationError",
                               "stackTrace": ['  File "/var/task/app.py", line 30, in lambda_handler\n']})
    assert error_message(lambda_cause) == "entityId: must not be empty"
    assert error_message(json.dumps({"statusCode": 400, "message": "body: not JSON"})) == "body: not JSON"
    assert error_message("States.Timeout") == "States.Timeout" and error_message(None) is None
