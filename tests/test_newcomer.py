"""Issue 38.5, what a newcomer meets: every documented read of the API signed and answered (`changeflow api`,
for every id), a redaction shown as one wherever versions are shown (the version table, the read API, the
console), numbers shown as numbers, an outcome nobody knows shown as UNKNOWN, and the command line's small
promises (a closed pipe, the request limit in --help, an AWS endpoint's error, `--output -`, an import line's
error, a message column shown whole)."""

from __future__ import annotations

import html
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
import urllib.parse
from pathlib import Path

import pytest

from changeflow import cli, report
from changeflow.client import OUTCOME_UNKNOWN, Execution
from changeflow_core import validation
from conftest import ROOT, http_exchange, sigv4_headers, without_emf

pytestmark = pytest.mark.enable_socket

T0 = 1_767_139_200_000  # 2025-12-31T00:00:00Z: before the docs' as-of examples (2026-01-01)
REDACTED = "customer#7"
ODD_IDS = ["doc/1#a", "a?b=c&d", "100%", "é 中 🙂", "..", "user#1001/versions"]


def put(entity_id: str, change: str, at: int, **attributes) -> dict:
    return {"entityId": entity_id, "operation": "put", "attributes": attributes, "effectiveAt": at,
            "changeId": change, "actor": "ana@example.com", "reason": "edit"}


@pytest.fixture(scope="module")
def served():
    """``changeflow serve`` on a free port, holding user#1001 (effective before the docs' examples), an entity
    with a redacted version, and entities whose ids need encoding."""
    from decimal import Decimal

    from changeflow.client import Changeflow
    from changeflow.local.server import EmbeddedServer

    keys = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_DEFAULT_REGION", "CHANGEFLOW_ROOT",
            "AWS_CONFIG_FILE", "AWS_SHARED_CREDENTIALS_FILE", "AWS_PROFILE", "CHANGEFLOW_ENDPOINT_URL")
    saved = {k: os.environ.get(k) for k in keys}
    for key in keys:
        os.environ.pop(key, None)
    os.environ.update({"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                       "AWS_DEFAULT_REGION": "us-east-1", "CHANGEFLOW_ROOT": str(ROOT),
                       "AWS_CONFIG_FILE": os.devnull, "AWS_SHARED_CREDENTIALS_FILE": os.devnull})
    try:
        with EmbeddedServer(port=0, time_scale=0.001) as server:
            cf = Changeflow.for_embedded(server.stack)
            cf.submit(put("user#1001", "seed-1", T0, name="Ada"))
            cf.submit(put(REDACTED, "c1", T0, name="Ana", amount=Decimal("303.3")))
            cf.submit(put(REDACTED, "c2", T0 + 1, name="Ana", amount=Decimal("303.3"), ssn="123-45-6789"))
            cf.submit(put(REDACTED, "c3", T0 + 2, name="Ana", amount=Decimal("303.30")))
            redaction = cf.submit({"entityId": REDACTED, "operation": "redact", "redactVersion": 2,
                                   "reason": "GDPR erasure #12", "actor": "dpo@example.com", "changeId": "erase-2"})
            assert redaction.status == "SUCCEEDED", redaction.cause
            for i, entity_id in enumerate(ODD_IDS):
                cf.submit(put(entity_id, f"odd-{i}", T0, n=i))
            yield {"server": server, "url": server.url, "cf": cf, "redaction": redaction}
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def changeflow(capsys, served, *args: str) -> tuple[int, str, str]:
    status = cli.main([*args, "--endpoint-url", served["url"]])
    out, err = capsys.readouterr()
    return status, without_emf(out), err  # not the served stack's background functions' (conftest.without_emf)


