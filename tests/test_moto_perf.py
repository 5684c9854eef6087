"""moto's perf patches (each service's ``perf`` module in changeflow.local.moto_patches): each answers
exactly what moto answers, only faster.

For each patch, the same requests are answered by the patched code and by moto's own code on the same
data, and the answers must be identical: the same items, in the same order, with the same
``LastEvaluatedKey`` page after page (DynamoDB Query, on random tables); the same execution found or the
same error (StartExecution's name check, DescribeExecution); the same history events (a closed
execution). Then the cost each patch removes is shown structurally, by what moto's code visits, never
by timing (timings are in benchmarks/scaling.py)."""

from __future__ import annotations

import copy
import itertools
import json
import threading
import time
from decimal import Decimal

import boto3
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from moto import mock_aws
from moto.dynamodb.models.table import Table

from changeflow.local import moto_patches
from changeflow.local.moto_patches.dynamodb.perf import Partition, Partitions
from changeflow.local.moto_patches.originals import ORIGINALS
from changeflow.local.moto_patches.stepfunctions.perf import (
    JSON_COPYING_MODULES, ClosedHistory, Executions, PackedLogEvents, json_deepcopy,
)
from conftest import LOGGED, ROOT

moto_patches.install_perf()
PATCHED_QUERY = Table.query
STOCK_QUERY = ORIGINALS["table_query"]
PATCHED_SCAN = Table.scan
STOCK_SCAN = ORIGINALS["table_scan"]

TABLES = itertools.count()

# --- DynamoDB Query -------------------------------------------------------------------------------------
S_KEYS = st.text(alphabet="ab#0", min_size=1, max_size=4)
N_KEYS = st.decimals(min_value=-50, max_value=50, places=1, allow_nan=False).map(lambda d: str(d.normalize()))
SIZES = st.sampled_from([0, 10, 1000, 1000, 1000, 300_000])  # 300 KB items make moto's 1 MB page limit bite


@st.composite
def tables(draw):
    kind = draw(st.sampled_from(["S", "N"]))
    keys = S_KEYS if kind == "S" else N_KEYS
    writes = draw(st.lists(st.tuples(st.sampled_from(["p1", "p2", "p3"]), keys, SIZES, st.booleans()),
                           min_size=0, max_size=25))
    later = draw(st.lists(st.tuples(st.sampled_from(["p1", "p2"]), keys, SIZES, st.booleans()), max_size=10))
    return kind, writes, later


@st.composite
def queries(draw, kind):
    keys = S_KEYS if kind == "S" else N_KEYS
    query = {"pk": draw(st.sampled_from(["p1", "p2", "p3", "absent"])),
             "forward": draw(st.booleans()),
             "limit": draw(st.one_of(st.none(), st.integers(1, 5))),
             "condition": draw(st.sampled_from(
                 [None, "=", "<", "<=", ">", ">=", "BETWEEN"] + (["begins_with"] if kind == "S" else []))),
             "values": draw(st.lists(keys, min_size=2, max_size=2)),
             "filter": draw(st.booleans()),
             "project": draw(st.booleans())}
    return query


def _request(table: str, kind: str, q: dict) -> dict:
    names, values = {"#pk": "pk"}, {":pk": {"S": q["pk"]}}
    condition = "#pk = :pk"
    if q["condition"]:
        names["#sk"] = "sk"
        a, b = ({kind: v} for v in q["values"])
        values[":a"] = a
        if q["condition"] == "BETWEEN":
            values[":b"] = b
            condition += " AND #sk BETWEEN :a AND :b"
        elif q["condition"] == "begins_with":
            condition += " AND begins_with(#sk, :a)"
        else:
            condition += f" AND #sk {q['condition']} :a"
    request = {"TableName": table, "KeyConditionExpression": condition, "ExpressionAttributeNames": names,
               "ExpressionAttributeValues": values, "ScanIndexForward": q["forward"]}
    if q["limit"]:
        request["Limit"] = q["limit"]
    if q["filter"]:
        request["FilterExpression"] = "attribute_exists(big)"
    if q["project"]:
        request["ProjectionExpression"] = "sk, n"
    return request


def _all_pages(client, request: dict) -> list[dict]:
    """Every page of a Query, following LastEvaluatedKey: items, counts and the key of each page."""
    pages, start = [], None
    for _ in range(200):
        page = client.query(**request, **({"ExclusiveStartKey": start} if start else {}))
        pages.append({k: page.get(k) for k in ("Items", "Count", "ScannedCount", "LastEvaluatedKey")})
        start = page.get("LastEvaluatedKey")
        if not start:
            return pages
    raise AssertionError("a Query that never ends")


def _both(client, request: dict) -> tuple[list[dict], list[dict]]:
    patched = _all_pages(client, request)
    Table.query = STOCK_QUERY
    try:
        stock = _all_pages(client, request)
    finally:
        Table.query = PATCHED_QUERY
    return patched, stock


def _write(client, table: str, kind: str, writes) -> None:
    for pk, sk, size, delete in writes:
        key = {"pk": {"S": pk}, "sk": {kind: sk}}
        if delete:
            client.delete_item(TableName=table, Key=key)
        else:
            item = {**key, "n": {"N": str(size)}}
            if size:
                item["big"] = {"S": "x" * size}
            client.put_item(TableName=table, Item=item)


@pytest.fixture
def dynamodb():
    with mock_aws():
        yield boto3.client("dynamodb", region_name="us-east-1")


@settings(max_examples=int(__import__("os").environ.get("MOTO_PERF_EXAMPLES", "50")), deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                 HealthCheck.function_scoped_fixture])
@given(data=st.data(), table_spec=tables())
def test_a_query_answers_what_moto_answers_on_random_tables(dynamodb, data, table_spec):
    """Same items, same order, same counts, same LastEvaluatedKey on every page, before and after more
    writes and deletes (the sorted keys are kept up to date, not rebuilt)."""
    kind, writes, later = table_spec
    client, table = dynamodb, f"t{next(TABLES)}"
    if True:  # noqa: SIM108
        client.create_table(TableName=table, BillingMode="PAY_PER_REQUEST",
                            KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"},
                                       {"AttributeName": "sk", "KeyType": "RANGE"}],
                            AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"},
                                                  {"AttributeName": "sk", "AttributeType": kind}])
        _write(client, table, kind, writes)
        for round_ in (1, 2):
            for q in data.draw(st.lists(queries(kind), min_size=1, max_size=4), label=f"queries {round_}"):
                patched, stock = _both(client, _request(table, kind, q))
                assert patched == stock
            _write(client, table, kind, later)
        client.delete_table(TableName=table)


# --- DynamoDB Scan --------------------------------------------------------------------------------------
@st.composite
def scan_tables(draw):
    hash_kind = draw(st.sampled_from(["S", "N"]))
    range_kind = draw(st.sampled_from([None, "S", "N"]))
    hashes = S_KEYS if hash_kind == "S" else N_KEYS
    ranges = N_KEYS if range_kind == "N" else S_KEYS
    write = st.tuples(hashes, ranges, SIZES, st.integers(0, 4))  # 0: a delete; 1-4: a put
    return hash_kind, range_kind, draw(st.lists(write, max_size=30)), draw(st.lists(write, max_size=10))


@st.composite
def scans(draw, hash_kind, range_kind):
    hashes = S_KEYS if hash_kind == "S" else N_KEYS
    ranges = N_KEYS if range_kind == "N" else S_KEYS
    start = draw(st.one_of(st.none(), st.tuples(hashes, ranges)))  # a key that may or may not be there
    return {"limit": draw(st.one_of(st.none(), st.integers(1, 5))),
            "segments": draw(st.sampled_from([None, (0, 1), (0, 3), (2, 3)])),
            "filter": draw(st.sampled_from([None, "expression", "scan_filter"])),
            "project": draw(st.booleans()),
            "start": start}


