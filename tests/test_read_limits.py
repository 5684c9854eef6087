"""Issue 26.8 and the read API's part of 26.9: every read route answers 400 naming the field for any id
the write side would refuse (one validation rule), and for a cursor this API never returned; nothing is
a 5xx, and no read of an impossible id answers 200 with nothing.

DynamoDB refuses a partition key over 2,048 bytes and a sort key over 1,024 bytes in every request that
names them (ValidationException "Size of hashkey has exceeded the maximum size limit of2048 bytes",
"Aggregated size of all range keys has exceeded the size limit of 1024 bytes"; Service quotas, "Partition
key and sort key", https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/ServiceQuotas.html#limits-partition-sort-keys),
and an attribute value with more than one type ("Supplied AttributeValue has more than one datatypes set,
must contain exactly one of the supported datatypes"; API reference, AttributeValue: "Each attribute value
is described as a name-value pair ... only one of the data types"). A request that would meet those is
refused by the read API before it is made. Run on ``changeflow serve`` over HTTP and on the handler.
"""

from __future__ import annotations

import base64
import json
from urllib.parse import quote

import pytest

from changeflow_core import validation
from conftest import http_exchange
from test_read_api import ROUTES, rest_event

pytestmark = pytest.mark.enable_socket
T0 = 1_767_225_600_000
LIMIT = validation.MAX_ENTITY_ID_BYTES


@pytest.fixture(scope="module")
def server():
    from changeflow.local.moto_patches.stepfunctions.termination import wait_for_termination
    from changeflow.local.server import EmbeddedServer

    with EmbeddedServer(port=0, time_scale=0.001) as running:
        for entity in ("x" * LIMIT, "é" * (LIMIT // 2), "doc#1"):
            body = json.dumps({"entityId": entity, "operation": "put", "changeId": "c1", "attributes": {"n": 1},
                               "effectiveAt": T0})
            status, _, raw = http_exchange("POST", f"{running.url}/v1/changes", body)
            assert status == 200, raw
            assert wait_for_termination(json.loads(raw)["executionArn"], 60)
        yield running


def get(server, path):
    status, _, raw = http_exchange("GET", f"{server.url}/v1{path}")
    return status, json.loads(raw)


def url(route, entity, version="1"):
    return route.replace("{id}", quote(entity, safe="")).replace("{version}", version)


REFUSED_IDS = {
    "2049 bytes (over DynamoDB's key limit)": "x" * 2049,
    "one byte over the write side's limit": "x" * (LIMIT + 1),
    "multi-byte, one byte over": "é" * (LIMIT // 2) + "x",
    "a control character": "doc\x01",
    "a lone surrogate": "doc\ud800",
}


@pytest.mark.parametrize("entity", REFUSED_IDS.values(), ids=REFUSED_IDS.keys())
def test_every_read_route_refuses_an_id_the_write_side_refuses_with_400_naming_entity_id(server, entity):
    # the write side's answer for the same id: a ValidationError naming entityId
    with pytest.raises(validation.ValidationError) as refused:
        validation.validate_request({"entityId": entity, "operation": "delete"},
                                    {"name": "x", "startTime": "2026-01-01T00:00:00Z"})
    assert refused.value.field == "entityId"
    # the read API, through the handler with the event a REST API builds ...
    function = server.stack.function("ReadApiFunction")
    for route in ROUTES:
        event = rest_event("doc", route)
        event["pathParameters"]["id"] = entity  # API Gateway's decoded id (the raw path only routes)
        payload, failed = server.stack.lambdas.invoke(function, event)
        assert not failed and payload["statusCode"] == 400, (route, payload)
        assert json.loads(payload["body"])["message"].startswith("entityId:"), payload
    # ... and over HTTP, where an unhandled error would be API Gateway's 502 (a lone surrogate cannot be
    # percent-encoded as UTF-8: a client cannot send it)
    if "\ud800" not in entity:
        for route in ROUTES:
            status, body = get(server, url(route, entity))
            assert status == 400 and body["message"].startswith("entityId:"), (route, status, body)


@pytest.mark.parametrize("entity", ["x" * LIMIT, "é" * (LIMIT // 2)], ids=["1024 ASCII", "512 two-byte"])
def test_the_longest_ids_the_write_side_accepts_are_read_on_every_route(server, entity):
    for route in ROUTES:
        status, body = get(server, url(route, entity))
        assert status == 200, (route, status, body)


def cursor_of(key) -> str:
    return base64.urlsafe_b64encode(json.dumps(key).encode()).decode().rstrip("=")


FORGED_CURSORS = {
    "a 2,000-byte sort key": {"pk": {"S": "doc#1"}, "sk": {"S": "v#" + "9" * 1998}},
    "a value with both S and N": {"pk": {"S": "doc#1"}, "sk": {"S": "v#0000000001", "N": "1"}},
    "a partition key with both S and N": {"pk": {"S": "doc#1", "N": "1"}, "sk": {"S": "v#0000000001"}},
    "a number sort key": {"pk": {"S": "doc#1"}, "sk": {"N": "1"}},
    "v0 as the sort key": {"pk": {"S": "doc#1"}, "sk": {"S": "v0"}},
    "a sort key that is not ten digits": {"pk": {"S": "doc#1"}, "sk": {"S": "v#1"}},
    "non-ASCII digits": {"pk": {"S": "doc#1"}, "sk": {"S": "v#٠٠٠٠٠٠٠٠٠١"}},
    "an extra attribute": {"pk": {"S": "doc#1"}, "sk": {"S": "v#0000000001"}, "x": {"S": "y"}},
    "a list": [1, 2],
    "a string value that is not a string": {"pk": {"S": 1}, "sk": {"S": "v#0000000001"}},
}


@pytest.mark.parametrize("key", FORGED_CURSORS.values(), ids=FORGED_CURSORS.keys())
def test_a_forged_cursor_is_a_400_naming_cursor(server, key):
    status, body = get(server, f"/entities/doc%231/versions?cursor={cursor_of(key)}")
    assert status == 400 and body["message"].startswith("cursor:"), (status, body)


def test_a_cursor_nested_past_the_json_parsers_depth_is_a_400_naming_cursor(server):
    # not a forged key but forged text: 5,000 brackets (6,667 characters of base64, well inside a URL)
    nested = base64.urlsafe_b64encode(b"[" * 5000).decode().rstrip("=")
    status, body = get(server, f"/entities/doc%231/versions?cursor={nested}")
    assert status == 400 and body["message"].startswith("cursor:"), (status, body)


def test_a_cursor_the_api_returned_pages_on_and_another_entitys_is_refused(server):
    # the valid neighbour: a real cursor works; the same key for another entity does not
    status, page = get(server, "/entities/doc%231/versions?limit=1")
    assert status == 200 and page["nextCursor"] is None  # one version: no next page
    key = {"pk": {"S": "doc#1"}, "sk": {"S": "v#0000000001"}}
    status, page = get(server, f"/entities/doc%231/versions?cursor={cursor_of(key)}")
    assert status == 200 and page["items"] == []
    status, body = get(server, f"/entities/{quote('x' * LIMIT)}/versions?cursor={cursor_of(key)}")
    assert status == 400 and body["message"] == "cursor: belongs to another entity"
