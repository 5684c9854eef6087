"""The audit: what an auditor runs against a stack (the embedded stack, ``changeflow serve`` or AWS), through
the same client as every command. ``verify`` checks an entity's versions, ``digests`` checks the hash chain
and takes and proves digests kept outside the account; the one always-safe repair sits beside verify."""
