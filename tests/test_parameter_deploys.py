"""A deploy that changes only a parameter reaches the steps it configures (issue 33.3).

The state machine names Lambda versions, so an execution runs start to end on the release it started with
(tests/test_deploy.py). A published version keeps the configuration it was published with: a parameter that
configures a step reaches the step only through a new version. SAM names a version by a hash of the
function's properties as written, with a ``!Ref`` to a parameter hashed unresolved (aws/serverless-application-
model#3820), so a parameter alone never gives a version a new logical id. CloudFormation publishes one all the
same when it replaces the version: ``Description`` is a createOnly property of ``AWS::Lambda::Version``
(https://docs.aws.amazon.com/AWSCloudFormation/latest/TemplateReference/aws-resource-lambda-version.html), and
each step's ``VersionDescription``, which SAM passes to it, names the value of every parameter the step reads.

Here: aws-sam-translator translates the template with each parameter changed, and the steps whose published
version changes are exactly the steps whose configuration changes; then, on the embedded stack, each
parameter is changed by a deploy while an execution is held in flight, and the next execution runs with the
new value while the held one keeps the old.
"""

from __future__ import annotations

import json
import threading

import pytest

from changeflow.client import Changeflow
from changeflow.local import deploy
from changeflow.local.embedded import EmbeddedStack
from changeflow.local.lambdas import LambdaServiceError, fault_hook
from changeflow.local.moto_patches.stepfunctions.clock import Holds
from changeflow.local.template import Template
from changeflow_core import model, observe, store
from conftest import ROOT

STEPS = ("FetchLatestFunction", "UpdateLatestFunction", "PutHistoryFunction", "DeleteTombstoneFunction",
         "TagTtlFunction")
ALL = frozenset(STEPS)
WRITERS_OF_THE_CHAIN = frozenset({"UpdateLatestFunction", "PutHistoryFunction", "DeleteTombstoneFunction"})
DENY_ALL = json.dumps([{"principals": ["arn:aws:iam::*:user/nobody"], "entities": [""], "operations": ["put"]}])
# (parameters deployed first, the parameter changed, its new value) -> the steps whose code reads it (the
# design: docs/operations.md's table of parameters)
CHANGES = {
    ((), "AuthorizationPolicy", DENY_ALL): {"FetchLatestFunction"},
    ((("AuthorizationPolicy", DENY_ALL),), "AuthorizationPolicy", DENY_ALL.replace("nobody", "noone")):
        {"FetchLatestFunction"},
    ((), "HashEntityIds", "true"): ALL,
    ((), "TombstoneTtlDays", "30"): {"DeleteTombstoneFunction"},
    ((), "SeparateHistoryTable", "true"): {"FetchLatestFunction", "PutHistoryFunction", "TagTtlFunction"},
    ((), "Runtime", "python3.12"): ALL,
    ((), "LogLevel", "DEBUG"): ALL,
    ((), "FunctionSystemLogLevel", "INFO"): ALL,
    ((), "ChainAdoptionClosed", "true"): {"FetchLatestFunction"},  # LoggingConfig, which a version snapshots
    # 0 to K: a window now expires versions, so the writers keep each version's predecessor hash too
    ((), "HistoryRetentionVersions", "5"): {"TagTtlFunction"} | WRITERS_OF_THE_CHAIN,
    ((), "HistoryRetentionDays", "30"): {"TagTtlFunction"} | WRITERS_OF_THE_CHAIN,
    # the history step tags expiries (issue 37.2); the retired tag step keeps its configuration for earlier
    # releases' executions
    ((("HistoryRetentionVersions", "5"),), "HistoryRetentionVersions", "7"): {"PutHistoryFunction", "TagTtlFunction"},
    ((("HistoryRetentionDays", "30"),), "HistoryRetentionDays", "60"): {"PutHistoryFunction", "TagTtlFunction"},
}
# what a published version snapshots of a function: everything but what belongs to its role, its triggers and
# the version itself (https://docs.aws.amazon.com/lambda/latest/dg/configuration-versions.html)
NOT_VERSIONED = {"Policies", "Events", "VersionDescription", "AutoPublishAlias", "AutoPublishAliasAllProperties"}


def _configuration(template: Template, logical_id: str) -> dict:
    return {k: v for k, v in template.function_properties(logical_id).items() if k not in NOT_VERSIONED}


