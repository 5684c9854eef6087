"""Security, checked by tools that are not ours: ``python -m changeflow.checks.security`` (``make lint``).

Runs, offline and without AWS credentials:

- ``cfn-lint`` on template.yaml (CloudFormation schema and best-practice rules);
- ``sam validate --lint`` (the SAM CLI's own validation);
- ``cfn-lint`` with the serverless rules (``cfn-lint-serverless``) on template.yaml and on the translated
  CloudFormation (some rules, WS5000 for one, only see the generated resources);
- ``checkov`` on the translated CloudFormation;
- ``cfn-guard`` with the AWS Control Tower proactive controls of the services the app uses, on the
  translated CloudFormation;
- ``cfn-guard`` with the project's own rules (``rules/changeflow.guard``) on the raw SAM template.

The translated CloudFormation is written to ``build/security/cloudformation.json`` (see ``changeflow.local.cfn``).
A finding fails the run unless an entry of ``SKIPPED`` (tool, check, resources) covers it; an entry
that covers nothing fails the run too, so the table (which docs/operations.md lists) stays true. The tools are
installed by ``make setup`` into .venv, .venv-checkov and .tools.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from .security_skips import (CFN_LINT, CHECKOV, CONTROL_TOWER, PINNED_ROLES_AND_ALIASES,  # noqa: F401 - names
                             PROJECT_GUARD, READ_API_PERMISSIONS, SAM_VALIDATE, SERVERLESS, SKIPPED, Skip)

# The Control Tower rule folders for the services in the template (IAM's is
# identityandaccessmanagement; CloudWatch Logs and alarms are both in cloudwatch; EventBridge has none).
CONTROL_TOWER_SERVICES = ("apigateway", "cloudwatch", "dynamodb", "identityandaccessmanagement", "lambda", "s3",
                          "sqs", "stepfunctions")


@dataclass(frozen=True)
class Finding:
    tool: str
    check: str
    resource: str  # the logical id ("" when the tool names none)
    message: str
    target: str = ""  # the file checked

    def __str__(self) -> str:
        where = f" {self.resource}" if self.resource else ""
        return f"[{self.tool}] {self.check}{where}: {self.message}"


class ToolMissing(RuntimeError):
    """A tool is not installed: ``make setup`` installs every one."""


class ToolError(RuntimeError):
    """A tool failed to run (as opposed to reporting findings)."""


def project_root() -> Path:
    """The checkout holding template.yaml: CHANGEFLOW_ROOT, else the nearest one above the cwd, else
    the one this module is in (src/changeflow/security.py)."""
    if os.environ.get("CHANGEFLOW_ROOT"):
        return Path(os.environ["CHANGEFLOW_ROOT"]).resolve()
    for directory in (Path.cwd(), *Path.cwd().parents):
        if (directory / "template.yaml").is_file() and (directory / "rules" / "changeflow.guard").is_file():
            return directory
    return Path(__file__).resolve().parents[3]


@dataclass
class Tools:
    """Where ``make setup`` puts each tool, under the project root."""

    root: Path

    def _need(self, path: Path, what: str) -> str:
        if not path.exists():
            raise ToolMissing(f"{what} is not installed ({path} is missing): run `make setup`")
        return str(path)

    @property
    def cfn_lint(self) -> str:
        return self._need(self.root / ".venv" / "bin" / "cfn-lint", "cfn-lint")

    @property
    def sam(self) -> str:
        return self._need(self.root / ".venv" / "bin" / "sam", "the SAM CLI")

    @property
    def python(self) -> str:
        return self._need(self.root / ".venv" / "bin" / "python", "the project's virtualenv")

    @property
    def checkov(self) -> str:
        return self._need(self.root / ".venv-checkov" / "bin" / "checkov", "checkov")

    @property
    def _cfnguard_package(self) -> Path:
        return self.root / ".tools" / "cdk-validator-cfnguard" / "package"

    @property
    def cfn_guard(self) -> str:
        system = {"Linux": "ubuntu", "Darwin": "macos"}.get(platform.system(), platform.system().lower())
        machine = {"amd64": "x86_64", "arm64": "aarch64"}.get(platform.machine().lower(), platform.machine())
        return self._need(self._cfnguard_package / "bin" / system / machine / "cfn-guard", "cfn-guard")

    def control_tower_rules(self) -> list[Path]:
        base = Path(self._need(self._cfnguard_package / "rules" / "control-tower" / "cfn-guard",
                               "the Control Tower guard rules"))
        rules = []
        for service in CONTROL_TOWER_SERVICES:
            found = sorted((base / service).glob("*.guard"))
            if not found:
                raise ToolError(f"no Control Tower rules for {service} in {base}")
            rules.extend(found)
        return rules

    def check_installed(self) -> None:
        for name in ("cfn_lint", "sam", "checkov", "cfn_guard"):
            getattr(self, name)
        self.control_tower_rules()
        try:
            import cfn_lint_serverless  # noqa: F401
        except ImportError as exc:
            raise ToolMissing("cfn-lint-serverless is not installed: run `make setup`") from exc


def _run(command: list[str], cwd: Path, env: dict[str, str] | None = None, ok: tuple[int, ...] = (0,),
         timeout: int = 600) -> subprocess.CompletedProcess:
    result = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=timeout,
                            env={**os.environ, **(env or {})})
    if result.returncode not in ok:
        raise ToolError(f"{' '.join(command)} exited {result.returncode}:\n"
                        f"{result.stdout[-4000:]}{result.stderr[-4000:]}")
    return result


# --- the tools ----------------------------------------------------------------------------------------------
def cfn_lint(tools: Tools, template: Path, *, serverless: bool = False, tool: str = CFN_LINT) -> list[Finding]:
    """cfn-lint (with the serverless rules when ``serverless``): the template must come before ``-a``."""
    command = [tools.cfn_lint, str(template), "--format", "json"]
    if serverless:
        command += ["-a", "cfn_lint_serverless.rules"]
    # Exit status: a bit mask of 2 (errors), 4 (warnings), 8 (informational); anything else is a crash.
    result = _run(command, template.parent, ok=tuple(range(0, 16, 2)))
    try:
        matches = json.loads(result.stdout or "[]")
    except json.JSONDecodeError as exc:
        raise ToolError(f"cfn-lint printed no JSON:\n{result.stdout[-4000:]}{result.stderr[-4000:]}") from exc
    if result.returncode and not matches:
        raise ToolError(f"cfn-lint exited {result.returncode} with no finding:\n{result.stderr[-4000:]}")
    findings = []
    for match in matches:
        path = match["Location"].get("Path") or []
        resource = path[1] if len(path) > 1 and path[0] == "Resources" else ""
        findings.append(Finding(tool, match["Rule"]["Id"], str(resource), match["Message"], template.name))
    return findings


def sam_validate(tools: Tools, template: Path, home: Path) -> list[Finding]:
    """``sam validate --lint``; any E/W code it prints is a finding, and so is a non-zero exit."""
    home.mkdir(parents=True, exist_ok=True)
    # A SAM CLI config dir whose last version check is now: sam does not look for a newer release.
    (home / "metadata.json").write_text(json.dumps({"lastVersionCheck": time.time(), "telemetryEnabled": False}))
    env = {"SAM_CLI_TELEMETRY": "0", "AWS_DEFAULT_REGION": os.environ.get("AWS_DEFAULT_REGION", "us-east-1"),
           "__SAM_CLI_APP_DIR": str(home)}
    result = _run([tools.sam, "validate", "--lint", "--template-file", str(template)], template.parent, env,
                  ok=(0, 1))
    output = result.stdout + result.stderr
    findings = []
    for line in output.splitlines():
        code = re.search(r"\[?\b([EWI]\d{4})\b", line)
        if code:
            findings.append(Finding(SAM_VALIDATE, code.group(1), "", line.strip(), template.name))
    if result.returncode and not findings:
        findings.append(Finding(SAM_VALIDATE, "invalid", "", output.strip()[-2000:], template.name))
    if not result.returncode and "is a valid SAM Template" not in output:
        raise ToolError(f"sam validate --lint said neither valid nor invalid:\n{output[-4000:]}")
    return findings


def checkov(tools: Tools, cloudformation: Path) -> list[Finding]:
    """checkov on the CloudFormation (from its own virtualenv; --skip-download: no platform call)."""
    # The file by its bare name, from its folder: checkov copies the path into every dict it parses as
    # "__file__", and CKV_AWS_45 then scans it as a Lambda environment value - a 40-character absolute
    # path looks like an AWS secret access key to it.
    command = [tools.checkov, "-f", cloudformation.name, "--framework", "cloudformation", "--quiet", "--compact",
               "--skip-download", "--output", "json"]
    result = _run(command, cloudformation.parent, ok=(0, 1))
    try:
        report = json.loads(result.stdout)
    except json.JSONDecodeError as exc:
        raise ToolError(f"checkov printed no JSON:\n{result.stdout[-4000:]}{result.stderr[-4000:]}") from exc
    reports = report if isinstance(report, list) else [report]
    findings = []
    for one in reports:
        if one.get("check_type") not in (None, "cloudformation"):
            continue
        if "results" not in one:
            if one.get("failed", 0):
                raise ToolError(f"checkov reported failures without details: {one}")
            continue
        for failed in one["results"]["failed_checks"]:
            resource = failed["resource"].rsplit(".", 1)[-1]  # AWS::Lambda::Function.Name
            findings.append(Finding(CHECKOV, failed["check_id"], resource, failed["check_name"], cloudformation.name))
    if result.returncode and not findings:
        raise ToolError(f"checkov exited {result.returncode} with no failed check:\n{result.stderr[-4000:]}")
    return findings


def _resources(node, found: set[str]) -> set[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "path" and isinstance(value, str) and value.startswith("/Resources/"):
                found.add(value.split("/")[2])
            else:
                _resources(value, found)
    elif isinstance(node, list):
        for value in node:
            _resources(value, found)
    return found


def _messages(node, found: list[tuple[str, set[str]]]) -> list[tuple[str, set[str]]]:
    """Every custom message (``<< ... >>``) under ``node``, outermost first, with the resources under it."""
    if isinstance(node, dict):
        messages = node.get("messages")
        message = messages.get("custom_message") if isinstance(messages, dict) else None
        if message and message.strip():
            found.append((" ".join(message.split()), _resources(node, set())))
        for value in node.values():
            _messages(value, found)
    elif isinstance(node, list):
        for value in node:
            _messages(value, found)
    return found


def cfn_guard(tools: Tools, rules: list[Path], data: Path, tool: str) -> list[Finding]:
    """cfn-guard: exit 0 when every rule passes, 19 when one fails; one finding per failed rule and
    resource. A Control Tower rule is named by its control id (CT.SERVICE.PR.N), ours by rule name."""
    command = [tools.cfn_guard, "validate", "--data", str(data), "--structured", "--output-format", "json",
               "--show-summary", "none"]
    for rule in rules:
        command += ["--rules", str(rule)]
    result = _run(command, data.parent, ok=(0, 19))
    try:
        reports = json.loads(result.stdout)
    except json.JSONDecodeError as exc:
        raise ToolError(f"cfn-guard printed no JSON:\n{result.stdout[-4000:]}{result.stderr[-4000:]}") from exc
    findings = []
    for report in reports:
        for failed in report.get("not_compliant", []):
            rule = failed["Rule"]
            messages = _messages(rule, [])
            control = next((m.group(1) for text, _ in messages
                            if (m := re.search(r"\[(CT\.[A-Z0-9]+\.PR\.\d+)\]", text))), None)
            for resource in sorted(_resources(rule, set())) or [""]:
                if control:  # "[CT.X.PR.1]: what the control requires [FIX]: how" - the requirement
                    text = next(text for text, _ in messages if control in text)
                    message = re.sub(r"^\[CT\.[^\]]+\]:\s*", "", text).split(" [FIX]")[0]
                else:  # ours: the innermost clause message about this resource
                    message = next((text for text, under in reversed(messages) if resource in under), rule["name"])
                findings.append(Finding(tool, control or rule["name"], resource, message, data.name))
    if result.returncode == 19 and not findings:
        raise ToolError(f"cfn-guard failed with no failed rule:\n{result.stdout[-4000:]}{result.stderr[-4000:]}")
    return findings


def write_cloudformation(template: Path, build_dir: Path) -> Path:
    """The SAM template translated offline (changeflow.local.cfn.transform) into build_dir."""
    from ..local.cfn import transform

    build_dir.mkdir(parents=True, exist_ok=True)
    out = build_dir / "cloudformation.json"
    out.write_text(json.dumps(transform(template), indent=1) + "\n", encoding="utf-8")
    return out


# --- the run ------------------------------------------------------------------------------------------------
@dataclass
class Step:
    name: str
    target: str
    findings: list[Finding] = field(default_factory=list)
    error: str | None = None
    seconds: float = 0.0


@dataclass
class Result:
    steps: list[Step]
    findings: list[Finding]  # not skipped
    skipped: list[tuple[Finding, Skip]]
    unused_skips: list[Skip]

    @property
    def errors(self) -> list[Step]:
        return [step for step in self.steps if step.error]

    @property
    def ok(self) -> bool:
        return not self.findings and not self.unused_skips and not self.errors


def steps_for(tools: Tools, template: Path, cloudformation: Path, build_dir: Path
              ) -> list[tuple[str, str, Callable[[], list[Finding]]]]:
    guard_rules = tools.root / "rules" / "changeflow.guard"
    return [
        (CFN_LINT, template.name, lambda: cfn_lint(tools, template)),
        (SAM_VALIDATE, template.name, lambda: sam_validate(tools, template, build_dir / "sam-home")),
        (SERVERLESS, template.name, lambda: cfn_lint(tools, template, serverless=True, tool=SERVERLESS)),
        (SERVERLESS, cloudformation.name, lambda: cfn_lint(tools, cloudformation, serverless=True, tool=SERVERLESS)),
        (CHECKOV, cloudformation.name, lambda: checkov(tools, cloudformation)),
        (CONTROL_TOWER, cloudformation.name,
         lambda: cfn_guard(tools, tools.control_tower_rules(), cloudformation, CONTROL_TOWER)),
        (PROJECT_GUARD, template.name, lambda: cfn_guard(tools, [guard_rules], template, PROJECT_GUARD)),
    ]


def run(template: Path | None = None, build_dir: Path | None = None, root: Path | None = None,
        skipped: tuple[Skip, ...] = SKIPPED) -> Result:
    """Every check on ``template`` (default: the project's), the skips applied."""
    root = Path(root or project_root()).resolve()
    template = Path(template or root / "template.yaml").resolve()
    build_dir = Path(build_dir or root / "build" / "security").resolve()
    tools = Tools(root)
    tools.check_installed()
    cloudformation = write_cloudformation(template, build_dir)

    def timed(job):
        name, target, check = job
        step, start = Step(name, target), time.monotonic()
        try:
            step.findings = check()
        except (ToolError, subprocess.TimeoutExpired) as exc:
            step.error = str(exc)
        step.seconds = time.monotonic() - start
        return step

    with ThreadPoolExecutor(max_workers=4) as pool:
        steps = list(pool.map(timed, steps_for(tools, template, cloudformation, build_dir)))
    return Result(steps, *apply_skips([f for step in steps for f in step.findings], skipped))


def apply_skips(findings: list[Finding], skipped: tuple[Skip, ...] = SKIPPED
                ) -> tuple[list[Finding], list[tuple[Finding, Skip]], list[Skip]]:
    """``(findings no skip covers, (finding, skip) pairs, skips that cover no finding)``."""
    left, covered, used = [], [], set()
    for finding in findings:
        skip = next((s for s in skipped if s.covers(finding)), None)
        if skip:
            covered.append((finding, skip))
            used.add(skip)
        else:
            left.append(finding)
    return left, covered, [s for s in skipped if s not in used]


def skipped_table(skipped: tuple[Skip, ...] = SKIPPED) -> str:
    """The skips as a Markdown table (docs/operations.md's)."""
    lines = ["| tool | check | resources | why it is skipped |", "|---|---|---|---|"]
    for skip in skipped:
        resources = ", ".join(f"`{r}`" for r in skip.resources) or "all"
        lines.append(f"| {skip.tool} | `{skip.check}` | {resources} | {skip.reason} |")
    return "\n".join(lines)


def step_status(step: "Step", unskipped: list[Finding]) -> str:
    """What one step's line says: its findings, and whether the skip table covers all of them."""
    if step.error:
        return "ERROR"
    total = len(step.findings)
    if not total:
        return "no findings"
    noun = "finding" if total == 1 else "findings"
    left = sum(1 for f in step.findings if any(f is u for u in unskipped))
    if not left:
        return f"{total} {noun}, all in the skip table" if total > 1 else "1 finding, in the skip table"
    return f"{total} {noun}, {left} not in the skip table"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m changeflow.checks.security", description=__doc__.split("\n\n")[0])
    parser.add_argument("--template", type=Path, help="the SAM template (default: the project's template.yaml)")
    parser.add_argument("--build-dir", type=Path, help="where the translated CloudFormation goes "
                        "(default: build/security)")
    parser.add_argument("--list-skipped", action="store_true", help="print the skipped checks as Markdown and exit")
    parser.add_argument("-v", "--verbose", action="store_true", help="also list every skipped finding")
    args = parser.parse_args(argv)
    if args.list_skipped:
        print(skipped_table())
        return 0
    try:
        result = run(args.template, args.build_dir)
    except ToolMissing as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for step in result.steps:
        status = step_status(step, result.findings)
        print(f"{step.name:<36} {step.target:<24} {step.seconds:5.1f}s  {status}")
    counts: dict[tuple[str, str], int] = {}
    for finding, skip in result.skipped:
        counts[(skip.tool, skip.check)] = counts.get((skip.tool, skip.check), 0) + 1
        if args.verbose:
            print(f"  skipped: {finding}")
    print("skipped (see SKIPPED in security_skips.py): "
          + ", ".join(f"{check} x{n}" for (_, check), n in counts.items()))
    for step in result.errors:
        print(f"\nERROR in {step.name} on {step.target}:\n{step.error}", file=sys.stderr)
    for finding in result.findings:
        print(f"FINDING {finding}  ({finding.target})")
    for skip in result.unused_skips:
        print(f"UNUSED SKIP [{skip.tool}] {skip.check} {', '.join(skip.resources) or 'all'}: "
              "it covers no finding any more; remove it from SKIPPED")
    print("security checks: " + ("passed" if result.ok else "FAILED"))
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