# --- the read API, signed, for every id ---------------------------------------------------------------
def api_examples() -> list[str]:
    """The example column of docs/api.md's table of routes: each a `changeflow api` command."""
    text = (ROOT / "docs" / "api.md").read_text(encoding="utf-8")
    table = text.split("| route | what | example |", 1)[1].split("\n\n", 1)[0]
    return [row.rsplit("|", 2)[1].strip().strip("`") for row in table.splitlines()[2:]]


def test_every_example_of_the_api_page_is_a_signed_call_that_the_api_answers(served, capsys, monkeypatch):
    monkeypatch.chdir(ROOT)  # the examples name files as from the project's directory
    examples = api_examples()
    assert len(examples) == 7 and all(e.startswith("changeflow api ") for e in examples), examples
    for example in examples:
        status, out, err = changeflow(capsys, served, *shlex.split(example)[1:])
        assert status == 0 and err == "", (example, err)
        answer = json.loads(out)
        if "/changes" in example:  # POST /changes answers the execution it started
            assert answer["status"] == "RUNNING" and served["cf"].wait(answer["executionArn"]).status == "SUCCEEDED"
        else:
            assert "user#1001" in json.dumps(answer, ensure_ascii=False), (example, answer)


@pytest.mark.parametrize("entity_id", ODD_IDS)
def test_changeflow_api_reads_every_id_with_id_in_the_path(served, capsys, entity_id):
    for path in ("/entities/{id}", "/entities/{id}/versions/1", "/entities/{id}/versions?limit=1"):
        status, out, err = changeflow(capsys, served, "api", path, "--id", entity_id)
        assert status == 0, (path, err)
        answer = json.loads(out)
        found = answer["items"][0] if "items" in answer else answer
        assert found["entityId"] == entity_id and found["attributes"] == {"n": ODD_IDS.index(entity_id)}


def test_changeflow_api_says_what_is_wrong_in_one_line(served, capsys, tmp_path):
    not_json = tmp_path / "not.json"
    not_json.write_text("{not json", encoding="utf-8")
    cases = [(["api", "/entities/nobody"], 1, "changeflow: /entities/nobody answered 404: entity 'nobody' does not exist"),
             (["api", "/entities/user#1001"], 2, "percent-encode the id (/entities/user%231001)"),
             (["api", "/entities/{id}"], 2, "give the entity id with --id"),
             (["api", "entities/x"], 2, "is not a route"),
             (["api", "/entities", "--id", "x"], 2, "has none"),
             (["api", "/changes", "--data", "no-such-file.json"], 2, "no-such-file.json: cannot read it"),
             # the body is sent as it is: one that is not JSON is the API's to refuse (--help: exit 1)
             (["api", "/changes", "--data", str(not_json)], 1, "/changes answered 400"),
             # a character a URL cannot hold goes as its UTF-8 bytes percent-encoded: the API's own answer
             (["api", "/entities/user%231001/versions/²"], 1, "answered 400: version"),
             (["api", "/entities/{id}/versions/²", "--id", "user#1001"], 1, "answered 400: version"),
             (["api", "/entities/no body"], 1, "entity 'no body' does not exist")]
    for args, expected, says in cases:
        status, out, err = changeflow(capsys, served, *args)
        assert (status, out) == (expected, ""), (args, status, out, err)
        assert err.startswith("changeflow: ") and says in err and err.count("\n") == 1, (args, err)


