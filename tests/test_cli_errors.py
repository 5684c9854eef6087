"""Issue 26.9, the command line's part: what a user can type wrong is a one-line error with the documented
exit status (2: bad command line or file), never a traceback: an endpoint that is not a URL, a time scale
that is not a finite number, a command that needs the project run outside it."""

from __future__ import annotations

import pytest

from changeflow.cli import main

BAD_ENDPOINTS = ["notaurl", "http://[::1", "http://127.0.0.1:99999", "ftp://127.0.0.1:4566", "http://", "http:///x",
                 "127.0.0.1:4566"]
REMOTE_COMMANDS = [["versions", "doc#1"], ["history", "doc#1"], ["executions"], ["verify", "doc#1"],
                   ["repair", "doc#1"], ["digest", "--all"], ["submit", "events/workflow/put.json"], ["console"],
                   ["local", "invoke", "FetchLatestFunction"]]


def one_line_usage_error(capsys, argv) -> str:
    with pytest.raises(SystemExit) as exited:
        main(argv)
    err = capsys.readouterr().err
    assert exited.value.code == 2, err
    assert "Traceback" not in err
    return err.strip().splitlines()[-1]


@pytest.mark.parametrize("endpoint", BAD_ENDPOINTS)
def test_an_endpoint_that_is_not_an_http_url_is_a_one_line_usage_error_for_every_command(capsys, endpoint):
    for command in REMOTE_COMMANDS:
        line = one_line_usage_error(capsys, [*command, "--endpoint-url", endpoint])
        assert "argument --endpoint-url:" in line and repr(endpoint) in line, (command, line)


@pytest.mark.parametrize("scale", ["inf", "-inf", "nan", "1e300", "-1", "x"])
def test_a_time_scale_that_is_not_a_finite_factor_is_a_one_line_usage_error(capsys, scale):
    for command in (["run", "events/workflow/put.json"], ["serve"]):
        line = one_line_usage_error(capsys, [*command, "--time-scale", scale])
        assert "argument --time-scale:" in line, (command, line)


def test_the_time_scales_in_range_are_still_accepted(capsys):
    from changeflow.commands.options import FACTOR

    assert [FACTOR(text) for text in ("0", "0.001", "1", "1000")] == [0.0, 0.001, 1.0, 1000.0]


PROJECT_COMMANDS = [["run", "put.json"], ["demo"], ["serve"], ["local", "invoke", "FetchLatestFunction"]]


@pytest.mark.parametrize("command", PROJECT_COMMANDS, ids=lambda c: " ".join(c[:2]))
def test_a_command_that_needs_the_project_run_outside_it_is_a_one_line_error(capsys, monkeypatch, tmp_path, command):
    # GIVEN a directory with no template.yaml in it or above it, and no CHANGEFLOW_ROOT
    (tmp_path / "put.json").write_text('{"entityId": "e", "operation": "delete"}')
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("CHANGEFLOW_ROOT", raising=False)
    assert main(command) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.count("\n") == 1
    assert err.startswith("changeflow: no template.yaml in ") and "CHANGEFLOW_ROOT" in err
    # AND with CHANGEFLOW_ROOT naming a directory that is not the project: the same, naming it
    monkeypatch.setenv("CHANGEFLOW_ROOT", str(tmp_path))
    assert main(command) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "CHANGEFLOW_ROOT" in err and "holds no template.yaml" in err
