"""``changeflow serve`` authenticates its REST API as API Gateway does with ``AWS_IAM`` (issue 21.4): SigV4 for
``execute-api`` verified against moto's IAM (users' access keys) and STS (AssumeRole sessions), API Gateway's
own 403 answers otherwise, and the signer recorded as the version's principal. Written as an attacker:
unsigned, another secret, a key nobody issued, a replay after SigV4's five minutes, another region or
service, a body changed after signing, a principal claimed in the body."""

from __future__ import annotations

import hashlib
import json
from datetime import datetime, timedelta, timezone

import boto3
import pytest

from changeflow.local.apigateway import sigv4
from changeflow.local.moto_patches.stepfunctions.termination import wait_for_termination
from conftest import INVOKE_API, http_exchange, sigv4_headers

pytestmark = pytest.mark.enable_socket


def change(entity: str, change_id: str = "c1", **extra) -> bytes:
    return json.dumps({"entityId": entity, "operation": "put", "changeId": change_id, "attributes": {"n": 1},
                       **extra}).encode()


def send(url: str, body: bytes | None = None, method: str = "POST", **signing) -> tuple[int, dict, dict]:
    headers = {"Content-Type": "application/json"}
    if signing.pop("signed", True):
        headers = sigv4_headers(method, url, body, headers, **signing)
    status, answered, raw = http_exchange_raw(method, url, body, headers)
    return status, {k.lower(): v for k, v in answered.items()}, json.loads(raw or b"null")


def http_exchange_raw(method, url, body, headers):
    import urllib.error
    import urllib.request

    request = urllib.request.Request(url, data=body, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read()


def started(server) -> list[dict]:
    return aws(server, "stepfunctions").list_executions(
        stateMachineArn=server.stack.outputs["ChangeStateMachineArn"])["executions"]


def wait(answer: dict) -> None:
    assert wait_for_termination(answer["executionArn"], 30)


def principal_of(server, entity: str, version: int | None = None) -> dict | None:
    """The principal and claimed actor of the entity's latest version (or of ``version``), from the read API."""
    path = f"/v1/entities/{entity.replace('#', '%23')}" + (f"/versions/{version}" if version else "")
    status, _, raw = http_exchange("GET", server.url + path)
    body = json.loads(raw)
    return body.get("principal"), body.get("actor")


def aws(server, service: str, **credentials):
    return boto3.client(service, endpoint_url=server.url, region_name="us-east-1", **credentials)


@pytest.fixture
def alice(server):
    """An IAM user with an access key, made with the IAM API (moto's IAM)."""
    iam = aws(server, "iam")
    iam.create_user(UserName="alice")
    iam.put_user_policy(UserName="alice", PolicyName="invoke", PolicyDocument=INVOKE_API)  # AWS_IAM asks it
    key = iam.create_access_key(UserName="alice")["AccessKey"]
    return {"key": key["AccessKeyId"], "secret": key["SecretAccessKey"], "token": None}


def test_an_iam_users_signed_request_is_recorded_under_its_arn_and_the_actor_stays_a_claim(server, alice):
    url = f"{server.url}/v1/changes"
    status, _, answer = send(url, change("s#1", actor="cfo@example.com"), **alice)
    assert status == 200, answer
    wait(answer)
    who, actor = principal_of(server, "s#1")
    assert who["arn"] == "arn:aws:iam::123456789012:user/alice" and who["via"] == "api"
    assert actor == "cfo@example.com"


def test_an_assumed_role_session_is_recorded_under_the_session_arn(server):
    iam = aws(server, "iam")
    trust = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Principal": {"AWS": "*"},
                                                     "Action": "sts:AssumeRole"}]}
    role = iam.create_role(RoleName="deployer", AssumeRolePolicyDocument=json.dumps(trust))["Role"]["Arn"]
    iam.put_role_policy(RoleName="deployer", PolicyName="invoke", PolicyDocument=INVOKE_API)
    session = aws(server, "sts").assume_role(RoleArn=role, RoleSessionName="ci-run-7")["Credentials"]
    status, _, answer = send(f"{server.url}/v1/changes", change("s#2"), key=session["AccessKeyId"],
                             secret=session["SecretAccessKey"], token=session["SessionToken"])
    assert status == 200, answer
    wait(answer)
    assert principal_of(server, "s#2")[0]["arn"] == "arn:aws:sts::123456789012:assumed-role/deployer/ci-run-7"


def test_the_default_credentials_are_the_documented_principal(server):
    status, _, answer = send(f"{server.url}/v1/changes", change("s#3"))
    assert status == 200
    wait(answer)
    assert principal_of(server, "s#3")[0]["arn"] == sigv4.default_arn("123456789012")


REFUSALS = {
    "unsigned": ({"signed": False}, "Missing Authentication Token", "MissingAuthenticationTokenException"),
    "a key nobody issued": ({"key": "AKIANOBODYISSUEDTHIS", "secret": "x", "token": None},
                            "The security token included in the request is invalid.", "AccessDeniedException"),
    "another secret": ({"secret": "not-the-secret"}, sigv4.MISMATCH, "InvalidSignatureException"),
    "another region": ({"region": "eu-west-1"}, "Credential should be scoped to a valid region. ",
                       "InvalidSignatureException"),
    "another service": ({"service": "states"}, "Credential should be scoped to correct service: 'execute-api'. ",
                        "InvalidSignatureException"),
}


