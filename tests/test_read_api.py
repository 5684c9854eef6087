"""The read API with ids a REST API delivers percent-encoded (issue 9 item 7) and ASCII-only numbers
(item 8): on `changeflow serve` over HTTP, and the handler fed the event exactly as a REST API builds it:
``path`` as the client sent it (``/entities/doc%2F1``), ``pathParameters`` decoded (``doc/1``)."""

from __future__ import annotations

import json
from urllib.parse import quote

import pytest

from changeflow.local.moto_patches.stepfunctions.termination import wait_for_termination
from changeflow.local.server import EmbeddedServer
from conftest import http_exchange, load_event

pytestmark = pytest.mark.enable_socket
T0 = 1_767_225_600_000
IDS = ["doc/1", "a/b/c", "doc#1", "100%", "50%2F", "with space", "ユーザー/1", "x?y=1", "plus+sign", "/lead", "trail/"]
ROUTES = ["/entities/{id}", "/entities/{id}/versions", "/entities/{id}/versions/{version}",
          "/entities/{id}/versions/{version}/execution"]


def get(url):
    status, _, raw = http_exchange("GET", url, timeout=30)  # SigV4-signed: the API is AWS_IAM
    return status, json.loads(raw)


@pytest.fixture(scope="module")
def server():
    with EmbeddedServer(port=0, time_scale=0.001) as running:
        api = f"{running.url}/v1"
        for entity in IDS:
            body = json.dumps({"entityId": entity, "operation": "put", "changeId": "c1", "attributes": {"id": entity},
                               "effectiveAt": T0}).encode()
            status, _, raw = http_exchange("POST", f"{api}/changes", body, timeout=30)
            assert status == 200 and wait_for_termination(json.loads(raw)["executionArn"], 30)
        yield running


@pytest.mark.parametrize("entity", IDS)
def test_every_written_id_is_readable_on_all_four_routes_over_http(server, entity):
    base = f"{server.url}/v1/entities/{quote(entity, safe='')}"
    status, latest = get(base)
    assert status == 200 and latest["entityId"] == entity and latest["attributes"] == {"id": entity}
    status, page = get(f"{base}/versions")
    assert status == 200 and [v["entityId"] for v in page["items"]] == [entity]
    status, version = get(f"{base}/versions/1")
    assert status == 200 and version["attributes"] == {"id": entity}
    status, behind = get(f"{base}/versions/1/execution")
    assert status == 200 and behind["entityId"] == entity and behind["executionArn"]


def rest_event(entity, route, query=None):
    """The proxy event a REST API sends for GET <route> with ``entity`` percent-encoded in the URL."""
    raw = quote(entity, safe="")
    path = route.replace("{id}", raw).replace("{version}", "1")
    event = load_event("functions/read_api.json")
    event.update(resource=route, path=path, pathParameters={"id": entity, "version": "1"} if "{version}" in route
                 else {"id": entity}, queryStringParameters=query, multiValueQueryStringParameters=None
                 if query is None else {k: [v] for k, v in query.items()})
    event["requestContext"].update(resourcePath=route, path=f"/v1{path}")
    return event


@pytest.mark.parametrize("entity", ["doc/1", "a/b/c", "ユーザー/1", "100%"])
def test_the_handler_reads_ids_with_slashes_from_the_rest_event(server, entity):
    function = server.stack.function("ReadApiFunction")
    for route in ROUTES:
        payload, failed = server.stack.lambdas.invoke(function, rest_event(entity, route))
        assert not failed and payload["statusCode"] == 200, (route, payload)
        body = json.loads(payload["body"])
        assert (body["items"][0] if "items" in body else body)["entityId"] == entity


@pytest.mark.parametrize("query,field", [({"limit": "²"}, "limit"), ({"limit": "١٠"}, "limit"),
                                         ({"limit": "⁵"}, "limit"), ({"limit": " 5"}, "limit")])
def test_non_ascii_digits_are_a_400_not_a_crash(server, query, field):
    function = server.stack.function("ReadApiFunction")
    payload, failed = server.stack.lambdas.invoke(function, rest_event("doc/1", "/entities/{id}/versions", query))
    assert not failed and payload["statusCode"] == 400 and json.loads(payload["body"])["message"].startswith(field)
    status, body = get(f"{server.url}/v1/entities/doc%2F1/versions?limit={quote(query['limit'])}")
    assert status == 400


@pytest.mark.parametrize("version", ["²", "١", "01x", "0"])
def test_a_version_that_is_not_ascii_digits_is_a_400(server, version):
    status, body = get(f"{server.url}/v1/entities/doc%2F1/versions/{quote(version)}")
    assert status == 400 and body["message"].startswith("version")
