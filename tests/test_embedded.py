"""The embedded stack itself: atomic DynamoDB requests under concurrency, compressed time, a stack that
follows the template, named executions and history paged the AWS way."""

from __future__ import annotations

import json
import shutil
import sys
import threading
import time
from contextlib import contextmanager

import pytest

from changeflow.local.moto_patches.core.locking import Atomicity
from changeflow.local.moto_patches.stepfunctions.clock import Clock
from changeflow.client import Changeflow
from conftest import ROOT

T0 = 1_767_225_600_000


@contextmanager
def eager_thread_switching():
    """Make the interpreter switch threads as often as it can, so races show up in a short test."""
    previous = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        yield
    finally:
        sys.setswitchinterval(previous)


def optimistic_increments(stack, threads=8, rounds=60):
    """Each thread reads a counter and writes counter+1 on the condition that it is unchanged.
    Returns (successful conditional writes, final counter): equal if and only if no update was lost."""
    table = stack.outputs["ChangeTableName"]
    key = {"pk": {"S": "counter"}, "sk": {"S": "v0"}}
    stack.client("dynamodb").put_item(TableName=table, Item={**key, "n": {"N": "0"}})
    wins, lock = [0], threading.Lock()

    def worker():
        client = stack.client("dynamodb")
        for _ in range(rounds):
            current = int(client.get_item(TableName=table, Key=key, ConsistentRead=True)["Item"]["n"]["N"])
            try:
                client.put_item(TableName=table, Item={**key, "n": {"N": str(current + 1)}},
                                ConditionExpression="n = :current",
                                ExpressionAttributeValues={":current": {"N": str(current)}})
                with lock:
                    wins[0] += 1
            except client.exceptions.ConditionalCheckFailedException:
                pass

    with eager_thread_switching():
        workers = [threading.Thread(target=worker) for _ in range(threads)]
        for t in workers:
            t.start()
        for t in workers:
            t.join()
    final = int(stack.client("dynamodb").get_item(TableName=table, Key=key)["Item"]["n"]["N"])
    return wins[0], final


def test_each_dynamodb_request_is_atomic_under_concurrency(stack):
    wins, final = optimistic_increments(stack)
    assert wins == final and wins > 0


def test_a_synchronous_invoke_waiting_for_a_busy_function_does_not_hold_every_other_request(stack):
    # GIVEN a handler busy in another thread (the stack runs one at a time: its invoke lock), as the scheduled
    # digest is while its parallel page reads go to DynamoDB from threads of their own
    busy, release = threading.Event(), threading.Event()

    def handler_running():
        with stack.lambdas.invoke_lock:
            busy.set()
            release.wait(30)

    holder = threading.Thread(target=handler_running)
    holder.start()
    busy.wait(5)
    # WHEN someone invokes a function synchronously through Lambda's API: it waits for the busy one
    invoker = threading.Thread(target=lambda: stack.client("lambda").invoke(
        FunctionName=stack.function("DeleteTombstoneFunction").name, Payload=b"{}"))
    invoker.start()
    time.sleep(0.5)
    # THEN another thread's DynamoDB request is still served (holding the request lock across the wait would
    # block it until the busy handler ended, and that handler's own requests forever: a deadlock)
    answered = threading.Event()
    threading.Thread(target=lambda: stack.client("dynamodb").list_tables() and answered.set(), daemon=True).start()
    served = answered.wait(10)
    release.set()
    holder.join(10)
    invoker.join(30)
    assert served and not invoker.is_alive()


def test_without_the_lock_moto_loses_conditional_updates():
    # the control: the same workload with the embedded stack's atomicity switched off loses updates,
    # so the test above would fail without it
    from changeflow.local.embedded import EmbeddedStack

    outcomes = []
    Atomicity.enabled = False
    try:
        for _ in range(3):
            with EmbeddedStack(ROOT, time_scale=0.001) as stack:
                outcomes.append(optimistic_increments(stack))
            if outcomes[-1][0] > outcomes[-1][1]:
                break
    finally:
        Atomicity.enabled = True
    assert any(wins > final for wins, final in outcomes), outcomes


