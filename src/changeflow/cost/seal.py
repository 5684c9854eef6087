"""What the seal adds per change (issue 33, docs/identity.md): KMS and Secrets Manager requests (none per change:
the key is read once per execution environment), the bytes it adds to the execution input, the states and the
items, the CPU time of its HMACs, and what the event path's own function and journal add. Measured from the
same code the functions run (changeflow_core.principal, seal, steps), not estimated."""

from __future__ import annotations

import json
import time
from typing import Any

from .prices import LAMBDA_MEMORY_GB, LOG_EVENT_OVERHEAD, PRICES

# issue 33: the seal's prices (us-east-1 list prices read 2026-11-25 on aws.amazon.com/kms/pricing and
# aws.amazon.com/secrets-manager/pricing)
SEAL_PRICES = {
    "kms_per_request": 0.03 / 10_000,  # symmetric requests (Decrypt, GenerateMac, VerifyMac)
    "kms_key_per_month": 1.00,
    "secretsmanager_per_request": 0.05 / 10_000,
    "secret_per_month": 0.40,
}
SEALING_FUNCTIONS = 7  # the functions that read the key: two entry points and the five steps
SEALING_INVOCATIONS = 4  # of them, an applied change through the API invokes the front, fetch, write, history
COLD_START_RATE = 1 / 1000  # assumed: one cold start per thousand invocations of a function
# the HMACs an applied change computes: the entry point seals (1); the fetch step checks the seal and proves
# (2); the v0 write checks and proves (2); the history put checks two proofs (2) and, making the expiry tags
# itself (issue 37.2), proves nothing
HMACS_PER_APPLIED_CHANGE = 7
API_PRINCIPAL = {"via": "api", "arn": "arn:aws:iam::123456789012:user/alice", "accountId": "123456789012",
                 "caller": "AIDAJQABLZS4A3QDU576Q"}
REQUEST_ID = "c6af9ac6-7b61-11e6-9a41-93e8deadbeef"


def seal_share(size: int = 1000, repeat: int = 2000) -> dict[str, Any]:
    """The seal's figures for an applied put of ``size`` bytes of content through the API."""
    from changeflow_core import codec, seal, submissions

    key = seal.Key(b"k" * 64)
    request = {"entityId": "bench#x", "operation": "put", "changeId": "bench-c1", "attributes": {"text": "x" * size}}
    name = "bench-x--bench-c1--" + "0" * 32
    before = submissions.execution_input(request, API_PRINCIPAL, 1_767_225_600_000)
    sealed = submissions.execution_input(request, {**API_PRINCIPAL, "requestId": REQUEST_ID}, 1_767_225_600_000,
                                         key, name)
    proof = len(json.dumps({"proof": key.mac(seal.STEP, {})})) - 2  # one `"proof": "<43>"` field
    item = {"principal": API_PRINCIPAL}
    request_id_bytes = (codec.item_size(codec.serialize_item({"principal": {**API_PRINCIPAL, "requestId": REQUEST_ID}}))
                        - codec.item_size(codec.serialize_item(item)))
    step = {"execution": name, "change": {**request, "principal": API_PRINCIPAL}, "content": {"text": {"S": "x" * size}},
            "latest": {"version": 1, "effectiveAt": 1_767_225_600_000, "deleted": False, "hash": "0" * 64,
                       "changeIds": {"bench-c0": 1}}}  # what the proof covers (changeflow_core.steps._step)
    started = time.perf_counter()
    for _ in range(repeat):
        key.prove(seal.STEP, step)
    per_hmac_ms = (time.perf_counter() - started) * 1000 / repeat
    journal_bytes = len(json.dumps({"version": "0", "id": REQUEST_ID, "detail-type": "ChangeRequested",
                                    "source": "changeflow.client", "account": "123456789012",
                                    "time": "2026-01-01T00:00:00Z", "region": "us-east-1", "resources": [],
                                    "detail": request})) + LOG_EVENT_OVERHEAD
    extra_invocation = PRICES["lambda_per_request"] + PRICES["lambda_per_gb_second"] * LAMBDA_MEMORY_GB * 0.02
    return {
        "kms_requests_per_change": 0,
        "secretsmanager_requests_per_change": 0,
        "requests_per_cold_start": {"secretsmanager:GetSecretValue": 1, "kms:Decrypt (by Secrets Manager)": 1},
        "execution_input_bytes": {"unsealed": len(before), "sealed": len(sealed), "added": len(sealed) - len(before)},
        "state_bytes_added": {"fetch result (R)": proof, "written": proof},
        "item_bytes_added_api": request_id_bytes,
        "ms_per_hmac": per_hmac_ms,
        "ms_per_applied_change": per_hmac_ms * HMACS_PER_APPLIED_CHANGE,
        "hmacs_per_applied_change": HMACS_PER_APPLIED_CHANGE,
        "usd_per_cold_start": SEAL_PRICES["secretsmanager_per_request"] + SEAL_PRICES["kms_per_request"],
        "usd_per_million_changes_key_reads": 1e6 * SEALING_INVOCATIONS * COLD_START_RATE * (
            SEAL_PRICES["secretsmanager_per_request"] + SEAL_PRICES["kms_per_request"]),
        "usd_per_month_fixed": SEAL_PRICES["kms_key_per_month"] + SEAL_PRICES["secret_per_month"],
        "usd_per_million_changes_kms_mac_instead": 2 * 1e6 * SEAL_PRICES["kms_per_request"],
        "events_path_usd_per_million": {
            "event function invocation (20 ms)": 1e6 * extra_invocation,
            "journal ingestion": 1e6 * journal_bytes * PRICES["logs_ingest_per_gb"] / 1e9},
        "journal_bytes_per_event": journal_bytes,
    }


def print_seal_share(share: dict[str, Any]) -> None:
    print("\nThe seal's share (issue 33), an applied 1 KB put through the API: KMS requests per change "
          f"{share['kms_requests_per_change']}, Secrets Manager {share['secretsmanager_requests_per_change']} "
          "(one GetSecretValue, with its KMS Decrypt, per cold start of each of the "
          f"{SEALING_FUNCTIONS} sealing functions)")
    inputs = share["execution_input_bytes"]
    print(f"  execution input {inputs['unsealed']} -> {inputs['sealed']} bytes (+{inputs['added']}); "
          f"+{share['state_bytes_added']['fetch result (R)']} bytes per proof carried (two proofs); "
          f"+{share['item_bytes_added_api']} bytes per item (the API request id)")
    print(f"  {share['hmacs_per_applied_change']} HMACs: {share['ms_per_applied_change']:.3f} ms of CPU per change "
          f"({share['ms_per_hmac'] * 1000:.1f} us each)")
    events = share["events_path_usd_per_million"]
    print(f"  key reads ${share['usd_per_million_changes_key_reads']:.3f} per million changes (one cold start per "
          f"{int(1 / COLD_START_RATE)} invocations); fixed "
          f"${share['usd_per_month_fixed']:.2f}/month; a KMS MAC per change instead: "
          f"${share['usd_per_million_changes_kms_mac_instead']:.2f} per million changes")
    print("  events path, per million events: " + ", ".join(f"{k} ${v:.2f}" for k, v in events.items()))
