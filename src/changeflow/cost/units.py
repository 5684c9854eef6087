"""What a change consumes, counted as AWS counts it: DynamoDB's read and write units from the items the
requests carried (its own rounding; moto's reported capacity is not DynamoDB's), the state transitions
Standard bills, the Lambda invocations, and the seconds spent in Wait states, from an execution history."""

from __future__ import annotations

import json
import math

CHAIN = ("prevHash", "chainHash")  # the hash chain's attributes (changeflow_core.chain)
# The changes index (issue 35, template.yaml's ChangesIndex): its keys; KEYS_ONLY, so an entry holds the table's
# key and these, nothing else
INDEX_KEYS = ("digestShard", "recordedHour")
INDEX_PROJECTION = ("pk", "sk", *INDEX_KEYS)
INDEX = (INDEX_KEYS, INDEX_PROJECTION)
# The index as the digests merge built it (9a50779), kept to measure what keying it by the hour saves: keyed by
# recordedAt, version and chainHash projected, so every v0 write moved its entry
PREVIOUS_INDEX = (("digestShard", "recordedAt"), ("pk", "sk", "digestShard", "recordedAt", "version", "chainHash"))
INDEXED = tuple(dict.fromkeys(INDEX_PROJECTION + PREVIOUS_INDEX[1]))  # what table_index_keys keeps of an item
FORMAT_1_BYTES = len("prevHash") + 64 + len("chainHash") + 64  # the chain as format 1 stored it: hex strings


def item_size(item: dict, chain: bool | str = True) -> int:
    """DynamoDB's size of an item; ``chain=False``: as if it carried no hash chain (its cost, shown apart);
    ``chain="format 1"``: as if it carried the chain as format 1 stored it (145 bytes, the figure before)."""
    from changeflow_core.codec import item_size as size

    if chain is True:
        return size(item)
    bare = size({k: v for k, v in item.items() if k not in CHAIN})
    return bare + (FORMAT_1_BYTES if chain == "format 1" and any(k in item for k in CHAIN) else 0)


# The time indexes (issue 37): a local secondary index per clock, KEYS_ONLY, keyed by an attribute only
# history items carry. An entry is the table's key, the index's key and 100 bytes of overhead; writing an
# item that defines the index's key writes one entry, a write unit per started 1 KB of it ("Provisioned
# throughput considerations for local secondary indexes" and "Storage considerations",
# https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/LSI.html). A Query of the index reads the
# entries it returns (per 4 KB of their projected attributes, together) and, for what the index does not
# project (Select=ALL_ATTRIBUTES), each whole item it fetches from the table, per 4 KB of each.
TIME_INDEX_KEYS = {"EffectiveIndex": "priorEffective", "RecordedIndex": "priorRecorded"}
INDEX_ENTRY_OVERHEAD = 100


def index_entry_size(item: dict, key: str) -> int:
    """Bytes of the index entry of ``item`` (DynamoDB JSON) in the index keyed by ``key``, overhead included."""
    return item_size({name: item[name] for name in ("pk", "sk", key) if name in item}) + INDEX_ENTRY_OVERHEAD


def units_of_call(operation: str, params: dict, response: dict, old_sizes: dict,
                  chain: bool | str = True, indexed: frozenset | set = frozenset(), *,
                  index_keys: dict | None = None) -> tuple[float, float]:
    """(read units, write units) of one request, DynamoDB's rounding: reads per 4 KB (strongly
    consistent: 1 unit, eventually: 0.5), writes per 1 KB of the larger of the old and new item, what a
    put writes into the changes index: ``index_keys`` holds what the index reads of the items before the
    request (``table_index_keys``); without it, a put over an item moves its entry (the most it can cost),
    and the entries a put writes into the time indexes of a table in ``indexed`` (the tables created with them)."""
    item_size_ = lambda item: item_size(item, chain)  # noqa: E731

    if operation in ("GetItem", "Query"):
        found = [response["Item"]] if response.get("Item") else response.get("Items", [])
        if operation == "Query" and params.get("IndexName") in TIME_INDEX_KEYS:
            key = TIME_INDEX_KEYS[params["IndexName"]]
            entries = sum(index_entry_size(i, key) - INDEX_ENTRY_OVERHEAD for i in found)
            units = max(1, math.ceil(entries / 4096))
            if params.get("Select") == "ALL_ATTRIBUTES":  # each item fetched from the table, whole
                units += sum(math.ceil(item_size_(i) / 4096) for i in found)
        else:
            units = max(1, math.ceil(sum(item_size_(i) for i in found) / 4096))
        return (units if params.get("ConsistentRead") else units / 2), 0.0
    key = item_key(params)
    old = old_sizes.get(key, 0)
    index = 0.0
    if operation == "PutItem":
        new = item_size_(params["Item"])
        if not (response or {}).get("Error"):  # a put refused by its condition writes no index entry
            before = index_keys.get(key, {}) if index_keys is not None else (
                {k: None for k in INDEX_KEYS} if key in old_sizes else {})
            index = index_write_units(params["Item"], before)
            if params["TableName"] in indexed:  # a new history item: an entry in each time index
                index += sum(math.ceil(index_entry_size(params["Item"], k) / 1024)
                             for k in TIME_INDEX_KEYS.values() if k in params["Item"])
    elif operation == "UpdateItem":  # SET of one numeric attribute (the TTL tag): no index key changes
        new = old + len("expiresAt") + 6
    else:
        raise ValueError(operation)
    return 0.0, float(max(1, math.ceil(max(old, new) / 1024))) + index