def _another_value(name: str, spec: dict) -> str:
    """A valid value of the parameter other than its default."""
    default = str(spec.get("Default", ""))
    allowed = [str(v) for v in spec.get("AllowedValues", [])]
    if allowed:
        return next(v for v in allowed if v != default)
    if spec.get("Type") == "Number":
        return str(int(default) + 1)
    return DENY_ALL if name == "AuthorizationPolicy" else default + "x"


class _Deploys:
    """What CloudFormation does with the translated template when the stack moves from one set of parameter
    values to another: the versions it publishes (changeflow.local.deploy)."""

    def __init__(self):
        self.ids = {}

    def template(self, parameters: dict) -> Template:
        return Template(ROOT / "template.yaml", overrides=dict(parameters))

    def published(self, before: dict, after: dict) -> set[str]:
        old, new = self.template(before), self.template(after)
        deploy.carry_attributes(old, new)
        for values in (before, after):
            key = tuple(sorted(values.items()))
            if key not in self.ids:
                self.ids[key] = deploy.version_ids(self.template(values), ROOT)
        return deploy.published(old, new, self.ids[tuple(sorted(before.items()))], self.ids[tuple(sorted(after.items()))])


@pytest.fixture(scope="module")
def deploys():
    return _Deploys()


@pytest.mark.parametrize("first, name, value", list(CHANGES), ids=[f"{n}={v[:12]}" + ("-again" if f else "")
                                                                   for f, n, v in CHANGES])
def test_a_parameter_change_publishes_new_versions_of_exactly_the_steps_it_configures(deploys, first, name, value):
    """GIVEN a stack deployed with some parameter values, WHEN only one parameter changes, THEN CloudFormation
    publishes a new version (SAM's logical id, or a replacement of the version) of exactly the steps whose
    configuration reads it: the steps the design says read it, and the steps whose resolved configuration
    (environment, runtime) changes."""
    before = dict(first)
    after = {**before, name: value}
    configured = {s for s in STEPS if _configuration(deploys.template(before), s)
                  != _configuration(deploys.template(after), s)}
    assert configured == CHANGES[(first, name, value)]
    assert deploys.published(before, after) == configured


def test_every_parameter_that_configures_a_step_publishes_its_version(deploys):
    """The same for every parameter of the template, not only those listed above: whatever a parameter
    changes in a pinned step's configuration publishes a new version of that step, and nothing else does."""
    parameters = deploys.template({}).body["Parameters"]
    reaching = set()
    for name, spec in parameters.items():
        if name == "WorkflowType":
            continue  # CloudFormation replaces the state machine (createOnly Type): its own deploy, not modelled
        after = {name: _another_value(name, spec)}
        configured = {s for s in STEPS if _configuration(deploys.template({}), s)
                      != _configuration(deploys.template(after), s)}
        assert deploys.published({}, after) == configured, name
        reaching |= {name} if configured else set()
    assert reaching == {n for _, n, _ in CHANGES}, "a parameter reaches a step that CHANGES does not name"


def test_sam_passes_the_version_description_to_the_version_unresolved_and_keeps_the_version_it_replaces():
    """What the mechanism rests on, read from aws-sam-translator's output: the version's Description is the
    function's VersionDescription as written (CloudFormation resolves it), its logical id does not see the
    parameter (#3820), and the version CloudFormation replaces is kept (UpdateReplacePolicy: Retain) for the
    executions still running on it."""
    from changeflow.local.cfn import transform

    template = Template(ROOT / "template.yaml")
    resources = transform(ROOT / "template.yaml")["Resources"]
    versions = {r["Properties"]["FunctionName"]["Ref"]: r for r in resources.values()
                if r["Type"] == "AWS::Lambda::Version"}
    assert set(versions) == set(STEPS)
    for step, version in versions.items():
        assert version["Properties"]["Description"] == template.resources[step]["Properties"]["VersionDescription"]
        assert version["DeletionPolicy"] == version["UpdateReplacePolicy"] == "Retain"
        assert len(deploy.version_description(template, step)) <= 256  # AWS::Lambda::Version Description
    assert deploy.create_only("AWS::Lambda::Version") >= ("FunctionName", "Description")
    changed = transform(ROOT / "template.yaml", {"LogLevel": "DEBUG"})["Resources"]
    assert {n for n, r in changed.items() if r["Type"] == "AWS::Lambda::Version"} == {
        n for n, r in resources.items() if r["Type"] == "AWS::Lambda::Version"}, "SAM now resolves parameters"