def test_a_path_signed_without_encoding_it_again_is_refused_as_aws_refuses_it(served):
    # API Gateway checks a SigV4 signature over each path segment URI-encoded twice ("Create a canonical
    # request"): what curl --aws-sigv4 does not do. botocore's signer (changeflow api) does, and serve checks it.
    url = served["url"] + "/v1/entities/user%231001"
    assert http_exchange("GET", url)[0] == 200  # signed by botocore: the path's %23 signed as %2523
    from botocore.auth import SigV4Auth

    single = SigV4Auth._normalize_url_path
    try:  # the canonical path as sent, encoded once: a curl-style signature
        SigV4Auth._normalize_url_path = lambda self, path: path
        headers = sigv4_headers("GET", url, None, {})
    finally:
        SigV4Auth._normalize_url_path = single
    import urllib.request

    request = urllib.request.Request(url, headers=headers)
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=60)
    assert refused.value.code == 403
    curl = shutil.which("curl")
    if curl:  # the recipe the docs gave: refused for an id with '#', accepted for one without
        base = [curl, "-s", "-o", "/dev/null", "-w", "%{http_code}", "--aws-sigv4", "aws:amz:us-east-1:execute-api",
                "--user", "testing:testing"]
        assert subprocess.run(base + [url], capture_output=True, text=True).stdout == "403"
        plain = served["url"] + "/v1/entities/" + REDACTED.replace("#", "-")  # no %: signed alike, 404 not 403
        assert subprocess.run(base + [plain], capture_output=True, text=True).stdout == "404"


# --- a redaction, wherever versions are shown -----------------------------------------------------------
def test_the_version_table_shows_a_redaction_and_the_version_that_made_it(served, capsys):
    status, out, err = changeflow(capsys, served, "versions", REDACTED)
    assert status == 0, err
    rows = {int(line.split()[0]): line for line in out.splitlines()[3:]}
    assert "(redacted at version 4: content removed, hash kept)" in rows[2] and "{}" not in rows[2]
    assert " redact of v2 " in rows[4]
    assert "ssn" not in out


def test_the_version_table_reads_what_each_version_records_of_a_redaction():
    # the recorded fields alone decide (items.view: redacted, redacts), whatever a redact version holds
    views = [{"version": 1, "deleted": False, "effectiveAt": T0, "operation": "put", "changeId": "c1",
              "principal": None, "actor": None, "expiresAt": None, "attributes": {}, "redacted": True},
             {"version": 2, "deleted": False, "effectiveAt": T0, "operation": "put", "changeId": "c2",
              "principal": None, "actor": None, "expiresAt": None, "attributes": {"a": 1}},
             {"version": 3, "deleted": False, "effectiveAt": T0, "operation": "redact", "changeId": "r1",
              "principal": None, "actor": None, "expiresAt": None, "attributes": {"a": 1}, "redacts": 1},
             {"version": 4, "deleted": False, "effectiveAt": T0, "operation": "redact", "changeId": "r2",
              "principal": None, "actor": None, "expiresAt": None, "attributes": {}, "redacts": 2, "redacted": True}]
    rows = report.versions("e", {"latest": views[-1], "versions": views}).splitlines()[3:]
    assert rows[0].endswith("(redacted at version 3: content removed, hash kept)") and " put " in rows[0]
    assert rows[1].endswith('{"a":1}')  # no redacted mark recorded: its content shown, whatever redacts it
    assert " redact of v1 " in rows[2] and rows[2].endswith('{"a":1}')
    assert " redact of v2 " in rows[3] and rows[3].endswith("(no content: the redaction of version 2)")
    assert report.versions("e", {"latest": None, "versions": views[:1]}).splitlines()[3].endswith(
        "(redacted: content removed, hash kept)")  # its redaction not among the versions shown


def test_the_read_api_marks_the_redacted_version_and_the_redaction(served, capsys):
    status, out, _ = changeflow(capsys, served, "api", "/entities/{id}/versions", "--id", REDACTED)
    by_version = {v["version"]: v for v in json.loads(out)["items"]}
    assert by_version[2]["redacted"] is True and by_version[2]["attributes"] == {}
    assert by_version[4]["redacts"] == 2 and by_version[4]["operation"] == "redact"
    assert "redacted" not in by_version[1] and "redacts" not in by_version[3]
    status, out, _ = changeflow(capsys, served, "api", "/entities/{id}/versions/2", "--id", REDACTED)
    assert json.loads(out)["redacted"] is True


