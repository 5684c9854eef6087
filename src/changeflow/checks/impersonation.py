"""The reliability campaign's impersonation row (issues 21 and 33): on ``changeflow serve``, for each random entity,
a real signer claims another actor, and every attack an impersonator would try comes next. They are: a
principal in the body, in an event's detail and in a bare StartExecution input; unsigned; a key nobody
issued; another secret; a replay after SigV4's five minutes; a signature for another region or service; and,
by an IAM user whose own policy grants ``states:*`` and ``lambda:InvokeFunction`` (IAM evaluated on the
embedded stack): a hand-built ``api`` envelope naming the signer, the signer's sealed input replayed under
another name, a v0 writer invoked directly, and the front function invoked directly with a ``requestContext``
naming the signer. Afterwards the entity must hold exactly one version, whose principal is the signer and
whose actor is the claim. Every attack must have been refused (a 403 or the body model's 400 from the API, a
named ``ValidationError`` or ``Unproven``), except the direct invocation of the front function, which seals
what it is handed: its version, on an entity of its own, must be refused by ``verify --principals``."""

from __future__ import annotations

import json
import random
from datetime import datetime, timedelta, timezone
from typing import Any

from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from changeflow_core import principal as principals

from ..client import Changeflow
from .reliability import Tally, api_entity_ids, post_json

ATTACKS = ["principal in the body", "principal in an event's detail", "StartExecution without the envelope",
           "unsigned", "a key nobody issued", "another secret", "a replay after 5 minutes", "another region",
           "another service", "a hand-built api envelope (states:*)", "a sealed input under another name",
           "a v0 writer invoked directly", "the front function invoked directly"]
# refused: API Gateway's 403, its request model's 400 (the body's model has no "principal"), the workflow's
# named error, a step's Unproven, or verify --principals naming the version; anything else is a violation
REFUSED = (400, 403, "ValidationError", "Unproven", "refused by verify --principals")
OWN_RUNS = 1000  # entity ids apart from the API row's (api_entity_ids' run)


def _signed(url: str, body: bytes, key: str, secret: str, region: str = "us-east-1", service: str = "execute-api",
            when: datetime | None = None) -> dict[str, str]:
    request = AWSRequest(method="POST", url=url, data=body, headers={"Content-Type": "application/json"})
    signer = SigV4Auth(Credentials(key, secret), service, region)
    if when is None:
        signer.add_auth(request)
        return dict(request.headers.items())
    stamp = when.strftime("%Y%m%dT%H%M%SZ")
    request.context["timestamp"] = stamp
    request.headers["X-Amz-Date"] = stamp
    signature = signer.signature(signer.string_to_sign(request, signer.canonical_request(request)), request)
    request.headers["Authorization"] = (
        f"AWS4-HMAC-SHA256 Credential={key}/{stamp[:8]}/{region}/{service}/aws4_request, "
        f"SignedHeaders={signer.signed_headers(signer.headers_to_sign(request))}, Signature={signature}")
    return dict(request.headers.items())