# --- on the embedded stack, in the middle of traffic ------------------------------------------------------

def _invoked(cf: Changeflow, arn: str) -> dict[str, str]:
    """The version of each step function an execution invoked (its last invocation), from its history."""
    found = {}
    for event in cf.history(arn):
        if event["type"] == "TaskScheduled":
            name = json.loads(event["taskScheduledEventDetails"]["parameters"])["FunctionName"]
            found[name.split(":function:")[1].split(":")[0].rsplit("-", 1)[1]] = name
    return found


def _deploy_between(stack: EmbeddedStack, cf: Changeflow, parameters: dict, held: dict, after: dict):
    """Execution ``held`` waits before its fetch (a failed first attempt whose retry waits) while
    ``parameters`` are deployed; ``after`` starts once the deploy is done. Their results and the version of
    each step each one invoked."""
    deployed, holding = threading.Event(), threading.Event()

    def hold_before_fetch(function, event, invoke):
        name = (event.get("execution") or {}).get("name", "")
        if name == "held" and function.logical_id == "FetchLatestFunction" and not holding.is_set():
            Holds.hold(name, lambda: deployed.wait(60))
            holding.set()
            raise LambdaServiceError()
        return invoke()

    with fault_hook(stack.lambdas, hold_before_fetch):
        held_arn = cf.start(held, name="held")[1]
        assert holding.wait(30) and cf.describe(held_arn)["status"] == "RUNNING"
        stack.deploy(parameters=parameters)
        deployed.set()
        after_arn = cf.start(after, name="after")[1]
        results = {"held": cf.wait(held_arn, 60), "after": cf.wait(after_arn, 60)}
    return results, {name: _invoked(cf, r.arn) for name, r in results.items()}


def _versioned(stack: EmbeddedStack, arn: str):
    return stack.lambdas.find(arn)


def _log_lines(function) -> list[dict]:
    return [json.loads(line) for line in function.logs if line.startswith("{")]


T0 = 1_767_225_600_000


def _put(entity: str, at: int, **more) -> dict:
    return {"entityId": entity, "operation": "put", "attributes": {"at": at}, "effectiveAt": T0 + at, **more}


def _authorization(stack, cf, results, invoked):
    assert results["held"].output["outcome"] == "applied"  # started under no policy: it keeps none
    assert results["after"].status == "FAILED" and results["after"].error == "Forbidden"


def _hash_entity_ids(stack, cf, results, invoked):
    for name, raw in (("held", "e-held"), ("after", "e-after")):
        lines = [line for line in _log_lines(_versioned(stack, invoked[name]["FetchLatestFunction"]))
                 if line.get("message") == "fetched" and line.get("execution") == name]
        expected = raw if name == "held" else observe.entity_ref(raw, True)
        assert lines and {line["entityId"] for line in lines} == {expected}, (name, lines)
    assert observe.entity_ref("e-after", True) != "e-after"


def _tombstone_ttl(stack, cf, results, invoked):
    days = {}
    for name in ("held", "after"):
        latest = store.get_item(cf.dynamodb, cf.table, f"e-{name}", model.LATEST_SK)
        days[name] = round((int(latest[model.EXPIRES_AT]) - int(latest[model.RECORDED_AT]) / 1000) / 86400)
    assert days == {"held": 7, "after": 30}


def _separate_history(stack, cf, results, invoked):
    moved = Changeflow.for_embedded(stack)  # the stack's Outputs now name the history table
    assert moved.history_table != cf.history_table
    assert [h["changeId"] for h in store.all_history(cf.dynamodb, cf.history_table, "e-held")] == ["held"]
    assert store.all_history(cf.dynamodb, cf.history_table, "e-after") == []
    assert [h["changeId"] for h in store.all_history(cf.dynamodb, moved.history_table, "e-after")] == ["after"]


def _retention(stack, cf, results, invoked):
    # each entity had version 1 before; version 2 is written by the held and by the next execution
    expiry = {name: store.all_history(cf.dynamodb, cf.history_table, f"e-{name}")[0].get(model.EXPIRES_AT)
              for name in ("held", "after")}
    assert expiry["held"] is None and expiry["after"] is not None, expiry


def _log_level(stack, cf, results, invoked):
    # the environment each version runs with (in one process the handlers share Powertools' stdlib logger,
    # whose level the first one set; on Lambda each version has its own process)
    levels = {name: {_versioned(stack, arn).environment["POWERTOOLS_LOG_LEVEL"] for arn in invoked[name].values()}
              for name in ("held", "after")}
    assert levels == {"held": {"INFO"}, "after": {"DEBUG"}}