def console_page(served, entity_id: str) -> str:
    status, _, body = http_exchange("GET", served["url"] + "/console/entity?" + urllib.parse.urlencode({"id": entity_id}))
    assert status == 200
    return body.decode("utf-8")


def row(page: str, version: int) -> str:
    return re.search(rf'<tr id="v{version}".*?</tr>', page, re.S).group()


def test_the_console_shows_the_redaction_not_a_deletion_and_the_note_verify_prints(served, capsys):
    page = console_page(served, REDACTED)
    two, three, four = row(page, 2), row(page, 3), row(page, 4)
    assert 'class="badge redacted"' in two and "content redacted at version 4: removed, its hash kept" in two
    assert 'class="removed"' not in two and "ssn" not in page  # not the data shown deleted, nor shown at all
    assert "version 2 was redacted" in three and 'class="added"' not in three  # nor shown added back after it
    assert "redact" in four and 'href="#v2"' in four
    # the verify box says what `changeflow verify` says beside "ok": the redaction
    status, out, _ = changeflow(capsys, served, "verify", REDACTED)
    notes = [line.strip(" ·") for line in out.splitlines() if line.startswith("  · ")]
    assert status == 0 and "Verify: ok" in page and any("redacted at version 4" in n for n in notes), out
    assert re.search(r'<ul id="notes".*?</ul>', page, re.S)
    assert all(f'<li class="note">{note}</li>' in html.unescape(page) for note in notes)


def test_the_console_shows_numbers_as_numbers(served):
    page = console_page(served, REDACTED)
    content = html.unescape(re.search(r"<pre>(.*?)</pre>", row(page, 1), re.S).group(1))
    assert '"amount": 303.3' in content and '"303.3"' not in content


# --- an outcome the workflow cannot know ----------------------------------------------------------------
@pytest.fixture(scope="module")
def unknown(served):
    """A state machine beside the stack's that ends as the workflow does when it cannot know an outcome
    (the OutcomeUnknown Fail state, issue 32), read through the same client and console."""
    from changeflow.client import Changeflow
    from changeflow.console import app, data

    cf = served["cf"]
    definition = {"StartAt": "Say the outcome is unknown", "States": {"Say the outcome is unknown": {
        "Type": "Fail", "Error": OUTCOME_UNKNOWN,
        "Cause": "the v0 write may have happened: send the same change id again"}}}
    machine = cf.sfn.create_state_machine(name="unknown-outcome", definition=json.dumps(definition),
                                          roleArn="arn:aws:iam::123456789012:role/unknown")["stateMachineArn"]
    client = Changeflow(cf.sfn, cf.dynamodb, machine, cf.table, cf.history_table)
    arn = cf.sfn.start_execution(stateMachineArn=machine, name="lost-1", input="{}")["executionArn"]
    deadline = time.monotonic() + 30
    while cf.sfn.describe_execution(executionArn=arn)["status"] == "RUNNING" and time.monotonic() < deadline:
        time.sleep(0.05)
    return {"client": client, "arn": arn, "console": app.Console(data.Reader(client))}


def test_an_unknown_outcome_is_shown_unknown_never_failed(unknown, capsys, monkeypatch):
    from werkzeug.test import Client

    from changeflow.client import targets

    assert unknown["client"].sfn.describe_execution(executionArn=unknown["arn"])["status"] == "FAILED"  # AWS says
    execution = unknown["client"].wait(unknown["arn"])
    assert (execution.status, execution.error) == ("UNKNOWN", OUTCOME_UNKNOWN)
    line = report.executions([execution]).splitlines()[2]
    assert line.split()[1] == "UNKNOWN" and "send the same change id again" in line
    monkeypatch.setattr(targets, "client_for", lambda args: unknown["client"])
    assert cli.main(["executions"]) == 0
    assert capsys.readouterr().out.splitlines()[2].split()[1] == "UNKNOWN"
    browser = Client(unknown["console"])
    page = browser.get("/console/execution?name=lost-1", headers={"Host": "127.0.0.1"}).get_data(as_text=True)
    assert 'id="execution-status">UNKNOWN<' in page and "Outcome unknown" in page and "Failed:" not in page


