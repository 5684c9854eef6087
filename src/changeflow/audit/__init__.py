"""The audit: what an auditor runs against a stack (the embedded stack, ``changeflow serve`` or AWS), reading
through the same client as every command. ``verify``: an entity's versions checked; ``digests``: the hash
chain checked, digests taken and proven against; ``executions``: each version's execution checked;
``repair``: the one repair that is always safe. Proofs of a single version belong here too."""