def test_waits_and_backoffs_are_compressed_without_editing_the_definition(stack, cf):
    from changeflow.local.lambdas import fault_hook

    failures = iter([True] * 4)

    def flaky(function, event, invoke):
        if function.logical_id == "PutHistoryFunction" and next(failures, False):
            raise RuntimeError("throttled")
        return invoke()

    Clock.slept.clear()
    with fault_hook(stack.lambdas, flaky):
        execution = cf.submit({"entityId": "e", "operation": "put", "attributes": {}, "effectiveAt": T0})
    assert execution.output["outcome"] == "applied"
    requested = sum(seconds for kind, seconds in Clock.slept if kind == "retry")
    events = list(cf.history(execution.arn))
    elapsed = (events[-1]["timestamp"] - events[0]["timestamp"]).total_seconds()
    assert len([s for k, s in Clock.slept if k == "retry"]) == 4
    assert elapsed < requested  # the definition asked for these back-offs; the clock scaled them


def test_a_handlers_sdk_retries_back_off_on_the_same_compressed_clock(stack, cf):
    # DynamoDB's SDK client tries ten times, backing off from 50 ms and doubling: 25 s of sleep before a
    # write throttled every time fails; on the embedded stack's clock that sleep is scaled like a Retry's
    from changeflow.checks.faults import Injector

    function = stack.function("UpdateLatestFunction")
    stack.lambdas.load(function)
    Clock.slept.clear()
    started = time.monotonic()
    with Injector().throttle(function, "PutItem", 10, "ThrottlingException"):
        execution = cf.submit({"entityId": "sdk#1", "operation": "put", "attributes": {}, "effectiveAt": T0})
    elapsed = time.monotonic() - started
    assert execution.output["outcome"] == "applied", execution.cause
    requested = [seconds for kind, seconds in Clock.slept if kind == "sdk-retry"]
    assert len(requested) == 9 and sum(requested) > 20  # the SDK's own nine back-offs, as botocore asks
    assert elapsed < sum(requested) / 2


def test_the_stack_follows_the_template_renamed_function_and_new_parameter_values(tmp_path):
    from changeflow.local.embedded import EmbeddedStack

    for part in ("functions", "layers", "statemachines"):
        shutil.copytree(ROOT / part, tmp_path / part, ignore=shutil.ignore_patterns("__pycache__"))
    text = (ROOT / "template.yaml").read_text()
    (tmp_path / "template.yaml").write_text(text.replace("FetchLatestFunction:", "ReadLatestFunction:").replace(
        "!GetAtt FetchLatestFunction.Arn", "!GetAtt ReadLatestFunction.Arn").replace(
        "!Ref FetchLatestFunction.Version", "!Ref ReadLatestFunction.Version").replace(
        "${FetchLatestFunction.Arn}", "${ReadLatestFunction.Arn}").replace(
        "${FetchLatestFunction}", "${ReadLatestFunction}").replace(
        "FunctionName: !Ref FetchLatestFunction", "FunctionName: !Ref ReadLatestFunction").replace(
        "FetchLatestFunctionRole", "ReadLatestFunctionRole"))
    with EmbeddedStack(tmp_path, parameters={"TombstoneTtlDays": "1"}, time_scale=0.001) as stack:
        cf = Changeflow.for_embedded(stack)
        execution = cf.submit({"entityId": "e", "operation": "delete", "effectiveAt": T0})
        assert execution.output["outcome"] == "applied"
        assert stack.function("ReadLatestFunction").invocations == 1
        latest = cf.entity("e")["latest"]
        assert latest["expiresAt"] == latest["recordedAt"] // 1000 + 86_400


def test_functions_get_the_environment_the_template_gives_them(stack):
    delete = stack.function("DeleteTombstoneFunction").environment
    fetch = stack.function("FetchLatestFunction").environment
    assert delete["TOMBSTONE_TTL_DAYS"] == "7" and "TOMBSTONE_TTL_DAYS" not in fetch
    assert fetch["TABLE_NAME"] == stack.outputs["ChangeTableName"] == fetch["HISTORY_TABLE_NAME"]
    assert fetch["POWERTOOLS_SERVICE_NAME"] == "changeflow"


def test_separate_history_table_parameter_creates_and_uses_a_second_table(make_stack):
    stack = make_stack(SeparateHistoryTable="true")
    cf = Changeflow.for_embedded(stack)
    assert cf.history_table != cf.table
    cf.submit({"entityId": "e", "operation": "put", "attributes": {"a": 1}, "effectiveAt": T0})
    main = {i["sk"]["S"] for i in cf.dynamodb.scan(TableName=cf.table)["Items"]}
    history = {i["sk"]["S"] for i in cf.dynamodb.scan(TableName=cf.history_table)["Items"]}
    assert main == {"v0"} and history == {"v#0000000001"}