def _scan_request(table: str, hash_kind: str, range_kind: str | None, q: dict) -> dict:
    request: dict = {"TableName": table}
    if q["limit"]:
        request["Limit"] = q["limit"]
    if q["segments"]:
        request["Segment"], request["TotalSegments"] = q["segments"]
    if q["filter"] == "expression":
        request["FilterExpression"] = "n > :n"
        request["ExpressionAttributeValues"] = {":n": {"N": "10"}}
    elif q["filter"] == "scan_filter":
        request["ScanFilter"] = {"n": {"AttributeValueList": [{"N": "10"}], "ComparisonOperator": "GT"}}
    if q["project"]:
        request["ProjectionExpression"] = "pk, n"
    if q["start"]:
        request["ExclusiveStartKey"] = {"pk": {hash_kind: q["start"][0]}}
        if range_kind:
            request["ExclusiveStartKey"]["sk"] = {range_kind: q["start"][1]}
    return request


def _all_scan_pages(client, request: dict) -> list[dict]:
    pages, start = [], request.pop("ExclusiveStartKey", None)
    for _ in range(200):
        page = client.scan(**request, **({"ExclusiveStartKey": start} if start else {}))
        pages.append({k: page.get(k) for k in ("Items", "Count", "ScannedCount", "LastEvaluatedKey")})
        start = page.get("LastEvaluatedKey")
        if not start:
            return pages
    raise AssertionError("a Scan that never ends")


def _both_scans(client, request: dict) -> tuple[list[dict], list[dict]]:
    patched = _all_scan_pages(client, dict(request))
    Table.scan = STOCK_SCAN
    try:
        stock = _all_scan_pages(client, dict(request))
    finally:
        Table.scan = PATCHED_SCAN
    return patched, stock


def _write_scan_table(client, table: str, hash_kind: str, range_kind: str | None, writes) -> None:
    for pk, sk, size, put in writes:
        key = {"pk": {hash_kind: pk}, **({"sk": {range_kind: sk}} if range_kind else {})}
        if put:
            item = {**key, "n": {"N": str(size % 23)}, **({"big": {"S": "x" * size}} if size else {})}
            client.put_item(TableName=table, Item=item)
        elif put == 0 and size % 2:
            client.get_item(TableName=table, Key=key)  # moto makes an empty partition for an absent key
        else:
            client.delete_item(TableName=table, Key=key)


@settings(max_examples=int(__import__("os").environ.get("MOTO_PERF_EXAMPLES", "50")), deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                 HealthCheck.function_scoped_fixture])
@given(data=st.data(), table_spec=scan_tables())
def test_a_scan_answers_what_moto_answers_on_random_tables(dynamodb, data, table_spec):
    """Every page of a Scan (with Limit, segments, a filter, a projection, an ExclusiveStartKey that may
    name no item): the same items, in the same order, the same counts and LastEvaluatedKey as moto's
    own Scan, on tables with and without a sort key, before and after more writes and deletes."""
    hash_kind, range_kind, writes, later = table_spec
    client, table = dynamodb, f"s{next(TABLES)}"
    schema = [{"AttributeName": "pk", "KeyType": "HASH"}]
    definitions = [{"AttributeName": "pk", "AttributeType": hash_kind}]
    if range_kind:
        schema.append({"AttributeName": "sk", "KeyType": "RANGE"})
        definitions.append({"AttributeName": "sk", "AttributeType": range_kind})
    client.create_table(TableName=table, BillingMode="PAY_PER_REQUEST", KeySchema=schema,
                        AttributeDefinitions=definitions)
    _write_scan_table(client, table, hash_kind, range_kind, writes)
    for round_ in (1, 2):
        for q in data.draw(st.lists(scans(hash_kind, range_kind), min_size=1, max_size=4), label=f"scans {round_}"):
            patched, stock = _both_scans(client, _scan_request(table, hash_kind, range_kind, q))
            assert patched == stock
        _write_scan_table(client, table, hash_kind, range_kind, later)
    client.delete_table(TableName=table)


def test_a_scan_page_starts_at_its_start_key(monkeypatch):
    """The cost removed: stock moto sorts the whole table (``all_items``) for every page of a Scan and walks
    it from its first item to the start key. Patched, a page deep in a table of 200 entities (one with 300
    versions) visits only the page and the one item that tells moto the page is full."""
    with mock_aws():
        client = boto3.client("dynamodb", region_name="us-east-1")
        _history_table(client, versions=300, others=200, name="scanned")
        from moto.dynamodb.models.dynamo_type import Item

        whole_table, visited = [], []
        original_size = Item.size
        monkeypatch.setattr(Table, "all_items", lambda self: whole_table.append(1) or [])

        def size(item):
            visited.append((item.hash_key.value, item.range_key.value))
            return original_size(item)

        monkeypatch.setattr(Item, "size", size)
        page = client.scan(TableName="scanned", Limit=3,
                           ExclusiveStartKey={"pk": {"S": "doc#1"}, "sk": {"S": "v#00000299"}})
        assert [(i["pk"]["S"], i["sk"]["S"]) for i in page["Items"]] == [
            ("doc#1", "v#00000300"), ("doc#1", "v0"), ("other#0", "v0")]  # "v0" sorts after "v#..."
        assert page["LastEvaluatedKey"] == {"pk": {"S": "other#0"}, "sk": {"S": "v0"}}
        assert whole_table == []
        # moto sizes each item of the page twice (limit check, page size) and the one past the page once
        assert set(visited) == {("doc#1", "v#00000300"), ("doc#1", "v0"), ("other#0", "v0"), ("other#1", "v0")}


def test_the_sorted_partition_keys_follow_new_and_removed_partitions():
    from moto.dynamodb.models.dynamo_type import DynamoType

    key = lambda s: DynamoType({"S": s})  # noqa: E731
    partitions = Partitions(Partition)
    partitions[key("c")][key("v0")] = "c"
    partitions[key("a")][key("v0")] = "a"
    assert [k.value for k in partitions.sorted_keys()[0]] == ["a", "c"]
    partitions[key("b")][key("v0")] = "b"  # a new partition made by defaultdict is indexed
    del partitions[key("c")]
    assert [k.value for k in partitions.sorted_keys()[0]] == ["a", "b"]
    clone = copy.deepcopy(partitions)
    clone[key("0")][key("v0")] = "0"
    assert [k.value for k in clone.sorted_keys()[0]] == ["0", "a", "b"]
    assert [k.value for k in partitions.sorted_keys()[0]] == ["a", "b"]
    assert type(clone) is Partitions and type(clone[key("a")]) is Partition


def test_a_hash_key_only_table_answers_the_same():
    with mock_aws():
        client = boto3.client("dynamodb", region_name="us-east-1")
        client.create_table(TableName="h", BillingMode="PAY_PER_REQUEST",
                            KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
                            AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}])
        for n in range(5):
            client.put_item(TableName="h", Item={"pk": {"S": f"k{n}"}, "n": {"N": str(n)}})
        request = {"TableName": "h", "KeyConditionExpression": "pk = :p",
                   "ExpressionAttributeValues": {":p": {"S": "k3"}}}
        patched, stock = _both(client, request)
        assert patched == stock and patched[0]["Items"] == [{"pk": {"S": "k3"}, "n": {"N": "3"}}]


def _history_table(client, versions: int, others: int, name: str = "v") -> None:
    client.create_table(TableName=name, BillingMode="PAY_PER_REQUEST",
                        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
                        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"},
                                              {"AttributeName": "sk", "AttributeType": "S"}])
    for n in range(1, versions + 1):
        client.put_item(TableName=name, Item={"pk": {"S": "doc#1"}, "sk": {"S": f"v#{n:08d}"}})
    client.put_item(TableName=name, Item={"pk": {"S": "doc#1"}, "sk": {"S": "v0"}})
    for n in range(others):
        client.put_item(TableName=name, Item={"pk": {"S": f"other#{n}"}, "sk": {"S": "v0"}})


