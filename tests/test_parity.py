"""Parity with AWS: each limit or semantic of AWS that the workflow can meet holds on the embedded stack
too (moto_patches makes moto as strict as AWS's documentation), and the template's deploy-time settings
that only AWS can exercise are pinned here. Each test names the AWS page it follows."""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
from pathlib import Path

import pytest

from changeflow.template import Template
from conftest import ROOT

LAYER = ROOT / "layers" / "core"


# --- deploy-time settings (section 3 of issue 10) -------------------------------------------------------
def test_tables_are_retained_when_the_stack_is_deleted_or_the_table_replaced():
    # https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/aws-attribute-deletionpolicy.html
    template = Template(ROOT / "template.yaml", overrides={"SeparateHistoryTable": "true"})
    tables = template.of_type("AWS::DynamoDB::Table")
    assert set(tables) == {"ChangeTable", "HistoryTable"}
    for logical_id, spec in tables.items():
        assert spec.get("DeletionPolicy") == "Retain", logical_id
        assert spec.get("UpdateReplacePolicy") == "Retain", logical_id


def test_each_stack_publishes_its_own_layer():
    # a LayerName shared by two stacks would interleave their versions of one layer
    names = set()
    for stack_name in ("changeflow", "changeflow-staging"):
        template = Template(ROOT / "template.yaml", stack_name=stack_name)
        props = template.resolve(template.resources["CoreLayer"]["Properties"])
        assert "LayerName" in props
        names.add(props["LayerName"])
    assert len(names) == 2


def test_tracer_does_not_capture_responses_anywhere(stack):
    # https://docs.powertools.aws.dev/lambda/python/latest/core/tracer/ (POWERTOOLS_TRACER_CAPTURE_RESPONSE)
    template = Template(ROOT / "template.yaml")
    for logical_id in template.of_type("AWS::Serverless::Function"):
        variables = template.function_properties(logical_id)["Environment"]["Variables"]
        assert str(variables.get("POWERTOOLS_TRACER_CAPTURE_RESPONSE")).lower() == "false", logical_id
        assert stack.function(logical_id).environment["POWERTOOLS_TRACER_CAPTURE_RESPONSE"] == "false"


def _python313() -> str | None:
    env = {**os.environ, "PYENV_VERSION": "3.13.0"}
    for command in (["python3.13"], ["pyenv", "exec", "python"]):
        try:
            found = subprocess.run([*command, "-c", "import sys; print(sys.executable)"], capture_output=True,
                                   text=True, env=env if command[0] == "pyenv" else None, timeout=60)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if found.returncode == 0 and found.stdout.strip():
            return found.stdout.strip()
    return None


@pytest.fixture(scope="module")
def built_layer(tmp_path_factory):
    """The layer exactly as `sam build` makes it (its Makefile's build-CoreLayer target)."""
    if shutil.which("make") is None or _python313() is None:
        pytest.skip("make or python3.13 is missing: the layer cannot be built for Lambda here")
    out = tmp_path_factory.mktemp("layer")
    subprocess.run(["make", "--no-print-directory", "build-CoreLayer", f"ARTIFACTS_DIR={out}"], cwd=LAYER,
                   check=True, capture_output=True, timeout=600)
    return out / "python"


def test_the_layer_ships_python313_bytecode_valid_on_a_read_only_opt(built_layer):
    # /opt is read-only on Lambda: a module without a usable .pyc is compiled again on every cold start
    sources = [p for p in built_layer.rglob("*.py") if "__pycache__" not in p.parts]
    assert any(p.parts[-2:] == ("tracing", "tracer.py") for p in sources)  # Powertools is in the layer
    missing = [p for p in sources if not (p.parent / "__pycache__" / f"{p.stem}.cpython-313.pyc").exists()]
    assert not missing, missing[:5]
    for source in sources[:50]:
        header = (source.parent / "__pycache__" / f"{source.stem}.cpython-313.pyc").read_bytes()[:8]
        flags = struct.unpack("<I", header[4:8])[0]
        # PEP 552: hash-based (bit 0) and unchecked (bit 1 clear): valid whatever mtimes the zip keeps
        assert flags == 0b01, (source, flags)


def test_python313_imports_the_layer_from_its_bytecode_alone(built_layer, tmp_path):
    # the proof that the shipped .pyc is what runs: replace a module's source with one that refuses to
    # run, and python3.13 (which may not write bytecode, as on /opt) still imports the compiled module
    layer = tmp_path / "python"
    shutil.copytree(built_layer, layer, symlinks=True)
    (layer / "changeflow_core" / "model.py").write_text("raise SystemExit('the source was compiled again')\n")
    done = subprocess.run([_python313(), "-s", "-c", "import changeflow_core.model as m; print(m.LATEST_SK)"],
                          env={"PATH": os.environ["PATH"], "PYTHONPATH": str(layer), "PYTHONDONTWRITEBYTECODE": "1"},
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "v0"


def test_the_layer_accepts_manylinux_2_28_wheels():
    # python3.13 on Lambda runs on Amazon Linux 2023 (glibc 2.34): manylinux_2_28 wheels load there
    # https://docs.aws.amazon.com/lambda/latest/dg/lambda-runtimes.html
    dry = subprocess.run(["make", "-n", "--no-print-directory", "build-CoreLayer", "ARTIFACTS_DIR=/nonexistent",
                          "BYTECODE_PYTHON=python3.13"], cwd=LAYER, capture_output=True, text=True, check=True)
    pip_line = next(line for line in dry.stdout.splitlines() if "pip install" in line or "--platform" in line)
    pip_command = " ".join(line for line in dry.stdout.splitlines() if "--platform" in line or "pip install" in line)
    assert "--platform manylinux_2_28_x86_64" in pip_command, pip_line
    assert "--platform manylinux2014_x86_64" in pip_command