def test_unknown_or_invalid_parameter_is_refused():
    from changeflow.local.template import Template, TemplateError

    with pytest.raises(TemplateError, match="unknown template parameter"):
        Template(ROOT / "template.yaml", overrides={"NoSuchParameter": "1"})
    with pytest.raises(TemplateError, match="WorkflowType"):
        Template(ROOT / "template.yaml", overrides={"WorkflowType": "FAST"})


def test_tables_get_their_ttl_setting(stack):
    client = stack.client("dynamodb")
    ttl = client.describe_time_to_live(TableName=stack.outputs["ChangeTableName"])["TimeToLiveDescription"]
    assert ttl == {"TimeToLiveStatus": "ENABLED", "AttributeName": "expiresAt"}


def test_executions_are_named_and_history_is_paged_to_the_end(cf):
    execution = cf.submit({"entityId": "doc#1", "operation": "put", "attributes": {}, "changeId": "c-1"})
    assert execution.name.startswith("doc-1--c-1--") and not execution.name.endswith("None")
    pages = []
    page = cf.sfn.get_execution_history(executionArn=execution.arn, maxResults=3)
    pages.append(page)
    assert len(page["events"]) == 3 and page["nextToken"]  # AWS pages; so does the embedded stack
    paged = [e["id"] for e in cf.history(execution.arn, page_size=3)]
    whole = cf.sfn.get_execution_history(executionArn=execution.arn, maxResults=1000)
    assert "nextToken" not in whole  # one page holds it all: the pages of 3 must add up to it, to the last event
    assert paged == [e["id"] for e in whole["events"]] == list(range(1, len(paged) + 1)) and len(paged) > 3 * 3
    assert whole["events"][-1]["type"] == "ExecutionSucceeded"
    assert [e["name"] for e in cf.executions()] == [execution.name]


def test_handler_output_goes_to_the_function_log_not_the_terminal(make_stack, capsys):
    from changeflow.client import Changeflow

    stack = make_stack(LogLevel="DEBUG")  # the step's summary line is DEBUG
    Changeflow.for_embedded(stack).submit({"entityId": "e", "operation": "put", "attributes": {}, "effectiveAt": T0})
    assert '"_aws"' not in capsys.readouterr().out
    logs = list(stack.function("UpdateLatestFunction").logs)
    assert any('"ChangesApplied"' in line for line in logs)
    assert any('"message":"v0 write"' in line and '"execution":' in line for line in logs)


def test_sessions_made_once_a_stack_has_started_share_botocores_parsed_data(stack, tmp_path, monkeypatch):
    """Every stack starts a new default session (moto's mock), every client of a stack has its own: one
    data loader for the process means botocore's JSON is parsed once, not once per session."""
    import botocore.session
    from botocore import loaders

    # GIVEN two sessions made after the stack started
    first, second = botocore.session.get_session(), botocore.session.get_session()
    # THEN they read botocore's data through one loader, and what it gives is what a fresh loader parses
    loader = first.get_component("data_loader")
    assert second.get_component("data_loader") is loader
    assert loader.load_service_model("dynamodb", "service-2") == loaders.create_loader().load_service_model(
        "dynamodb", "service-2")
    assert second.create_client("dynamodb", region_name="us-east-1").meta.service_model.operation_names == \
        first.create_client("dynamodb", region_name="us-east-1").meta.service_model.operation_names
    # AND a session with another data path (AWS_DATA_PATH) has a loader of its own
    monkeypatch.setenv("AWS_DATA_PATH", str(tmp_path))
    assert botocore.session.get_session().get_component("data_loader") is not loader


