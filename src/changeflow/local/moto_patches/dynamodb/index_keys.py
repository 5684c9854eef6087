"""A secondary index's key attributes have their declared type in every item of the table, where moto 5.2.5
accepts any (it refuses only an update expression that names the attribute literally). Shown failing on stock
moto by tests/test_parity.py.

DynamoDB refuses a write whose item holds an index key attribute of another type than its
``AttributeDefinitions`` declare, whether or not the item has the index's other key (a sparse index): a
ValidationException "One or more parameter values were invalid: Type mismatch for Index Key <attribute>
Expected: <type> Actual: <type> IndexName: <index>" (the first index in alphabetical order, where one
attribute keys several). An update is checked only for the index keys it changes. "The data type of an index
key attribute must be a scalar: String, Number or Binary" (Developer Guide, "Using Global Secondary Indexes",
https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/GSI.html); the message as real DynamoDB
writes it is recorded by DynamoDB emulators' conformance suites (nubo-db/dynoxide#92 and #94,
ExtendDB/extenddb#184). Issue 35: the changes index's ``recordedHour`` and ``digestShard`` stay numbers.
"""

from __future__ import annotations

import copy

from ..originals import ORIGINALS


def _mismatch(table, item_attrs: dict, only: set[str] | None = None) -> str | None:
    """The message for the first index key attribute of ``item_attrs`` (wire form) of the wrong type."""
    declared = {d["AttributeName"]: d["AttributeType"] for d in table.attr}
    for index in sorted(list(table.indexes) + list(table.global_indexes), key=lambda i: i.name):
        for name in index.schema_key_attrs:
            value = item_attrs.get(name)
            if value is None or (only is not None and name not in only) or not isinstance(value, dict):
                continue
            (actual,) = value.keys() if len(value) == 1 else (None,)
            if actual != declared.get(name):
                return (f"One or more parameter values were invalid: Type mismatch for Index Key {name} Expected: "
                        f"{declared.get(name)} Actual: {actual} IndexName: {index.name}")
    return None


def patch_index_key_types() -> None:
    from moto.dynamodb.exceptions import MockValidationException
    from moto.dynamodb.models import DynamoDBBackend
    from moto.dynamodb.models.table import Table

    put = ORIGINALS.setdefault("index_keys_table_put_item", Table.put_item)
    update = ORIGINALS.setdefault("index_keys_backend_update_item", DynamoDBBackend.update_item)

    def put_item(self, item_attrs, *args, **kwargs):
        message = _mismatch(self, item_attrs)
        if message:
            raise MockValidationException(message)
        return put(self, item_attrs, *args, **kwargs)

    def update_item(self, table_name, key, *args, **kwargs):
        table = self.get_table(table_name)
        before = table.get_item(*self.get_keys_value(table, key)) if table.indexes or table.global_indexes else None
        kept = copy.deepcopy(before.attrs) if before is not None else None
        item = update(self, table_name, key, *args, **kwargs)
        if table.indexes or table.global_indexes:
            keys = {name for index in table.indexes + table.global_indexes for name in index.schema_key_attrs}
            wire = {name: item.attrs[name].to_json() for name in keys if name in item.attrs}
            old = {name: kept[name].to_json() for name in keys if kept and name in kept}
            message = _mismatch(table, wire, {name for name in wire if old.get(name) != wire[name]})
            if message:
                if kept is not None:  # the request is atomic (core.locking): nothing of it stays
                    item.attrs = kept
                else:
                    table.delete_item(*self.get_keys_value(table, key))
                raise MockValidationException(message)
        return item

    Table.put_item = put_item
    DynamoDBBackend.update_item = update_item
