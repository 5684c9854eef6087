"""Named errors. A Lambda that raises one of these fails with ``errorType`` equal to the class name,
which is the name the state machine's Catch and Fail states match on. Keep the names stable."""


class ChangeflowError(Exception):
    """Base of every error the workflow names."""


class ValidationError(ChangeflowError):
    """The change request is malformed; nothing is written. The message starts with the field."""

    def __init__(self, field: str, problem: str):
        self.field = field
        self.problem = problem
        super().__init__(f"{field}: {problem}")


class NotFound(ChangeflowError):
    """A rollback names a version that does not exist (or expired, or is a tombstone)."""


class VersionConflict(ChangeflowError):
    """The caller's expectedVersion is not the stored version."""


class HistoryConflict(ChangeflowError):
    """History item n exists but was written by another change: never overwritten, never retried."""


class OutcomeUnknown(ChangeflowError):
    """A ``v0`` write whose answer was lost may or may not have landed, and nothing left tells which (issue
    32): the execution ends with this name, never as applied, stale or failed. The message says what is
    known (the version it may have written) and to send the same change id again."""