def test_event_systems_share_the_names_their_aliases_give(stack):
    """Every session's event system, and every client's copy of it, works out which of botocore's renamed
    services an event name uses (EVENT_ALIASES): once a stack has started they share one cache of the answers,
    and every answer is what an event system with a cache of its own works out."""
    import botocore.session
    from botocore import hooks

    # GIVEN two sessions and a client made after the stack started
    first, second = botocore.session.get_session(), botocore.session.get_session()
    client = second.create_client("dynamodb", region_name="us-east-1")
    # THEN they share the names
    shared = first.get_component("event_emitter")._alias_name_cache
    assert second.get_component("event_emitter")._alias_name_cache is shared
    assert client.meta.events._alias_name_cache is shared and shared
    # AND the names are those an event system works out alone, every renamed service's included
    names = list(shared) + [f"before-call.{old}.Operation" for old in hooks.EVENT_ALIASES]
    alone = hooks.EventAliaser(hooks.HierarchicalEmitter())
    alone._alias_name_cache = {}
    assert [first.get_component("event_emitter")._alias_event_name(n) for n in names] == \
        [alone._alias_event_name(n) for n in names]
    assert any(alone._alias_event_name(n) != n for n in names)  # the test can fail: some names are renamed
    # AND other aliases, or the same in another order, have names of their own
    assert hooks.EventAliaser(hooks.HierarchicalEmitter(), {"x": "y"})._alias_name_cache is not shared
    reordered = dict(reversed(list(hooks.EVENT_ALIASES.items())))
    assert hooks.EventAliaser(hooks.HierarchicalEmitter(), reordered)._alias_name_cache is not shared


def test_a_stacks_own_clients_are_made_once_and_each_talks_to_the_stack_of_the_moment():
    """The clients a stack makes its resources with are the process's (changeflow.local.clients), not made
    again for each stack: moto answers every client from the backends of the mock that runs, so a client made
    for one stack sees the next stack's new tables, never the last one's items."""
    from changeflow.local.embedded import EmbeddedStack

    # GIVEN a stack whose own DynamoDB client wrote an item, then stopped
    with EmbeddedStack(ROOT, time_scale=0.0005) as first:
        made = first._client("dynamodb")
        table = first.outputs["ChangeTableName"]
        made.put_item(TableName=table, Item={"pk": {"S": "left"}, "sk": {"S": "v0"}})
        assert made.scan(TableName=table)["Count"] == 1
    # WHEN the next stack starts
    with EmbeddedStack(ROOT, time_scale=0.0005) as second:
        # THEN it has the same client, which finds the new stack's empty table
        assert second._client("dynamodb") is made
        assert made.scan(TableName=second.outputs["ChangeTableName"])["Count"] == 0
        # AND a stack's public client() is still a new one each call
        assert second.client("dynamodb") is not made


def test_a_shared_client_is_one_identitys_and_iam_judges_its_signer_in_each_stack(monkeypatch):
    """Clients are shared only between callers that would make the same client: credentials above all, since IAM
    is evaluated per signer (moto_patches.iam). A client for other credentials is another client; a shared client
    signs as the credentials it was made with, and each stack's IAM judges them."""
    from botocore.exceptions import ClientError
    from moto.iam.models import iam_backends

    from changeflow.local import clients
    from changeflow.local.embedded import EmbeddedStack
    from changeflow.local.template import ACCOUNT

    def user(stack, effect):
        iam = stack.client("iam")
        iam.create_user(UserName="mallory")
        iam.put_user_policy(UserName="mallory", PolicyName="p", PolicyDocument=json.dumps({
            "Version": "2012-10-17", "Statement": [{"Effect": effect, "Action": "dynamodb:*", "Resource": "*"}]}))
        return iam.create_access_key(UserName="mallory")["AccessKey"]

    def signing_as(patch, key):  # the environment's credentials: what a new client would take
        patch.setenv("AWS_ACCESS_KEY_ID", key["AccessKeyId"])
        patch.setenv("AWS_SECRET_ACCESS_KEY", key["SecretAccessKey"])
        patch.delenv("AWS_SESSION_TOKEN", raising=False)
        return clients.client("dynamodb", "us-east-1", retries={"mode": "standard"})

    # GIVEN a stack, its own client (the administrator's), and mallory, whom IAM lets use DynamoDB
    with EmbeddedStack(ROOT, time_scale=0.0005) as first:
        administrator = first._client("dynamodb")
        key = user(first, "Allow")
        with monkeypatch.context() as patch:
            # WHEN a client is asked for with her credentials in the environment: it is another client, hers
            hers = signing_as(patch, key)
            assert hers is not administrator
            assert hers.list_tables()["TableNames"]
        assert clients.client("dynamodb", "us-east-1", retries={"mode": "standard"}) is administrator
    # WHEN the next stack starts, where her key is a mallory's whom IAM denies DynamoDB
    with EmbeddedStack(ROOT, time_scale=0.0005) as second:
        assert second._client("dynamodb") is administrator
        user(second, "Deny")
        moved = iam_backends[ACCOUNT]["aws"].get_user("mallory").access_keys[0]  # behind IAM's back: the old key
        moved.access_key_id, moved.secret_access_key = key["AccessKeyId"], key["SecretAccessKey"]
        with monkeypatch.context() as patch:
            # THEN her credentials get her client again, and this stack's IAM refuses what it signs
            assert signing_as(patch, key) is hers
            with pytest.raises(ClientError, match="mallory is not authorized to perform: dynamodb:ListTables"):
                hers.list_tables()
        # AND the administrator's client is still allowed
        assert administrator.list_tables()["TableNames"]