def test_a_query_reads_one_partition_from_its_start_key(monkeypatch):
    """The cost removed: stock moto sorts the whole table (``all_items``) on every Query and walks the
    partition from its first item to the start key. Patched, a page deep in a 300-version partition of a
    table that holds 200 other entities visits no other partition and only the page (plus the one item
    that tells moto the page is full)."""
    with mock_aws():
        client = boto3.client("dynamodb", region_name="us-east-1")
        _history_table(client, versions=300, others=200)
        from moto.dynamodb.models.dynamo_type import Item

        whole_table, visited = [], []
        original_size = Item.size
        monkeypatch.setattr(Table, "all_items", lambda self: whole_table.append(1) or [])

        def size(item):
            visited.append(item.range_key.value)
            return original_size(item)

        monkeypatch.setattr(Item, "size", size)
        page = client.query(TableName="v", KeyConditionExpression="pk = :p AND begins_with(sk, :h)",
                            ExpressionAttributeValues={":p": {"S": "doc#1"}, ":h": {"S": "v#"}}, Limit=10,
                            ExclusiveStartKey={"pk": {"S": "doc#1"}, "sk": {"S": "v#00000150"}})
        assert [i["sk"]["S"] for i in page["Items"]] == [f"v#{n:08d}" for n in range(151, 161)]
        assert page["LastEvaluatedKey"] == {"pk": {"S": "doc#1"}, "sk": {"S": "v#00000160"}}
        assert whole_table == []
        # moto sizes each visited item twice (limit check, page size) and the one past the page once
        assert set(visited) == {f"v#{n:08d}" for n in range(151, 162)}
        newest = client.query(TableName="v", KeyConditionExpression="pk = :p AND begins_with(sk, :h)",
                              ExpressionAttributeValues={":p": {"S": "doc#1"}, ":h": {"S": "v#"}},
                              ScanIndexForward=False, Limit=1)
        assert newest["Items"] == [{"pk": {"S": "doc#1"}, "sk": {"S": "v#00000300"}}]


def test_the_sorted_keys_follow_writes_and_deletes():
    partition = Partition()
    from moto.dynamodb.models.dynamo_type import DynamoType

    key = lambda s: DynamoType({"S": s})  # noqa: E731
    for s in ("c", "a"):
        partition[key(s)] = s
    assert [k.value for k in partition.sorted_keys()[0]] == ["a", "c"]
    partition[key("b")] = "b"
    partition[key("a")] = "a2"  # an overwrite keeps one key
    del partition[key("c")]
    assert partition.pop(key("zz"), None) is None
    assert [k.value for k in partition.sorted_keys()[0]] == ["a", "b"]
    clone = copy.deepcopy(partition)
    clone[key("0")] = "0"
    assert [k.value for k in clone.sorted_keys()[0]] == ["0", "a", "b"]
    assert [k.value for k in partition.sorted_keys()[0]] == ["a", "b"]


# --- Step Functions -------------------------------------------------------------------------------------
MACHINE = json.dumps({"StartAt": "Choose", "States": {
    "Choose": {"Type": "Choice", "Choices": [{"Variable": "$.hold", "BooleanEquals": True, "Next": "Hold"}],
               "Default": "Done"},
    "Hold": {"Type": "Wait", "Seconds": 3600, "Next": "Done"},
    "Done": {"Type": "Pass", "End": True}}})
HOLD_NOT = json.dumps({"hold": False})


@pytest.fixture
def machine():
    from moto.stepfunctions.parser.models import stepfunctions_parser_backends

    with mock_aws(config={"stepfunctions": {"execute_state_machine": True}}):
        sfn = boto3.client("stepfunctions", region_name="us-east-1")
        arn = sfn.create_state_machine(name=f"m{next(TABLES)}", definition=MACHINE,
                                       roleArn="arn:aws:iam::123456789012:role/r")["stateMachineArn"]
        backend = stepfunctions_parser_backends["123456789012"]["us-east-1"]
        try:
            yield sfn, arn, backend
        finally:
            for e in sfn.list_executions(stateMachineArn=arn, statusFilter="RUNNING")["executions"]:
                sfn.stop_execution(executionArn=e["executionArn"])


def _wait_closed(sfn, arns):
    for arn in arns:
        for _ in range(200):
            if sfn.describe_execution(executionArn=arn)["status"] != "RUNNING":
                break
            time.sleep(0.01)


def _outcome(call):
    try:
        return ("found", id(call()))
    except Exception as exc:  # noqa: BLE001 - the comparison is of which error
        return ("error", type(exc).__name__, str(exc))


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(starts=st.lists(st.tuples(st.sampled_from(["a", "b", "c", "d"]), st.booleans()), min_size=1, max_size=6),
       probes=st.lists(st.tuples(st.sampled_from(["a", "b", "c", "d", "e"]), st.booleans()), min_size=1, max_size=8))
def test_start_and_describe_find_what_moto_finds(machine, starts, probes):
    """StartExecution's name check (the same execution back for the same name and input while it runs,
    ExecutionAlreadyExists otherwise) and DescribeExecution, patched and stock, on the same executions."""
    sfn, arn, backend = machine
    from moto.stepfunctions.models import StateMachine, StepFunctionBackend

    state_machine = backend.describe_state_machine(arn)
    prefix = f"{len(state_machine.executions)}-"  # names unique across hypothesis examples
    started = []
    for name, hold in starts:
        try:
            started.append(sfn.start_execution(stateMachineArn=arn, name=prefix + name,
                                               input=json.dumps({"hold": hold}))["executionArn"])
        except sfn.exceptions.ExecutionAlreadyExists:
            pass
    _wait_closed(sfn, [a for a, (_, hold) in zip(started, starts) if not hold])
    stock_check = ORIGINALS["idempotency"]
    stock_describe = ORIGINALS["describe_execution"]
    for name, hold in probes:
        body = json.dumps({"hold": hold})
        assert _outcome(lambda: StateMachine._handle_name_input_idempotency(state_machine, prefix + name, body)) \
            == _outcome(lambda: stock_check(state_machine, prefix + name, body))
        execution_arn = arn.replace(":stateMachine:", ":execution:") + ":" + prefix + name
        assert _outcome(lambda: StepFunctionBackend.describe_execution(backend, execution_arn)) \
            == _outcome(lambda: stock_describe(backend, execution_arn))


def test_lookups_do_not_walk_the_executions(machine):
    """The cost removed: stock moto walks every execution of the machine on each StartExecution and
    DescribeExecution. Patched, neither iterates the list."""
    sfn, arn, backend = machine
    arns = [sfn.start_execution(stateMachineArn=arn, name=f"x{n}", input=HOLD_NOT)["executionArn"] for n in range(30)]
    _wait_closed(sfn, arns)
    executions = backend.describe_state_machine(arn).executions
    walked = []
    original_iter = Executions.__iter__
    Executions.__iter__ = lambda self: walked.append(1) or original_iter(self)
    try:
        assert sfn.describe_execution(executionArn=arns[17])["name"] == "x17"
        with pytest.raises(sfn.exceptions.ExecutionAlreadyExists):
            sfn.start_execution(stateMachineArn=arn, name="x3", input=HOLD_NOT)
        sfn.start_execution(stateMachineArn=arn, name="new", input=HOLD_NOT)
    finally:
        Executions.__iter__ = original_iter
    assert walked == []
    assert isinstance(executions, Executions) and len(executions) == 31


