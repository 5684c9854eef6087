"""Data in and out of a stack (issue 24): ``importer`` turns the records of an existing data set (JSON
Lines, a DynamoDB export to S3, or a live table's parallel Scan: ``sources``) into puts through the real
workflow, idempotent and resumable (a checkpoint, a rejects file), each outcome read from the table
(``outcomes``), at a rate AWS's quotas allow (``rate``), with progress (``progress``); ``exporter`` writes
every version of the audit as JSON Lines with its chain hashes, and checks such a file offline against a
digest."""