def test_a_shared_client_that_could_carry_something_is_not_handed_out_again(stack):
    """What a client could carry from one stack to the next (a handler on its event system, its retry quota, its
    S3 region cache) changes only by a registration or an error: such a client is replaced by a new one."""
    from botocore.exceptions import ClientError

    from changeflow.local import clients

    def shared():
        return clients.client("dynamodb", stack.region, retries={"mode": "standard"})

    # GIVEN the shared client, handed out again while nothing happened to it
    first = shared()
    first.list_tables()
    assert shared() is first
    # WHEN a handler is registered on its event system, THEN the next one asked for is another
    first.meta.events.register("before-call.dynamodb", lambda **kwargs: None)
    second = shared()
    assert second is not first
    # AND one that answered an error is replaced too
    with pytest.raises(ClientError):
        second.describe_table(TableName="no-such-table")
    third = shared()
    assert third is not second
    assert shared() is third


def test_a_user_agents_parts_are_sanitized_as_botocore_sanitizes_them(stack):
    """Every request's User-Agent is built again from its parts, each sanitized character by character: once a
    stack has started, each part is sanitized once for the process, to what botocore's function makes of it."""
    from botocore import useragent

    sanitize = useragent.sanitize_user_agent_string_component
    assert sanitize.cache_info().currsize  # the stack's own requests filled it
    for part in ("Boto3", "1.43.108", "md/awscrt#0.27", "exec-env/AWS Lambda", "app/ünïcode (x)", "", "a#b~c"):
        for allow_hash in (True, False):
            assert sanitize(part, allow_hash) == sanitize.__wrapped__(part, allow_hash)
    assert sanitize("a#b c", False) == "a-b-c" and sanitize("a#b c", True) == "a#b-c"  # the test can fail


def test_a_handlers_kwargs_are_read_from_its_code_as_inspect_reads_them(stack):
    """An event system checks that each handler it is given takes ``**kwargs``: once a stack has started, a plain
    function's (or a method's) answer is read from its code object, and it is what inspect answers."""
    import functools
    import inspect

    from botocore import hooks
    from botocore.handlers import BUILTIN_HANDLERS

    class Handlers:
        def method(self, a, *args, key=1, **kwargs): ...
        def plain(self, a): ...
        @staticmethod
        def static(**rest): ...
        @classmethod
        def of_class(cls, *, z, **named): ...

    def positional_only(a, /, b, **kw): ...
    def no_kwargs(a, *args): ...
    def signed(a, **kw): ...
    signed.__signature__ = inspect.Signature([inspect.Parameter("a", inspect.Parameter.POSITIONAL_ONLY)])
    handlers = [h[1] for h in BUILTIN_HANDLERS] + [
        Handlers().method, Handlers().plain, Handlers.static, Handlers.of_class, positional_only, no_kwargs, signed,
        lambda **kwargs: None, functools.partial(positional_only, 1), Handlers, print]
    assert hooks.accepts_kwargs.__module__ == "changeflow.local.botocore_loader"
    assert [hooks.accepts_kwargs(h) for h in handlers] == [inspect.getfullargspec(h)[2] for h in handlers]
    assert hooks.accepts_kwargs(signed) is None and hooks.accepts_kwargs(positional_only) == "kw"  # can fail