def test_a_closed_execution_keeps_its_history_and_drops_its_interpreter(machine, monkeypatch):
    """GetExecutionHistory of a closed execution returns the events the interpreter recorded, exactly;
    what is kept is those events, compressed, not the interpreter's environment."""
    sfn, arn, backend = machine
    recorded = {}
    original_init = ClosedHistory.__init__

    def record(self, env):
        execution_arn = env.states.context_object.context_object_data["Execution"]["Id"]
        recorded[execution_arn] = copy.deepcopy(env.event_manager.get_event_history())
        original_init(self, env)

    monkeypatch.setattr(ClosedHistory, "__init__", record)
    arns = [sfn.start_execution(stateMachineArn=arn, name=f"h{n}", input=json.dumps({"n": n, "hold": False}))["executionArn"]
            for n in range(3)]
    _wait_closed(sfn, arns)
    for execution_arn in arns:
        execution = backend.describe_execution(execution_arn)
        for _ in range(200):  # the status is set first, then the execution is compacted (same thread)
            if isinstance(execution.exec_worker.env, ClosedHistory):
                break
            time.sleep(0.01)
        assert isinstance(execution.exec_worker.env, ClosedHistory)
        assert backend.get_execution_history(execution_arn)["events"] == recorded[execution_arn]
        assert len(recorded[execution_arn]) >= 5  # started, states entered/exited, succeeded
        assert sfn.describe_execution(executionArn=execution_arn)["status"] == "SUCCEEDED"
    sfn.stop_execution(executionArn=arns[0])  # a closed execution: nothing to stop, nothing changes
    assert sfn.describe_execution(executionArn=arns[0])["status"] == "SUCCEEDED"
    assert threading.active_count() < 50


# --- The interpreter's deep copies of JSON ----------------------------------------------------------------
JSON = st.recursive(st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=5),
                              st.binary(max_size=3)),
                    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=3), inner, max_size=4)),
                    max_leaves=25)
FOREIGN = st.sampled_from([lambda: (1, [2]), lambda: {3, 4}, lambda: __import__("collections").OrderedDict(a=[1]),
                           lambda: __import__("datetime").datetime(2026, 1, 1), lambda: __import__("decimal").Decimal("1.5")])


def _shape(value, seen=None) -> object:
    """A value's structure with each container named by the order it is first met: equal shapes mean equal
    values with the same sharing (a container met twice is the same object both times)."""
    seen = {} if seen is None else seen
    if isinstance(value, (dict, list, tuple, set)) or hasattr(value, "__dict__"):
        if id(value) in seen:
            return ("again", seen[id(value)])
        seen[id(value)] = len(seen)
        if isinstance(value, dict):
            return (type(value).__name__, [(k, _shape(v, seen)) for k, v in value.items()])
        if isinstance(value, (list, tuple)):
            return (type(value).__name__, [_shape(v, seen) for v in value])
        return (type(value).__name__, repr(value))
    return (type(value).__name__, value)


def _containers(value, found=None) -> list:
    found = {} if found is None else found
    if isinstance(value, (dict, list, set)) and id(value) not in found:
        found[id(value)] = value
        for inner in (value.values() if isinstance(value, dict) else value):
            _containers(inner, found)
    return list(found.values())


@settings(max_examples=200, deadline=None)
@given(data=st.data(), value=JSON)
def test_the_json_deep_copy_makes_the_copy_copy_deepcopy_makes(data, value):
    """The same structure, the same sharing (a value met twice is one copy met twice, a cycle stays a cycle),
    nothing shared with the original but immutable scalars, and what is not JSON copied by copy.deepcopy."""
    shared = data.draw(st.dictionaries(st.text(max_size=2), JSON, max_size=2))
    foreign = data.draw(FOREIGN)()
    whole = {"value": value, "shared": shared, "again": shared, "foreign": foreign, "list": [shared, value]}
    cyclic = [whole]
    cyclic.append(cyclic)
    for original in (value, whole, cyclic):
        ours, theirs = json_deepcopy(original), copy.deepcopy(original)
        assert _shape(ours) == _shape(theirs)
        originals = {id(c) for c in _containers(original)}
        assert not any(id(c) in originals for c in _containers(ours))
    # what is not JSON is copied as copy.deepcopy copies it (an immutable Decimal or datetime is kept as it is)
    assert (json_deepcopy(whole)["foreign"] is foreign) == (copy.deepcopy(whole)["foreign"] is foreign)


def test_the_interpreter_copies_with_the_json_deep_copy_and_answers_the_same():
    """Each interpreter module copies through it; an execution's history is the same event for event as with
    copy.deepcopy (InputPath, Parameters, ResultPath and OutputPath copy at each step)."""
    import importlib

    modules = [importlib.import_module(name) for name in JSON_COPYING_MODULES]
    assert all(module.copy.deepcopy is json_deepcopy for module in modules)
    definition = json.dumps({"StartAt": "Shape", "States": {
        "Shape": {"Type": "Pass", "Parameters": {"a.$": "$.a", "both.$": "$", "fixed": [1, {"x": None}]},
                  "ResultPath": "$.shaped", "Next": "Out"},
        "Out": {"Type": "Pass", "InputPath": "$.shaped", "Parameters": {"kept.$": "$.both.b"}, "OutputPath": "$.kept",
                "End": True}}})

    def run(label):
        with mock_aws(config={"stepfunctions": {"execute_state_machine": True}}):
            sfn = boto3.client("stepfunctions", region_name="us-east-1")
            arn = sfn.create_state_machine(name=f"copy{label}", definition=definition,
                                           roleArn="arn:aws:iam::123456789012:role/r")["stateMachineArn"]
            execution = sfn.start_execution(stateMachineArn=arn, input=json.dumps(
                {"a": [1, 2, {"deep": ["x"]}], "b": {"c": [True, 1.5, "s"]}}))["executionArn"]
            _wait_closed(sfn, [execution])
            events = sfn.get_execution_history(executionArn=execution)["events"]
            return sfn.describe_execution(executionArn=execution)["output"], [
                {k: v for k, v in event.items() if k not in ("timestamp",)} for event in events]

    patched = run("patched")
    try:
        for module in modules:
            module.copy = copy
        stock = run("stock")
    finally:
        moto_patches.stepfunctions_perf.patch_json_deep_copies()
    assert patched == stock and json.loads(patched[0]) == {"c": [True, 1.5, "s"]}


# --- What a closed execution keeps (a long serve): the same answers, in less memory ------------------------
def _changes(n: int, prefix: str) -> list[dict]:
    from changeflow.checks.reliability import T0

    return [{"entityId": f"{prefix}#{i % 2}", "operation": "put", "changeId": f"{prefix}-{i}",
             "attributes": {"n": i}, "effectiveAt": T0 + i} for i in range(n)]


def _log_answers(logs, group: str, streams: list[str]) -> list:
    answers = [logs.filter_log_events(logGroupName=group)["events"]]
    for stream in streams:
        answers.append(logs.get_log_events(logGroupName=group, logStreamName=stream, startFromHead=True)["events"])
        answers.append(logs.get_log_events(logGroupName=group, logStreamName=stream, limit=3)["events"])
    answers.append(logs.describe_log_streams(logGroupName=group)["logStreams"])
    return answers