def indexed_tables(client, tables) -> frozenset:
    """Which of ``tables`` were created with the time indexes."""
    return frozenset(t for t in set(tables) if any(
        i["IndexName"] in TIME_INDEX_KEYS
        for i in client.describe_table(TableName=t)["Table"].get("LocalSecondaryIndexes", [])))


def item_key(params: dict) -> tuple[str, str]:
    """The (table, key) a write request names, as ``table_sizes`` and ``table_index_keys`` key their items."""
    return (params["TableName"], json.dumps(params.get("Key") or {k: params["Item"][k] for k in ("pk", "sk")},
                                            sort_keys=True))


def index_write_units(item: dict, before: dict, index: tuple = INDEX) -> float:
    """Write units a put of ``item`` costs in the changes index (``index``: its keys and projection; the
    current one, or ``PREVIOUS_INDEX``), given the attributes of the item it replaces (``before``, as
    ``table_index_keys`` keeps them; empty: no item). As DynamoDB counts them ("Provisioned throughput
    considerations for Global Secondary Indexes", https://docs.aws.amazon.com/amazondynamodb/latest/
    developerguide/GSI.html): "If a write to a table does not require a global secondary index update, no
    write capacity is consumed from the index": none when neither item is in the index (history), or when
    neither the keys nor what the index projects changed (a version recorded in the hour of the one before it:
    KEYS_ONLY projects nothing else); one entry written for an item that "defines an indexed attribute" it did
    not (a new entity), deleted for one that no longer does, or updated in place (keys kept, a projected
    attribute changed); two when "an update to the table changes the value of an indexed key attribute (from
    A to B)" (the old entry out, the new one in)."""
    from changeflow_core.codec import item_size as size

    keys, projection = index
    indexed_after, indexed_before = all(k in item for k in keys), all(k in before for k in keys)
    if not (indexed_after or indexed_before):
        return 0.0
    entry = max(1, math.ceil(size({k: (item if indexed_after else before)[k] for k in projection
                                   if k in (item if indexed_after else before)}) / 1024))
    if not (indexed_after and indexed_before):
        return float(entry)
    if any(item[k] != before[k] for k in keys):
        return float(2 * entry)
    projected = [k for k in projection if k not in ("pk", "sk")]  # the table's key: the same item's
    return float(entry) if any(item.get(k) != before.get(k) for k in projected) else 0.0


def table_items(client, table: str) -> list[dict]:
    """Every item of ``table`` (a Scan, page after page): read once, sized and keyed as below as often as needed."""
    items, start = [], None
    while True:
        page = client.scan(TableName=table, **({"ExclusiveStartKey": start} if start else {}))
        items.extend(page["Items"])
        start = page.get("LastEvaluatedKey")
        if not start:
            return items


def table_index_keys(client, table: str, items: list[dict] | None = None) -> dict:
    """What the changes index reads of every item of ``table`` in it (``INDEXED``: its keys and projection,
    now and as first built), keyed as ``item_key`` keys requests: ``index_write_units``'s ``before``.
    ``items``: the table's, already read (``table_items``)."""
    keys = {}
    for item in table_items(client, table) if items is None else items:
        found = {k: item[k] for k in INDEXED if k in item}
        if INDEX_KEYS[0] in found:  # the shard: v0 only
            keys[(table, json.dumps({"pk": item["pk"], "sk": item["sk"]}, sort_keys=True))] = found
    return keys


def table_sizes(client, table: str, chain: bool | str = True, items: list[dict] | None = None) -> dict:
    return {(table, json.dumps({"pk": item["pk"], "sk": item["sk"]}, sort_keys=True)): item_size(item, chain)
            for item in (table_items(client, table) if items is None else items)}


def lambda_invocations(events: list[dict]) -> int:
    return sum(1 for ev in events if ev["type"] in ("TaskScheduled", "LambdaFunctionScheduled"))


def billed_transitions(events: list[dict]) -> int:
    """State transitions as Standard workflows bill them: every state entered, and every retry of a Task
    (AWS pricing: "including retries"). A retry schedules the Task again without entering it again."""
    entered = sum(1 for ev in events if ev["type"].endswith("StateEntered"))
    tasks_entered = sum(1 for ev in events if ev["type"] == "TaskStateEntered")
    return entered + lambda_invocations(events) - tasks_entered


def wait_seconds(events: list[dict]) -> float:
    """Seconds the execution spent in Wait states (the back-off): each WaitStateEntered's ``waitSeconds``
    (the ASL waits ``SecondsPath: $.waitSeconds``). Express bills them as duration."""
    total = 0.0
    for ev in events:
        if ev["type"] == "WaitStateEntered":
            state_input = json.loads(ev["stateEnteredEventDetails"].get("input") or "{}")
            total += float(state_input.get("waitSeconds", 0) or 0)
    return total
