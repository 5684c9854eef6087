"""The change feed's consumer side (issue 36, docs/feed.md): the table's stream read shard by shard
(``stream``), a consumer that takes each entity's versions once, in order, checking the hash chain
(``follower``), and ``changeflow tail``: history, then the stream, with a checkpoint (``tail``)."""