# --- the command line's small promises ------------------------------------------------------------------
def closed_pipe(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    """``changeflow ARGS | head -0``: its standard output a pipe nobody reads any more."""
    read, write = os.pipe()
    os.close(read)
    try:
        return subprocess.run([sys.executable, "-m", "changeflow", *args], stdout=write, stderr=subprocess.PIPE,
                              cwd=cwd, text=True, timeout=120, stdin=subprocess.DEVNULL)
    finally:
        os.close(write)


@pytest.mark.parametrize("args", [["executions"], ["versions", REDACTED], ["verify", "--all"],
                                  ["export", "--all", "--output", "-"], ["api", "/entities/user%231001"],
                                  ["run", str(ROOT / "events" / "workflow" / "01-create.json")]],
                         ids=lambda a: a[0])
def test_a_closed_stdout_ends_a_command_quietly(served, args, tmp_path):
    remote = [] if args[0] == "run" else ["--endpoint-url", served["url"]]  # run starts its own stack
    done = closed_pipe([*args, *remote], tmp_path)
    assert (done.returncode, done.stderr) == (cli.CLOSED_PIPE, "")
    assert list(tmp_path.iterdir()) == []


def test_a_command_in_the_c_locale_far_from_utc_with_no_home_and_no_terminal_answers_the_same(served, tmp_path):
    # Issue 38.2: what a command prints does not depend on the terminal it was started from: the C locale (no
    # UTF-8 in LANG), a time zone 14 hours from UTC, no HOME, no TERM, no terminal at all, stdin closed
    env = {k: v for k, v in os.environ.items() if k not in ("HOME", "TERM", "LANG", "LANGUAGE", "LC_CTYPE")}
    env.update(LC_ALL="C", TZ="Pacific/Kiritimati", CHANGEFLOW_ENDPOINT_URL=served["url"])
    odd = "é 中 🙂"
    for args, expected in ((["api", "/entities/{id}", "--id", odd], f'"entityId": "{odd}"'),
                           (["versions", REDACTED, "--as-of", "2025-12-31T00:00:00.000Z"],
                            f"entity {REDACTED} as of 2025-12-31T00:00:00.000Z")):
        done = subprocess.run(["setsid", sys.executable, "-m", "changeflow", *args], cwd=tmp_path, env=env,
                              capture_output=True, timeout=120, stdin=subprocess.DEVNULL)
        out = done.stdout.decode("utf-8")
        assert done.returncode == 0 and expected in out, (args, out, done.stderr)
    assert out.splitlines()[3].split()[0] == "1" and '"amount":303.3' in out  # version 1, effective at T0


def test_no_test_listens_on_a_fixed_port_or_writes_a_fixed_tmp_name():
    # Issue 38.2: two runs of the suite at once share nothing: every server a test starts takes a free port
    # (port 0), and a file a test writes goes under its own tmp_path, never a fixed /tmp name
    import ast

    found = []
    for path in sorted((ROOT / "tests").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.keyword) and node.arg == "port" and isinstance(node.value, ast.Constant) \
                    and node.value.value not in (0, None):
                found.append(f"{path.name}:{node.lineno}: port={node.value.value}")
            if isinstance(node, (ast.List, ast.Tuple)):
                texts = [e.value if isinstance(e, ast.Constant) else None for e in node.elts]
                found += [f"{path.name}:{node.lineno}: --port {b}" for a, b in zip(texts, texts[1:])
                          if a == "--port" and b not in ("0", "PORT_TAKEN", "70000", "-1")]
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith("/tmp/") \
                    and node.value != "/tmp/":  # (this test's own pattern)
                found.append(f"{path.name}:{node.lineno}: {node.value}")
    assert found == []


def test_run_and_submit_help_give_the_request_limit_the_workflow_enforces(capsys):
    limit = f"{validation.MAX_REQUEST_BYTES // 1024} KiB"
    for command in ("run", "submit"):
        with pytest.raises(SystemExit):
            cli.main([command, "--help"])
        shown = " ".join(capsys.readouterr().out.split())
        assert f"over {limit} and never started (REFUSED)" in shown and "256 KiB" not in shown


def test_an_unreachable_endpoint_names_what_to_check_for_aws_and_for_serve():
    from botocore.exceptions import EndpointConnectionError

    parser = cli.build_parser()
    aws = parser.parse_args(["versions", "x", "--stack-name", "changeflow", "--region", "eu-west-9"])
    url = "https://cloudformation.eu-west-9.amazonaws.com/"
    message, status = cli.explain(EndpointConnectionError(endpoint_url=url), aws)
    assert status == 3 and "serve" not in message and url in message and "eu-west-9" in message
    local = parser.parse_args(["versions", "x", "--endpoint-url", "http://127.0.0.1:9"])
    message, _ = cli.explain(EndpointConnectionError(endpoint_url="http://127.0.0.1:9"), local)
    assert "is `changeflow serve` running there?" in message


def test_export_to_dash_writes_the_lines_to_stdout_and_no_file(served, capsys, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    status, out, err = changeflow(capsys, served, "export", REDACTED, "--output", "-")
    assert status == 0 and list(tmp_path.iterdir()) == []
    lines = [json.loads(line) for line in out.splitlines()]
    assert [line["version"] for line in lines] == [1, 2, 3, 4] and "to standard output" in err
    for command in (["digest", REDACTED], ["proof", REDACTED, "1", "--digest", "/dev/null"]):
        cli.main([*command, "--output", "-", "--endpoint-url", served["url"]])
        capsys.readouterr()
        assert not (tmp_path / "-").exists(), command


def test_a_rejected_import_line_names_its_column_in_that_line(tmp_path):
    from changeflow.transfer import sources

    data = tmp_path / "records.jsonl"
    data.write_text('{"id": 1}\n' * 36 + '{"id": 37,\n{"id" 38}\n', encoding="utf-8")
    bad = [r for r in sources.read(str(data)) if isinstance(r, sources.Bad)]
    assert [(b.position, b.reason) for b in bad] == [
        ("line 37", "not JSON: Expecting property name enclosed in double quotes at the end of the line"),
        ("line 38", "not JSON: Expecting ':' delimiter at column 7")]


@pytest.mark.parametrize("changed, says", [({"actor": "bob"}, "its actor differs"),
                                            ({"actor": "bob", "reason": "r"}, "its actor and reason differ")])
def test_a_checkpoint_of_another_import_says_what_differs_in_english(tmp_path, changed, says):
    from changeflow.common.errors import UsageError
    from changeflow.transfer.importer import Checkpoint

    path = tmp_path / "import.checkpoint"
    Checkpoint(path, {"source": "a.jsonl", "actor": "ana", "reason": "import"})._file.close()
    with pytest.raises(UsageError, match=says):
        Checkpoint(path, {"source": "a.jsonl", "actor": "ana", "reason": "import", **changed})


def test_a_workflow_error_is_shown_whole_in_the_message_column():
    cause = json.dumps({"errorMessage": "field 'attributes.x': " + "a long explanation of what is wrong " * 8})
    shown = report.executions([Execution("n", "arn", "FAILED", None, error="ValidationError", cause=cause)])
    assert shown.splitlines()[2].endswith(json.loads(cause)["errorMessage"].strip())
    history = report.history([{"id": 1, "type": "ExecutionFailed", "timestamp": __import__("datetime").datetime.now(),
                               "executionFailedEventDetails": {"error": "ValidationError", "cause": cause}}])
    assert json.loads(cause)["errorMessage"] in history.replace("\\'", "'")