def test_a_closed_executions_log_stream_is_packed_and_reads_the_same(make_stack):
    """The execution log (CloudWatch Logs, the audit's archive) keeps every record; once an execution has
    closed, its stream's records are kept packed. GetLogEvents, FilterLogEvents and DescribeLogStreams
    answer exactly what they answer from moto's own list of events, and a later PutLogEvents into the
    stream still lands."""
    from moto.logs.models import logs_backends

    from changeflow.client import Changeflow

    # every state logged with its data: the operator's opt-in (docs/privacy.md); the default logs failures only
    stack = make_stack(**LOGGED)
    client = Changeflow.for_embedded(stack)
    for request in _changes(3, "log"):
        assert client.submit(request).status == "SUCCEEDED"
    logs, group = stack.client("logs"), client._log_group()
    backend_group = logs_backends["123456789012"]["us-east-1"].groups[group]
    streams = sorted(backend_group.streams)
    assert len(streams) >= 3
    assert all(isinstance(s.events, PackedLogEvents) for s in backend_group.streams.values())
    packed = _log_answers(logs, group, streams)
    for s in backend_group.streams.values():  # moto's own form: a list of LogEvent
        s.events = list(s.events)
    assert _log_answers(logs, group, streams) == packed
    assert len(packed[0]) >= 3 * 10 and all(json.loads(e["message"])["execution_arn"] for e in packed[0])
    backend_group.streams[streams[0]].events = PackedLogEvents(backend_group.streams[streams[0]].events)
    logs.put_log_events(logGroupName=group, logStreamName=streams[0],
                        logEvents=[{"timestamp": int(time.time() * 1000), "message": "later"}])
    after = logs.get_log_events(logGroupName=group, logStreamName=streams[0], startFromHead=True)["events"]
    assert after[:-1] == packed[1] and after[-1]["message"] == "later"


def test_closed_executions_share_their_state_machine_snapshot_and_keep_no_waiters(stack):
    """moto snapshots the state machine for each execution; closed executions whose snapshots are equal
    share one, and each still holds the definition it ran with after the state machine has been updated. Nothing is kept per ended execution for waiters but its
    ARN, and a wait on an ended execution returns at once."""
    from moto.stepfunctions.parser.models import stepfunctions_parser_backends

    from changeflow.client import Changeflow
    from changeflow.local.moto_patches.stepfunctions.termination import Termination, wait_for_termination

    client = Changeflow.for_embedded(stack)
    sfn = stack.client("stepfunctions")
    before = [client.submit(r).arn for r in _changes(3, "snap")]
    definition = json.loads(sfn.describe_state_machine(stateMachineArn=client.state_machine_arn)["definition"])
    original = definition.get("Comment")
    definition["Comment"] = f"{original} (updated)"
    sfn.update_state_machine(stateMachineArn=client.state_machine_arn, definition=json.dumps(definition))
    after = [client.submit(r).arn for r in _changes(5, "snap")[3:]]
    backend = stepfunctions_parser_backends["123456789012"]["us-east-1"]
    snapshots = [backend.describe_execution(arn).state_machine for arn in before + after]
    assert snapshots[0] is snapshots[1] is snapshots[2] and snapshots[3] is snapshots[4]
    assert snapshots[2] is not snapshots[3]
    for arn, comment in [(a, original) for a in before] + [(a, f"{original} (updated)") for a in after]:
        ran = json.loads(backend.describe_execution(arn).state_machine.definition)
        assert ran.get("Comment") == comment
        assert sfn.describe_execution(executionArn=arn)["status"] == "SUCCEEDED"
        worker = backend.describe_execution(arn).exec_worker
        assert worker._evaluation_details is None and isinstance(worker.env, ClosedHistory)
    assert Termination.events == {}
    assert set(before + after) <= Termination.ended
    started = time.monotonic()
    assert wait_for_termination(before[0], 30) and time.monotonic() - started < 1


def test_the_model_registry_lists_the_live_objects_and_frees_the_rest():
    """moto's dashboard registry (``instances_tracked``) held every model object ever made: each
    overwritten item and the copy of every item a read returned. Patched, it lists the objects still
    alive, in the order they were made, and a read's copies are freed."""
    import gc

    from moto.core.model_instances import reset_model_data
    from moto.dynamodb.models.dynamo_type import Item

    with mock_aws():
        client = boto3.client("dynamodb", region_name="us-east-1")
        client.create_table(TableName="r", BillingMode="PAY_PER_REQUEST",
                            KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
                            AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}])
        reset_model_data()  # what moto does on reset: a plain list again
        for n in range(5):
            client.put_item(TableName="r", Item={"pk": {"S": f"k{n}"}, "n": {"N": "1"}})
        for _ in range(20):
            client.put_item(TableName="r", Item={"pk": {"S": "k0"}, "n": {"N": "2"}})  # overwrites
            client.get_item(TableName="r", Key={"pk": {"S": "k1"}})
            client.scan(TableName="r")
        gc.collect()
        from moto.dynamodb.models import dynamodb_backends

        held = list(dynamodb_backends["123456789012"]["us-east-1"].tables["r"].items.values())
        tracked = list(Item.instances_tracked)
        assert sorted(map(id, tracked)) == sorted(map(id, held)) and len(tracked) == 5
        assert [i.hash_key.value for i in tracked] == ["k1", "k2", "k3", "k4", "k0"]  # the order made


def test_kms_key_material_is_made_on_first_use_and_answers_as_before():
    """moto makes an RSA private key for every KMS key, symmetric ones too (DynamoDB's encryption makes one
    per table); the perf patch makes it when the key is first used."""
    from moto.kms.models import kms_backends

    from changeflow.local.moto_patches.kms.perf import PendingKey

    with mock_aws():
        kms = boto3.client("kms", region_name="us-east-1")
        # GIVEN a symmetric key (what a table's encryption makes) and an RSA signing key
        symmetric = kms.create_key()["KeyMetadata"]["KeyId"]
        signing = kms.create_key(KeySpec="RSA_2048", KeyUsage="SIGN_VERIFY")["KeyMetadata"]["KeyId"]
        keys = kms_backends["123456789012"]["us-east-1"].keys
        # THEN neither has made its private key yet
        assert all(isinstance(keys[k].__dict__["private_key"], PendingKey) for k in (symmetric, signing))
        # WHEN the symmetric key encrypts and decrypts, it still needs none
        blob = kms.encrypt(KeyId=symmetric, Plaintext=b"p")["CiphertextBlob"]
        assert kms.decrypt(CiphertextBlob=blob)["Plaintext"] == b"p"
        assert isinstance(keys[symmetric].__dict__["private_key"], PendingKey)
        # AND the signing key signs, verifies what it signed, refuses what it did not, and keeps one public key
        algorithm = "RSASSA_PSS_SHA_256"
        signature = kms.sign(KeyId=signing, Message=b"m", SigningAlgorithm=algorithm)["Signature"]
        assert kms.verify(KeyId=signing, Message=b"m", Signature=signature, SigningAlgorithm=algorithm)["SignatureValid"]
        assert not kms.verify(KeyId=signing, Message=b"other", Signature=signature,
                              SigningAlgorithm=algorithm)["SignatureValid"]  # (AWS raises KMSInvalidSignature)
        public = kms.get_public_key(KeyId=signing)["PublicKey"]
        assert public == kms.get_public_key(KeyId=signing)["PublicKey"] and len(public) > 256
        assert not isinstance(keys[signing].__dict__["private_key"], PendingKey)


# --- The interpreter's JSONPath and Lambda tasks ---------------------------------------------------------
def _asl_paths() -> set[str]:
    """Every JSONPath of changeflow's state machine that reads the state's data (``$``, ``$.a.b``)."""
    text = (ROOT / "statemachines" / "change.asl.json").read_text()
    return {p for p in __import__("re").findall(r'"(\$(?:\.[^"]*)?)"', text) if not p.startswith("$$")}


NAMES = st.sampled_from(["a", "b", "Payload", "version", "len", "sorted", "true", "null", "id", "this", "_x", "A1"])
PATH_DATA = st.recursive(st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=3)),
                         lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(NAMES, inner, max_size=4)),
                         max_leaves=15)