@pytest.mark.parametrize("case", sorted(REFUSALS))
def test_a_request_api_gateway_would_refuse_gets_its_403_and_starts_nothing(server, case):
    signing, message, error_type = REFUSALS[case]
    status, headers, body = send(f"{server.url}/v1/changes", change("s#4"), **signing)
    assert (status, body, headers.get("x-amzn-errortype")) == (403, {"message": message}, error_type)
    assert aws(server, "stepfunctions").list_executions(
        stateMachineArn=server.stack.outputs["ChangeStateMachineArn"])["executions"] == []


def test_a_replay_after_five_minutes_is_refused_as_expired(server):
    then = datetime.now(timezone.utc) - timedelta(minutes=5, seconds=30)
    status, headers, body = send(f"{server.url}/v1/changes", change("s#5"), when=then)
    assert status == 403 and body["message"].startswith(f"Signature expired: {then.strftime('%Y%m%dT%H%M%SZ')} "
                                                        "is now earlier than")
    assert headers["x-amzn-errortype"] == "InvalidSignatureException"
    # within the window the same signing time is accepted (the check is the window, not the clock's second)
    recent = datetime.now(timezone.utc) - timedelta(minutes=4)
    assert send(f"{server.url}/v1/changes", change("s#5"), when=recent)[0] == 200


def test_a_body_changed_after_signing_is_refused(server):
    url = f"{server.url}/v1/changes"
    headers = sigv4_headers("POST", url, change("s#6"), {"Content-Type": "application/json"})
    forged = change("s#6", actor="someone-else")
    status, answered, raw = http_exchange_raw("POST", url, forged, headers)
    assert status == 403 and json.loads(raw) == {"message": sigv4.MISMATCH}


def test_read_routes_require_a_signature_too(server):
    status, _, raw = http_exchange("GET", f"{server.url}/v1/entities/s%237", sign=False)
    assert status == 403 and json.loads(raw) == {"message": "Missing Authentication Token"}
    assert http_exchange("GET", f"{server.url}/v1/entities/s%237")[0] == 404  # signed: answered


def test_the_cli_submits_through_the_api_signed(server, tmp_path, capsys):
    from changeflow.cli import main

    path = tmp_path / "change.json"
    path.write_text(json.dumps({"entityId": "s#8", "operation": "put", "changeId": "c1", "attributes": {"n": 1},
                                "actor": "ana"}))
    assert main(["submit", str(path), "--via", "api", "--endpoint-url", server.url, "--json"]) == 0
    assert principal_of(server, "s#8")[0]["arn"] == sigv4.default_arn("123456789012")


def test_serve_insecure_accepts_unsigned_requests_and_records_them_as_unauthenticated():
    from changeflow.local.server import EmbeddedServer

    with EmbeddedServer(port=0, time_scale=0.001, insecure=True) as running:
        status, _, answer = send(f"{running.url}/v1/changes", change("s#9"), signed=False)
        assert status == 200
        wait(answer)
        recorded = principal_of(running, "s#9")[0]
    assert recorded == {"via": "api", "authenticated": False, "requestId": recorded["requestId"]}


def test_the_impersonation_campaign_row_finds_no_false_principal(server):
    from changeflow.checks.impersonation import ATTACKS, impersonations

    tally = impersonations(server, seed=1, entities=2)
    assert tally.violations == []
    assert tally.cases == 2 and sum(tally.faults.values()) == 2 * len(ATTACKS)
    assert tally.outcomes["refused"] == 2 * len(ATTACKS)


def test_a_redaction_through_the_api_records_its_signer_as_any_change_does(server, tmp_path, capsys):
    # GIVEN a version written through the API, WHEN `changeflow redact --via api` removes its content
    # THEN the redaction is a version whose principal is the SigV4 signer, and the claim stays a claim
    from changeflow.cli import main

    path = tmp_path / "change.json"
    path.write_text(json.dumps({"entityId": "s#10", "operation": "put", "changeId": "c1", "attributes": {"ssn": "1"}}))
    assert main(["submit", str(path), "--via", "api", "--endpoint-url", server.url, "--json"]) == 0
    assert main(["redact", "s#10", "1", "--reason", "erasure request", "--actor", "dpo@example.com", "--via", "api",
                 "--endpoint-url", server.url, "--json"]) == 0
    # (the redacted version was the current one, so the entity has no current content: read the redaction itself)
    who, claimed = principal_of(server, "s#10", version=2)
    assert who["via"] == "api" and who["arn"] == sigv4.default_arn("123456789012") and claimed == "dpo@example.com"
    status, _, raw = http_exchange("GET", f"{server.url}/v1/entities/s%2310/versions/1")
    assert status == 200 and "ssn" not in json.loads(raw).get("attributes", {})
    capsys.readouterr()
    assert main(["verify", "s#10", "--endpoint-url", server.url]) == 0  # the note names the signer, then the claim
    signer = sigv4.default_arn("123456789012")
    assert f"version 1 redacted at version 2 by {signer}, actor dpo@example.com (claimed)" in capsys.readouterr().out


