"""A Query of a local secondary index returns the table's items as AWS does, where moto 5.2.5 returns only the
attributes the index projects. Shown failing on stock moto by tests/test_parity.py.

"ALL_ATTRIBUTES - Returns all of the item attributes from the specified table or index. If you query a local
secondary index, then for each matching item in the index, DynamoDB fetches the entire item from the parent
table. If the index is configured to project all item attributes, then all of the data can be obtained from
the local secondary index, and no fetching is required." (API reference, Query, ``Select``:
https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_Query.html). The same for a
``ProjectionExpression`` that names attributes the index does not project: "If you query a local secondary
index and request attributes that are not projected into the index, DynamoDB automatically fetches those
attributes from the base table" (developer guide, local secondary indexes, attribute projections:
https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/LSI.html). Stock moto projects the index's
attributes whatever the request asks, so a ``KEYS_ONLY`` index answers keys only. (A global secondary index
fetches nothing: there AWS refuses such a request, and moto keeps its own answer.)

A Query of an index the table does not have is a ``ValidationException`` "The table does not have the
specified index: <name>", as DynamoDB answers it (quoted from the service by aws-amplify/amplify-js#10989
and awslabs/aws-sdk-ios-samples#58); moto 5.2.5 answers ``ResourceNotFoundException``, which AWS keeps for a
table that does not exist. A client that tells a table made without an index by AWS's answer (the time
indexes: ``changeflow_core.timeindex``) must meet it here.
"""

from __future__ import annotations

import contextvars

from ..originals import ORIGINALS

_FETCHING: contextvars.ContextVar[str | None] = contextvars.ContextVar("lsi_fetching", default=None)


def patch_local_index_fetches() -> None:
    """A Query of a local secondary index with ``Select=ALL_ATTRIBUTES`` or a ``ProjectionExpression``
    (``AttributesToGet``) answers from the whole item, as the table holds it."""
    from moto.dynamodb import responses
    from moto.dynamodb.models.table import LocalSecondaryIndex

    if "dynamodb_lsi_fetch" in ORIGINALS:
        return
    original_query = ORIGINALS["dynamodb_lsi_fetch"] = responses.DynamoHandler.query
    original_project = ORIGINALS.setdefault("dynamodb_lsi_project", LocalSecondaryIndex.project)

    def query(self):
        from moto.dynamodb.exceptions import MockValidationException

        body = self.body if isinstance(self.body, dict) else {}
        table = self.dynamodb_backend.tables.get(body.get("TableName")) if body.get("IndexName") else None
        if table is not None and body["IndexName"] not in {i.name for i in table.all_indexes()}:
            raise MockValidationException(f"The table does not have the specified index: {body['IndexName']}")
        fetches = body.get("IndexName") and (body.get("Select") == "ALL_ATTRIBUTES" or body.get("ProjectionExpression")
                                             or body.get("AttributesToGet"))
        token = _FETCHING.set(body.get("IndexName") if fetches else None)
        try:
            return original_query(self)
        finally:
            _FETCHING.reset(token)

    def project(self, item):
        if _FETCHING.get() == self.name:  # the whole item, fetched from the table (then the projection, if any)
            return item
        return original_project(self, item)

    responses.DynamoHandler.query = query
    LocalSecondaryIndex.project = project