@settings(max_examples=300, deadline=None)
@given(data=PATH_DATA, names=st.lists(NAMES, max_size=4), odd=st.sampled_from(["", "[0]", "[*]", ".*", "..a", "['a']"]))
def test_a_jsonpath_of_field_names_selects_what_moto_selects(data, names, odd):
    """The interpreter's paths (``$.Payload.version``) answered by walking dicts: the same value, or the same
    error with the same message, as moto's jsonpath_ng evaluation, on random data; a path with anything
    else (brackets, wildcards, descent) is moto's."""
    from moto.stepfunctions.parser.asl.utils import json_path

    from changeflow.local.moto_patches.stepfunctions import parse_cache

    parse_cache.patch_jsonpath_cache()
    path = "$" + "".join("." + n for n in names) + odd
    assert _outcome_value(lambda: json_path.extract_json(path, data)) \
        == _outcome_value(lambda: ORIGINALS["extract_json"](path, data))


def _outcome_value(call):
    try:
        return ("value", json.dumps(call(), sort_keys=True))
    except Exception as exc:  # noqa: BLE001 - the comparison is of which error
        return ("error", type(exc).__name__, str(exc))


def test_every_path_of_the_state_machine_takes_the_walk():
    """The cost removed: none of the ASL's paths reaches jsonpath_ng's find (its parse was cached already)."""
    from jsonpath_ng import jsonpath
    from moto.stepfunctions.parser.asl.utils import json_path

    from changeflow.local.moto_patches.stepfunctions import parse_cache

    parse_cache.patch_jsonpath_cache()
    paths = _asl_paths()
    assert {"$", "$.Payload.version", "$.error.Cause"} <= paths
    found = []
    original_find = jsonpath.Child.find
    jsonpath.Child.find = lambda self, datum: found.append(1) or original_find(self, datum)
    try:
        for path in paths:
            data = value = {"leaf": True}
            for name in reversed(path.split(".")[1:]):
                data = {name: data}
            assert json_path.extract_json(path, data) is value
        assert found == []
        assert json_path.extract_json("$.a[0]", {"a": [5]}) == 5  # a bracket: jsonpath_ng's
        assert found
    finally:
        jsonpath.Child.find = original_find


def test_a_lambda_task_invoke_sends_and_answers_what_the_sdk_path_does(monkeypatch):
    """A Lambda task's Invoke handed straight to the stack's answer: the same request (function, qualifier,
    payload) reaches it as through moto's boto3 client, the same result comes back, and an error answer is
    the same ClientError (code, message, status, request id), so the task fails with the same error."""
    import io
    from urllib.parse import unquote

    from botocore.awsrequest import AWSResponse
    from botocore.exceptions import ClientError
    from botocore.response import StreamingBody
    from moto.core.botocore_stubber import MockRawResponse
    from moto.stepfunctions.parser.asl.component.state.exec.state_task import lambda_eval_utils

    from changeflow.local.lambdas import _error_response
    from changeflow.local.moto_patches.stepfunctions import lambda_tasks

    seen = []

    def answer(model, params, **kwargs):
        name = unquote(params["url_path"].split("/")[3])
        query = params.get("query_string") or {}
        seen.append((name, query.get("Qualifier") if isinstance(query, dict) else None, bytes(params["body"])))
        if name.endswith("missing"):
            return _error_response(404, "ResourceNotFoundException", f"Function not found: {name}")
        body = json.dumps({"got": json.loads(params["body"] or b"{}")}).encode()
        metadata = {"RequestId": "r", "HTTPStatusCode": 200, "HTTPHeaders": {}, "RetryAttempts": 0}
        return AWSResponse("https://lambda.embedded/", 200, {}, MockRawResponse(b"")), {
            "ResponseMetadata": metadata, "StatusCode": 200, "ExecutedVersion": "7",
            "Payload": StreamingBody(io.BytesIO(body), len(body))}

    monkeypatch.setitem(ORIGINALS, "invoke", [answer])
    lambda_tasks.patch_lambda_clients(cache=True)
    lambda_tasks.patch_lambda_task_invoke_in_process()
    fast, sdk = lambda_eval_utils._invoke_lambda_function, ORIGINALS["invoke_lambda_function"]
    assert fast is not sdk
    cases = [{"FunctionName": "arn:aws:lambda:us-east-1:123456789012:function:f:7", "Payload": b'{"a": 1}'},
             {"FunctionName": "f", "Qualifier": "live", "Payload": b"[1, 2]"},
             {"FunctionName": "f", "Payload": b""},
             {"FunctionName": "arn:aws:lambda:us-east-1:123456789012:function:missing", "Payload": b"{}"}]
    with mock_aws():
        for parameters in cases:
            results = []
            for invoke in (fast, sdk):
                seen.clear()
                try:
                    answer_ = invoke(parameters=dict(parameters), region="us-east-1", state_credentials=None)
                    results.append(("ok", {k: answer_[k] for k in ("StatusCode", "ExecutedVersion", "Payload")},
                                    list(seen)))
                except ClientError as exc:
                    results.append(("error", exc.response["Error"], exc.response["ResponseMetadata"]["HTTPStatusCode"],
                                    exc.operation_name, list(seen)))
            assert results[0] == results[1], parameters
            assert results[0][-1][0][0] == parameters["FunctionName"]


# --- The interpreter's threads from a pool -----------------------------------------------------------------
def _history_shape(sfn, arn: str) -> list:
    events = sfn.get_execution_history(executionArn=arn, maxResults=1000)["events"]
    return [(e["type"], next((d.get("name") for d in e.values() if isinstance(d, dict) and "name" in d), None))
            for e in events]


def test_a_task_without_a_timeout_runs_on_the_executions_thread_and_records_the_same_history(stack, monkeypatch):
    """moto starts a thread per Task state; changeflow's have no TimeoutSeconds, so each runs on its execution's
    own thread: the same changes end the same way with the same history (event types and states, in order) as
    on threads of their own, no handler runs on a thread of the pool, and none of the pool's is started."""
    from moto.stepfunctions.parser.asl.component.state.exec import execute_state
    from moto.stepfunctions.parser.backend import execution_worker

    from changeflow.client import Changeflow
    from changeflow.local.lambdas import fault_hook
    from changeflow.local.moto_patches.stepfunctions.threads import POOL, PooledThread

    assert execute_state.Thread is PooledThread and execution_worker.Thread is threading.Thread  # see threads.py
    client, sfn = Changeflow.for_embedded(stack), stack.client("stepfunctions")
    ran_on = []

    def note_the_thread(function, event, run):
        if function.logical_id in ("FetchLatestFunction", "UpdateLatestFunction", "DeleteTombstoneFunction",
                                   "PutHistoryFunction"):  # the workflow's steps (not the feed's enrichment)
            ran_on.append(threading.current_thread())
        return run()

    def run(prefix: str) -> list:
        changes = _changes(4, prefix) + [{"entityId": f"{prefix}#0", "operation": "delete", "changeId": f"{prefix}-d",
                                          "effectiveAt": _changes(1, prefix)[0]["effectiveAt"] + 99},
                                         dict(_changes(1, prefix)[0], changeId=f"{prefix}-late")]  # older: stale
        executions = [client.submit(change) for change in changes]
        return [(e.status, (e.output or {}).get("outcome"), _history_shape(sfn, e.arn)) for e in executions]

    started = POOL.started
    with fault_hook(stack.lambdas, note_the_thread):
        in_place = run("in-place")
    assert POOL.started == started and len(ran_on) == 6 * 3 - 1  # the stale change: fetch and its report
    assert all(thread.name.endswith("(_execution_logic)") for thread in ran_on)  # moto's execution thread
    assert len({thread.ident for thread in ran_on[:3]}) == 1  # one execution's three steps: one thread
    monkeypatch.setattr(execute_state, "Thread", threading.Thread)
    assert run("threads") == in_place
    assert [outcome for _, outcome, _ in in_place] == ["applied"] * 5 + ["stale"]