def test_the_templates_parse_is_shared_only_with_readers():
    """Every stack reads the template's parameters from the parse all callers share (no deep copy of the whole
    template for a look at it); every other caller gets a copy of its own to change."""
    from changeflow.local.template import load_yaml

    shared = load_yaml(ROOT / "template.yaml", read_only=True)
    assert load_yaml(ROOT / "template.yaml", read_only=True) is shared
    mine = load_yaml(ROOT / "template.yaml")
    assert mine == shared and mine is not shared
    mine["Parameters"].clear()
    assert shared["Parameters"] and load_yaml(ROOT / "template.yaml")["Parameters"] == shared["Parameters"]


def test_a_handlers_import_sees_its_functions_environment_and_no_other_thread_does(tmp_path, monkeypatch):
    """A handler's module reads its variables at import (LambdaService.load, a cold start). An execution left
    running by an earlier stack may be importing one while the next stack starts: the mock's credentials must
    land in the process's environment (a change lost there made a new client ask 169.254.169.254 for
    credentials), and no other thread may see the function's variables meanwhile (on Lambda they are its own
    process's)."""
    import os
    import sys
    import types

    from changeflow.local.embedded import EmbeddedStack
    from changeflow.local.lambdas import Function, LambdaService

    # GIVEN a handler whose import waits until it is told to go on, then reads its environment
    gate = types.SimpleNamespace(importing=threading.Event(), go_on=threading.Event())
    monkeypatch.setitem(sys.modules, "_changeflow_import_gate", gate)
    (tmp_path / "app.py").write_text(
        "import os\nimport _changeflow_import_gate as gate\n"
        "os.environ['WRITTEN_BY_THE_IMPORT'] = 'x'\n"
        "gate.importing.set()\nassert gate.go_on.wait(10)\n"
        "SEEN = dict(os.environ)\n\ndef handler(event, context):\n    return SEEN\n", encoding="utf-8")
    function = Function("Elsewhere", "elsewhere", "arn:aws:lambda:us-east-1:123456789012:function:elsewhere",
                        tmp_path, "app.handler", {"ONLY_ITS_OWN": "yes", "AWS_DEFAULT_REGION": "eu-west-1"})
    service = LambdaService([])
    importer = threading.Thread(target=service.load, args=(function,), daemon=True)
    importer.start()
    assert gate.importing.wait(10)
    # WHEN a stack starts while that import is under way, and then the import ends
    try:
        # THEN this thread sees neither the function's variables nor what its import wrote
        assert "ONLY_ITS_OWN" not in os.environ and "WRITTEN_BY_THE_IMPORT" not in os.environ
        assert os.environ["AWS_DEFAULT_REGION"] == "us-east-1" and os.getenv("ONLY_ITS_OWN") is None
        with EmbeddedStack(ROOT, time_scale=0.0005) as stack:
            assert os.environ["AWS_ACCESS_KEY_ID"] == "FOOBARKEY"  # moto's, in the process's own environment
            gate.go_on.set()
            importer.join(10)
            assert "TableNames" in stack.client("dynamodb").list_tables()
    finally:
        gate.go_on.set()
    assert os.environ["AWS_ACCESS_KEY_ID"] == "testing"  # put back when the mock stopped
    # and the import saw its function's environment over the process's, and wrote only there
    seen = function.module.SEEN
    assert seen["ONLY_ITS_OWN"] == "yes" and seen["AWS_DEFAULT_REGION"] == "eu-west-1"
    assert seen["WRITTEN_BY_THE_IMPORT"] == "x" and "WRITTEN_BY_THE_IMPORT" not in os.environ
    assert seen["CHANGEFLOW_ROOT"] == os.environ["CHANGEFLOW_ROOT"]  # the process's, beneath


def test_an_imports_overlay_answers_as_os_environ_does_and_keeps_its_changes_to_itself(monkeypatch):
    import os

    from changeflow.local import environ

    monkeypatch.setenv("BENEATH", "process")
    view = environ.install()
    with environ.over({"OWN": "1"}):
        del os.environ["BENEATH"]  # deleted for this thread only
        with pytest.raises(KeyError):
            del os.environ["NEVER_SET"]
        with pytest.raises(TypeError):
            os.environ["OWN"] = 1  # what os.environ refuses
        assert "BENEATH" not in os.environ and os.environ.copy()["OWN"] == "1"
        assert len(os.environ) == len(dict(os.environ))
        assert (os.environ | {"X": "y"})["X"] == "y" and os.getenv("OWN") == "1"
    assert os.environ is view and os.environ["BENEATH"] == "process" and "OWN" not in os.environ