def _runtime(stack, cf, results, invoked):
    for name, runtime in (("held", "python3.13"), ("after", "python3.12")):
        assert {_versioned(stack, arn).runtime for arn in invoked[name].values()} == {runtime}, name


STARTING = {"HashEntityIds": {"LogLevel": "DEBUG"}}  # parameter -> what the stack starts with, if not the defaults
OBSERVED = {  # parameter -> (new value, the change each execution makes, what shows the value it ran with)
    "AuthorizationPolicy": (DENY_ALL, "put", _authorization),
    "HashEntityIds": ("true", "put", _hash_entity_ids),
    "TombstoneTtlDays": ("30", "delete", _tombstone_ttl),
    "SeparateHistoryTable": ("true", "put", _separate_history),
    "HistoryRetentionVersions": ("1", "put-again", _retention),
    "HistoryRetentionDays": ("1", "put-again", _retention),
    "LogLevel": ("DEBUG", "put", _log_level),
    "Runtime": ("python3.12", "put", _runtime),
}


@pytest.mark.parametrize("name", list(OBSERVED))
def test_a_parameter_deployed_mid_traffic_reaches_the_next_execution_and_not_the_running_one(name):
    """GIVEN an execution in flight, WHEN a deploy changes only ``name``, THEN the next execution runs every
    step it configures with the new value (on a new version), and the execution in flight ends on the
    versions it started with, with the old value."""
    value, change, observe_value = OBSERVED[name]
    # the fetch step's summary line (which names the entity as the execution saw it) is a DEBUG line
    with EmbeddedStack(parameters=STARTING.get(name), time_scale=0.01) as stack:
        cf = Changeflow.for_embedded(stack)
        requests = {}
        for i, execution in enumerate(("held", "after")):
            entity = f"e-{execution}"
            if change in ("delete", "put-again"):
                assert cf.submit(_put(entity, 10 * i)).output["outcome"] == "applied"
            requests[execution] = ({"entityId": entity, "operation": "delete", "effectiveAt": T0 + 10 * i + 1}
                                   if change == "delete" else _put(entity, 10 * i + 1))
            requests[execution]["changeId"] = execution
        before = {step: stack.template.versions.get(step, "1") for step in STEPS}
        results, invoked = _deploy_between(stack, cf, {name: value}, requests["held"], requests["after"])
        configured = {step for (first, changed, _), steps in CHANGES.items() if changed == name and not first
                      for step in steps}
        for step in STEPS:
            held, after = invoked["held"].get(step), invoked["after"].get(step)
            if held:
                assert held.endswith(f":{before[step]}"), (step, held)
            if after:
                assert after.endswith(f":{stack.template.versions[step]}"), (step, after)
                assert (stack.template.versions[step] != before[step]) == (step in configured), step
        observe_value(stack, cf, results, invoked)


def test_without_version_descriptions_the_same_deploy_leaves_the_next_execution_on_the_old_value(tmp_path):
    """The test above can fail: with the template before this change (a parameter only in the environment,
    which SAM hashes unresolved), a tightened AuthorizationPolicy never reaches the fetch step."""
    for part in ("functions", "layers", "statemachines"):
        (tmp_path / part).symlink_to(ROOT / part)
    text = "\n".join(line for line in (ROOT / "template.yaml").read_text().splitlines()
                     if "AuthorizationPolicyVersion.VersionNumber" not in line)
    (tmp_path / "template.yaml").write_text(text + "\n")
    with EmbeddedStack(tmp_path, time_scale=0.01) as stack:
        cf = Changeflow.for_embedded(stack)
        results, invoked = _deploy_between(stack, cf, {"AuthorizationPolicy": DENY_ALL},
                                           {**_put("e-held", 1), "changeId": "held"},
                                           {**_put("e-after", 2), "changeId": "after"})
        assert stack.template.versions["FetchLatestFunction"] == "1"
        assert results["after"].status == "SUCCEEDED" and results["after"].output["outcome"] == "applied"
        fetch = _versioned(stack, invoked["after"]["FetchLatestFunction"])
        assert fetch.environment["AUTHORIZATION_POLICY"] == ""  # the version kept the policy it was published with
        assert stack.lambdas.functions[fetch.name].environment["AUTHORIZATION_POLICY"] == DENY_ALL  # $LATEST has it