def test_a_task_with_a_timeout_still_times_out_while_its_handler_runs_on(stack):
    """A Task state with TimeoutSeconds runs on a pooled thread, so its timeout fires (States.Timeout) while the
    handler is still running, as on AWS; the abandoned thread holds up no later execution."""
    from changeflow.local.lambdas import fault_hook

    sfn = stack.client("stepfunctions")
    role = sfn.describe_state_machine(stateMachineArn=next(iter(stack.state_machines.values())))["roleArn"]
    function = stack.function("ReadApiFunction")
    definition = {"StartAt": "Read", "States": {"Read": {
        "Type": "Task", "Resource": "arn:aws:states:::lambda:invoke", "TimeoutSeconds": 1, "End": True,
        "Parameters": {"FunctionName": function.arn, "Payload": {}}}}}
    machine = sfn.create_state_machine(name="timed", definition=json.dumps(definition), roleArn=role)["stateMachineArn"]
    release, ran_on = threading.Event(), []

    def hang(function, event, run):
        ran_on.append(threading.current_thread().name)
        release.wait(30)
        return {}

    with fault_hook(stack.lambdas, hang):
        arn = sfn.start_execution(stateMachineArn=machine, input="{}")["executionArn"]
        deadline = time.monotonic() + 20
        while sfn.describe_execution(executionArn=arn)["status"] == "RUNNING" and time.monotonic() < deadline:
            time.sleep(0.05)
        described = sfn.describe_execution(executionArn=arn)
        assert described["status"] == "FAILED" and described["error"] == "States.Timeout"
        assert ran_on == ["sfn-interpreter"] and not release.is_set()  # the handler is still running
        release.set()


def test_a_pooled_thread_behaves_as_a_new_thread_would(monkeypatch):
    """Each target starts in an empty context (a context variable set before, or by the target run before it
    on the same thread, is not seen), an uncaught exception reaches threading.excepthook with the thread, a
    target that blocks (a state abandoned at its timeout) holds up no other, and a thread starts once."""
    import contextvars

    from changeflow.local.moto_patches.stepfunctions.threads import Pool, PooledThread

    monkeypatch.setattr(PooledThread, "pool", Pool(idle=1))  # one idle thread: the second target runs on the first's
    variable = contextvars.ContextVar("variable", default="unset")
    variable.set("the starter's")
    seen, hooked, release = [], [], threading.Event()

    def look_then_set():
        seen.append((threading.get_ident(), variable.get()))
        variable.set("the target's")

    first = PooledThread(target=look_then_set)
    first.start()
    first.join(5)
    time.sleep(0.2)  # its thread back among the idle ones
    second = PooledThread(target=look_then_set)
    second.start()
    second.join(5)
    assert seen[0][0] == seen[1][0] and not second.is_alive()
    assert [value for _, value in seen] == ["unset", "unset"]
    with pytest.raises(RuntimeError):
        second.start()

    original = threading.excepthook
    threading.excepthook = hooked.append
    try:
        failing = PooledThread(target=lambda: 1 / 0, name="failing")
        failing.start()
        failing.join(5)
    finally:
        threading.excepthook = original
    assert [(args.exc_type, args.thread) for args in hooked] == [(ZeroDivisionError, failing)]

    blocked = PooledThread(target=release.wait)
    blocked.start()
    after = PooledThread(target=lambda: seen.append("after"))
    after.start()
    after.join(5)
    assert seen[-1] == "after" and blocked.is_alive()
    release.set()
    blocked.join(5)
    assert not blocked.is_alive()

    pool, gate = Pool(idle=1), threading.Event()
    done = threading.Semaphore(0)
    for _ in range(3):  # three at once: three threads; once they are done, one stays idle
        pool.submit(lambda: (gate.wait(), done.release()))
    assert pool.started == 3
    gate.set()
    for _ in range(3):
        assert done.acquire(timeout=5)
    time.sleep(0.2)
    pool.submit(done.release)
    assert done.acquire(timeout=5) and pool.started == 3


# --- The waiting client reads the ended execution from the stack ----------------------------------------
def test_an_ended_executions_description_is_what_describe_execution_answers(stack):
    """The embedded client waits on the stack's signal and reads the ended execution from moto's model
    instead of sending DescribeExecution: the same name, ARN, status, input, output (its text, exact numbers
    and all), error and cause as DescribeExecution answers, for an execution that succeeded and one that
    failed; nothing for an execution not ended (or unknown) or an Express one, of which the client asks the API."""
    from changeflow.client import Changeflow
    from changeflow.local.moto_patches.stepfunctions.termination import ended_execution

    client, sfn = Changeflow.for_embedded(stack), stack.client("stepfunctions")
    described = []
    client.sfn.meta.events.register("before-call.*.DescribeExecution", lambda **kw: described.append(1))
    succeeded = client.submit({**_changes(1, "ended")[0], "attributes": {"n": Decimal("12345678901234567890.50")}})
    failed = client.submit({**_changes(1, "ended")[0], "changeId": "ended-bad", "operation": "frobnicate"})
    assert described == []  # neither wait sent DescribeExecution
    assert (succeeded.status, failed.status) == ("SUCCEEDED", "FAILED") and failed.error
    fields = ("executionArn", "name", "status", "input", "output", "error", "cause")
    for execution in (succeeded, failed):
        answer = sfn.describe_execution(executionArn=execution.arn)
        assert ended_execution(execution.arn) == {k: answer[k] for k in fields if k in answer}
    unknown = succeeded.arn.rsplit(":", 1)[0] + ":never-started"
    express = succeeded.arn.replace(":execution:", ":express:", 1) + ":0f0e"
    assert ended_execution(unknown) is None and ended_execution(express) is None


def test_a_definition_is_parsed_once_for_its_validation_and_its_executions_and_a_bad_one_refused_as_moto_does(
        stack, monkeypatch):
    """CreateStateMachine parses a definition to validate it, and an execution parses it to run it: one parse
    of a text serves both (``parse_cache.parsed``), and the program it ran is moto's parse of that text. A text
    moto's parser refuses is refused with moto's own InvalidDefinition, each time."""
    import uuid

    from botocore.exceptions import ClientError
    from moto.stepfunctions.parser.asl.parse.asl_parser import AmazonStateLanguageParser

    from changeflow.local.moto_patches.stepfunctions import parse_cache

    parses = []
    parse = AmazonStateLanguageParser.parse
    monkeypatch.setattr(AmazonStateLanguageParser, "parse", staticmethod(lambda text: parses.append(text) or parse(text)))
    sfn = stack.client("stepfunctions")
    role = f"arn:aws:iam::123456789012:role/{uuid.uuid4().hex}"
    # GIVEN a definition no one has parsed in this process
    definition = json.dumps({"Comment": uuid.uuid4().hex, "StartAt": "P", "States": {"P": {"Type": "Pass",
                                                                                         "Result": 7, "End": True}}})
    # WHEN a state machine is made of it and run
    arn = sfn.create_state_machine(name=uuid.uuid4().hex, definition=definition, roleArn=role)["stateMachineArn"]
    execution = sfn.start_execution(stateMachineArn=arn)["executionArn"]
    assert stack.wait_for_termination(execution, 30)
    # THEN it was parsed once, and the execution ran that program
    assert parses == [definition]
    assert sfn.describe_execution(executionArn=execution)["output"] == "7"
    assert parse_cache.parsed(definition) is parse_cache._PROGRAMS[definition] and parses == [definition]
    # AND a text the parser refuses is refused each time, as moto words it
    bad = definition.replace('"Pass"', '"Passing"')
    with pytest.raises(Exception) as stock:
        ORIGINALS["validate_definition"](definition=bad)
    assert type(stock.value).__name__ == "InvalidDefinition"
    for _ in range(2):
        with pytest.raises(ClientError) as refused:
            sfn.create_state_machine(name=uuid.uuid4().hex, definition=bad, roleArn=role)
        assert refused.value.response["Error"]["Message"] == stock.value.message
    assert parses.count(bad) == 5  # moto's here, then ours and moto's for each refusal