def impersonations(server, seed: int, entities: int = 4) -> Tally:
    """The row's tally: cases = entities, faults injected = attacks, violations = anything an attack got."""
    tally = Tally("7. principal: impersonation, forgery, replay (serve)")
    cf = Changeflow.for_aws_stack("changeflow", "us-east-1", endpoint_url=server.url)
    iam = cf.make("iam")
    user = f"writer-{seed}"
    iam.create_user(UserName=user)
    iam.put_user_policy(UserName=user, PolicyName="invoke", PolicyDocument=json.dumps({  # AWS_IAM asks for it
        "Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "execute-api:Invoke", "Resource": "*"}]}))
    key = iam.create_access_key(UserName=user)["AccessKey"]
    signer_arn = iam.get_user(UserName=user)["User"]["Arn"]
    url = f"{server.url}/{server.routes[0].stage}/changes"
    mallory = _insider(cf, f"mallory-{seed}", ["states:*", "lambda:InvokeFunction"], server.url)
    rng = random.Random(seed)
    # runs of their own: row 6 (API retries) makes ids with run=seed on the same stack, and its versions, signed
    # with the default key, would be this row's entities' other versions
    for entity in api_entity_ids(rng, entities, run=OWN_RUNS + seed):
        tally.cases += 1
        change = {"entityId": entity, "operation": "put", "changeId": "c1", "attributes": {"n": 1},
                  "actor": "cfo@example.com"}
        body = json.dumps(change).encode()
        status, answer = post_json(url, body, _signed(url, body, key["AccessKeyId"], key["SecretAccessKey"]))
        if status != 200:
            tally.violations.append(f"{entity}: the signed request was answered {status}: {answer}")
            continue
        tally.executions += 1
        genuine_arn = answer["executionArn"]
        cf.wait(genuine_arn, 60)
        forged = {**change, "changeId": "c2", "principal": {"via": "api", "arn": "arn:aws:iam::123456789012:user/cfo"}}
        forged_body = json.dumps(forged).encode()
        outcomes: dict[str, Any] = {}
        status, answer = post_json(url, forged_body, _signed(url, forged_body, key["AccessKeyId"], key["SecretAccessKey"]))
        outcomes[ATTACKS[0]] = cf.wait(answer["executionArn"], 60).error if status == 200 else status
        tally.executions += (status == 200) + 2  # the body's (if its model let it through), the event's, the bare one
        outcomes[ATTACKS[1]] = cf.submit_via_events({**forged, "changeId": "c3"}, timeout=60).error
        outcomes[ATTACKS[2]] = cf.wait(cf.sfn.start_execution(
            stateMachineArn=cf.state_machine_arn, name=f"bare-{seed}-{tally.cases}",
            input=json.dumps({"request": json.dumps({**change, "changeId": "c4"})}))["executionArn"], 60).error
        plain = {**change, "changeId": "c5"}
        plain_body = json.dumps(plain).encode()
        late = datetime.now(timezone.utc) - timedelta(minutes=5, seconds=30)
        for attack, headers in [
            (ATTACKS[3], {"Content-Type": "application/json"}),
            (ATTACKS[4], _signed(url, plain_body, "AKIANOBODYISSUEDTHIS", "x")),
            (ATTACKS[5], _signed(url, plain_body, key["AccessKeyId"], "not-the-secret")),
            (ATTACKS[6], _signed(url, plain_body, key["AccessKeyId"], key["SecretAccessKey"], when=late)),
            (ATTACKS[7], _signed(url, plain_body, key["AccessKeyId"], key["SecretAccessKey"], region="eu-west-1")),
            (ATTACKS[8], _signed(url, plain_body, key["AccessKeyId"], key["SecretAccessKey"], service="states")),
        ]:
            outcomes[attack] = post_json(url, plain_body, headers)[0]
        _insider_attacks(cf, server, outcomes, mallory, change, signer_arn, genuine_arn, f"{seed}-{tally.cases}")
        tally.executions += 3  # the forged and the replayed envelopes, the direct invocation of the front function
        for attack, outcome in outcomes.items():
            tally.faults[attack] += 1
            if outcome not in REFUSED:
                tally.violations.append(f"{entity}: {attack} was answered {outcome!r}, not refused")
        versions = cf.entity(entity)["versions"]
        if [(v["changeId"], principals.describe(v["principal"]), v["actor"]) for v in versions] != [
                ("c1", signer_arn, "cfo@example.com")]:
            tally.violations.append(f"{entity}: versions {[(v['changeId'], v['principal']) for v in versions]}")
        tally.outcomes["refused"] += sum(1 for o in outcomes.values() if o in REFUSED)
    return tally


def _insider(cf: Changeflow, name: str, actions: list[str], endpoint: str):
    """An IAM user whose own policy grants ``actions`` on everything: a client maker signing as it."""
    import boto3

    iam = cf.make("iam")
    iam.create_user(UserName=name)
    iam.put_user_policy(UserName=name, PolicyName="granted", PolicyDocument=json.dumps({
        "Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": actions, "Resource": "*"}]}))
    key = iam.create_access_key(UserName=name)["AccessKey"]
    session = boto3.Session(aws_access_key_id=key["AccessKeyId"], aws_secret_access_key=key["SecretAccessKey"],
                            region_name="us-east-1")
    return lambda service: session.client(service, endpoint_url=endpoint)


def _insider_attacks(cf: Changeflow, server, outcomes: dict[str, Any], mallory, change: dict, signer_arn: str,
                     genuine_arn: str, run: str) -> None:
    """What an insider with ``states:*`` and ``lambda:InvokeFunction`` tries (issue 33), each outcome recorded."""
    from ..audit import principals as audited

    sfn, lam = mallory("stepfunctions"), mallory("lambda")
    forged = {"request": json.dumps({**change, "changeId": "c6"}), "principal": {"via": "api", "arn": signer_arn}}
    arn = sfn.start_execution(stateMachineArn=cf.state_machine_arn, name=f"forged-{run}",
                              input=json.dumps(forged))["executionArn"]
    outcomes[ATTACKS[9]] = cf.wait(arn, 60).error
    sealed = sfn.describe_execution(executionArn=genuine_arn)["input"]
    arn = sfn.start_execution(stateMachineArn=cf.state_machine_arn, name=f"replayed-{run}", input=sealed)["executionArn"]
    outcomes[ATTACKS[10]] = cf.wait(arn, 60).error
    writer = server.stack.function("UpdateLatestFunction")
    payload = {"change": {**change, "changeId": "c7", "principal": {"via": "api", "arn": signer_arn}},
               "latest": None, "content": {}, "attempt": 1, "proof": "A" * 43,
               "execution": {"id": "forged", "name": "forged"}}
    answer = json.loads(lam.invoke(FunctionName=writer.name, Payload=json.dumps(payload))["Payload"].read())
    outcomes[ATTACKS[11]] = answer.get("errorType")
    # the front function seals what it is handed: its version, on an entity of its own, is verify's to refuse
    direct = f"{change['entityId']}-direct"
    event = {"body": json.dumps({**change, "entityId": direct}), "headers": {"Content-Type": "application/json"},
             "requestContext": {"requestId": f"forged-{run}", "requestTimeEpoch": int(datetime.now().timestamp() * 1000),
                                "identity": {"userArn": signer_arn, "accountId": "123456789012", "caller": "AIDA"}}}
    started = json.loads(json.loads(lam.invoke(FunctionName=server.stack.function("SubmitChangeFunction").name,
                                               Payload=json.dumps(event))["Payload"].read())["body"])
    cf.wait(started["executionArn"], 60)
    problems, _ = audited.check_principals(cf, direct)
    outcomes[ATTACKS[12]] = "refused by verify --principals" if [p.split(":")[0] for p in problems] == [
        "version 1"] else f"verify --principals said {problems}"