def test_the_impersonation_row_after_the_api_row_on_one_stack_still_finds_no_false_principal(server):
    # make reliability runs row 6 (API retries, signed with the default key) and then row 7 on one stack, with
    # the same seeds: row 7's entities must be its own, or row 6's versions read as false principals
    from changeflow.checks.impersonation import impersonations
    from changeflow.checks.reliability import api_retries

    api_retries(server, 0, entities=2)
    tally = impersonations(server, seed=0, entities=2)
    assert tally.violations == [] and tally.cases == 2


# --- issue 32.12: the body is the one that was signed ----------------------------------------------------------
def pay(entity: str, to: str, amount: int) -> bytes:
    return change(entity, f"pay-{to}", attributes={"to": to, "amount": amount})


def test_a_signed_request_whose_body_is_swapped_is_refused_whatever_its_content_hash_header_says(server, alice):
    # GIVEN alice signs "pay alice 10" with an X-Amz-Content-SHA256 header holding its hash (signed, as an
    # S3-style signer sends it)
    url = f"{server.url}/v1/changes"
    signed = pay("s#12", "alice", 10)
    headers = sigv4_headers("POST", url, signed, {"Content-Type": "application/json",
                                                  "X-Amz-Content-SHA256": hashlib.sha256(signed).hexdigest()},
                            **alice)
    # WHEN mallory replays her headers with another body
    status, answered, raw = http_exchange_raw("POST", url, pay("s#12", "mallory", 1_000_000), headers)
    # THEN API Gateway's mismatch: it hashes the body it received; nothing starts, nothing is recorded
    assert (status, json.loads(raw)) == (403, {"message": sigv4.MISMATCH}), raw
    assert {k.lower(): v for k, v in answered.items()}["x-amzn-errortype"] == "InvalidSignatureException"
    assert started(server) == [] and principal_of(server, "s#12") == (None, None)
    # the same headers with the body they were made for go through (the header is a header like any other)
    status, _, raw = http_exchange_raw("POST", url, signed, headers)
    assert status == 200, raw


def test_a_request_signed_over_unsigned_payload_is_refused(server, alice):
    url = f"{server.url}/v1/changes"
    body = pay("s#13", "mallory", 1_000_000)
    headers = sigv4_headers("POST", url, body, {"Content-Type": "application/json",
                                                "X-Amz-Content-SHA256": "UNSIGNED-PAYLOAD"}, **alice)
    status, _, raw = http_exchange_raw("POST", url, body, headers)
    assert (status, json.loads(raw)) == (403, {"message": sigv4.MISMATCH})
    assert started(server) == []


# --- issue 32.13: credentials that stopped being valid -----------------------------------------------------------
def test_an_inactive_access_key_is_refused_as_an_invalid_token_and_works_again_once_active(server, alice):
    iam = aws(server, "iam")
    iam.update_access_key(UserName="alice", AccessKeyId=alice["key"], Status="Inactive")
    status, headers, body = send(f"{server.url}/v1/changes", change("s#14"), **alice)
    assert (status, body, headers["x-amzn-errortype"]) == (
        403, {"message": "The security token included in the request is invalid."}, "AccessDeniedException")
    assert started(server) == []
    iam.update_access_key(UserName="alice", AccessKeyId=alice["key"], Status="Active")
    assert send(f"{server.url}/v1/changes", change("s#14"), **alice)[0] == 200


def test_an_expired_sts_session_is_refused_as_an_expired_token(server, monkeypatch):
    iam = aws(server, "iam")
    trust = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Principal": {"AWS": "*"},
                                                     "Action": "sts:AssumeRole"}]}
    role = iam.create_role(RoleName="short", AssumeRolePolicyDocument=json.dumps(trust))["Role"]["Arn"]
    iam.put_role_policy(RoleName="short", PolicyName="invoke", PolicyDocument=INVOKE_API)
    session = aws(server, "sts").assume_role(RoleArn=role, RoleSessionName="short-run", DurationSeconds=900)["Credentials"]
    credentials = {"key": session["AccessKeyId"], "secret": session["SecretAccessKey"], "token": session["SessionToken"]}
    # within its 15 minutes the session is accepted
    assert send(f"{server.url}/v1/changes", change("s#15", "c0"), **credentials)[0] == 200
    # WHEN 16 minutes have passed (the server's clock, and the client signs at that time)
    later = datetime.now(timezone.utc) + timedelta(minutes=16)
    monkeypatch.setattr(sigv4, "utcnow", lambda: later, raising=False)
    status, headers, body = send(f"{server.url}/v1/changes", change("s#15", "c1"), when=later, **credentials)
    # THEN the EXPIRED_TOKEN gateway response, and the change does not start
    assert (status, body, headers["x-amzn-errortype"]) == (
        403, {"message": "The security token included in the request is expired"}, "ExpiredTokenException")
    assert [e["name"] for e in started(server) if "c1" in e["name"]] == []