def test_a_requests_action_is_found_as_moto_finds_it_without_listing_its_class(stack, monkeypatch):
    """``call_action`` asks whether the action's name is among its response class's functions: the patch
    answers as moto's list does for every name of every response class, and a request no longer lists them."""
    import inspect

    from moto.core import responses

    moto_patches.install_perf()
    stock = ORIGINALS["method_names_from_class"]
    classes = set()
    pending = [responses.BaseResponse]
    while pending:
        cls = pending.pop()
        classes.add(cls)
        pending.extend(c for c in cls.__subclasses__() if c not in classes)
    assert len(classes) > 10  # those of the services this process has imported
    for cls in classes:
        listed = stock(cls)
        names = set(dir(cls)) | {"not_an_action", "", "__init__", "get_item", "start_execution"}
        assert {n for n in names if n in responses.method_names_from_class(cls)} == set(listed) & names, cls
        assert sorted(responses.method_names_from_class(cls)) == sorted(listed)
    # AND the cost removed: a request's answer lists no class
    listings = []
    getmembers = inspect.getmembers
    monkeypatch.setattr(inspect, "getmembers", lambda *a, **k: listings.append(a) or getmembers(*a, **k))
    assert stack.client("dynamodb").list_tables()["TableNames"]
    assert listings == []


# --- A response's members found by keys worked out once (core perf: patch_response_member_keys) ------------
def _bodies(client) -> list[bytes]:
    """Every raw answer body ``client`` receives from moto, in order (what its serializer wrote), until
    ``_done(client)``; a query or XML answer's request id (new each time) left out."""
    import re

    bodies: list[bytes] = []
    client.meta.events.register("before-parse", lambda response_dict, **_: bodies.append(
        re.sub(rb"<RequestId>[^<]*</RequestId>", b"", response_dict["body"])), unique_id="answer-bodies")
    return bodies


def _done(client) -> None:
    client.meta.events.unregister("before-parse", unique_id="answer-bodies")


def _answered_by_both(monkeypatch, ask) -> tuple[list[bytes], list[bytes]]:
    """What ``ask()`` receives with the patch, then with moto's own ``ResponseSerializer.get_value``."""
    from moto.core import serialize

    patched = ask()
    with monkeypatch.context() as stock:
        stock.setattr(serialize.ResponseSerializer, "get_value", ORIGINALS["serializer_get_value"])
        return patched, ask()


ATTRIBUTE_VALUES = st.recursive(
    st.one_of(st.text(max_size=5).map(lambda s: {"S": s}), N_KEYS.map(lambda n: {"N": n}),
              st.binary(max_size=5).map(lambda b: {"B": b}), st.booleans().map(lambda b: {"BOOL": b}),
              st.just({"NULL": True}),
              st.sets(st.text(max_size=3), min_size=1, max_size=3).map(lambda s: {"SS": list(s)}),
              st.sets(st.integers(-9, 9), min_size=1, max_size=3).map(lambda s: {"NS": [str(n) for n in s]}),
              st.sets(st.binary(max_size=3), min_size=1, max_size=3).map(lambda s: {"BS": list(s)})),
    lambda inner: st.one_of(st.lists(inner, max_size=3).map(lambda v: {"L": v}),
                            st.dictionaries(st.sampled_from(["a", "S", "M", "Items", "n"]), inner,
                                            max_size=3).map(lambda v: {"M": v})),
    max_leaves=8)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(items=st.lists(st.dictionaries(st.sampled_from(["v", "S", "Item", "m", "x"]), ATTRIBUTE_VALUES,
                                      max_size=4), min_size=1, max_size=4))
def test_a_response_is_serialized_as_moto_serializes_it_with_every_attribute_type(dynamodb, monkeypatch, items):
    """Items of every AttributeValue type, nested in maps and lists, with names that are also members' names:
    every DynamoDB answer that carries them is, byte for byte, the one moto's own serializer writes."""
    table = f"t{next(TABLES)}"
    dynamodb.create_table(TableName=table, KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
                          AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
                          BillingMode="PAY_PER_REQUEST")
    for i, item in enumerate(items):
        dynamodb.put_item(TableName=table, Item={**item, "pk": {"S": f"p{i}"}})

    def ask() -> list[bytes]:
        bodies = _bodies(dynamodb)
        dynamodb.scan(TableName=table)
        dynamodb.query(TableName=table, KeyConditionExpression="pk = :p", ExpressionAttributeValues={":p": {"S": "p0"}})
        dynamodb.get_item(TableName=table, Key={"pk": {"S": "p0"}})
        dynamodb.batch_get_item(RequestItems={table: {"Keys": [{"pk": {"S": f"p{i}"}} for i in range(len(items))]}})
        dynamodb.transact_get_items(TransactItems=[{"Get": {"TableName": table, "Key": {"pk": {"S": "p0"}}}}])
        dynamodb.put_item(TableName=table, Item={**items[0], "pk": {"S": "p0"}}, ReturnValues="ALL_OLD")
        dynamodb.update_item(TableName=table, Key={"pk": {"S": "p0"}}, UpdateExpression="SET z = :z",
                             ExpressionAttributeValues={":z": {"N": "1"}}, ReturnValues="ALL_NEW")
        dynamodb.update_item(TableName=table, Key={"pk": {"S": "p0"}}, UpdateExpression="REMOVE z",
                             ReturnValues="ALL_OLD")  # as it was: the second asking finds the same table
        dynamodb.describe_table(TableName=table)
        _done(dynamodb)
        return bodies

    patched, stock = _answered_by_both(monkeypatch, ask)
    assert patched == stock and len(patched) == 9


def test_a_workflows_answers_are_serialized_as_moto_serializes_them_and_members_keys_are_worked_out_once(
        stack, monkeypatch):
    """A change through the workflow, then what an auditor reads of it in every protocol (JSON: Step Functions,
    DynamoDB, CloudWatch Logs, KMS; query and XML: IAM, S3): the same bodies as moto's own serializer; and a
    read asks the picker for no key once its members' keys are known."""
    from moto.core import serialize

    from changeflow.client import Changeflow

    cf = Changeflow.for_embedded(stack)
    execution = cf.submit(_changes(1, "serialized")[0])
    clients = {name: stack.client(name) for name in ("stepfunctions", "dynamodb", "logs", "kms", "iam", "s3")}

    def ask() -> list[bytes]:
        bodies = [_bodies(client) for client in clients.values()]
        clients["stepfunctions"].describe_execution(executionArn=execution.arn)
        clients["stepfunctions"].get_execution_history(executionArn=execution.arn)
        clients["stepfunctions"].list_executions(stateMachineArn=stack.state_machines["ChangeStateMachine"])
        for table in (cf.table, cf.history_table):
            clients["dynamodb"].scan(TableName=table)
        clients["logs"].describe_log_groups()
        clients["kms"].describe_key(KeyId=clients["kms"].list_keys()["Keys"][0]["KeyId"])
        clients["iam"].get_role(RoleName=clients["iam"].list_roles()["Roles"][0]["RoleName"])
        clients["s3"].list_buckets()
        for client in clients.values():
            _done(client)
        return [body for found in bodies for body in found]

    patched, stock = _answered_by_both(monkeypatch, ask)
    assert patched == stock and len(patched) == 11
    # AND the cost removed: the same read again asks no alias provider for a member's keys
    asked = []
    original = serialize.XFormedAttributePicker.get_possible_keys
    monkeypatch.setattr(serialize.XFormedAttributePicker, "get_possible_keys",
                        lambda self, context: asked.append(context.key) or original(self, context))
    assert clients["dynamodb"].scan(TableName=cf.history_table)["Items"]
    assert asked == []
