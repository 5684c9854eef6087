"""S3 Object Lock as AWS enforces it, where moto 5.2.5 is more lenient (issue 35: the digests' bucket).
moto already refuses to delete a locked object version (DeleteObject and DeleteObjects with a version id),
writes a new version on a PUT to a locked key (never over the locked one), refuses to delete a bucket that
holds objects, and applies a bucket's default retention to every new version. Two things it lets through,
and one it refuses that AWS allows:

- ``patch_retention_never_shortened``: PutObjectRetention replaces a version's retention whatever it was.
  AWS: "When an object is locked in compliance mode, its retention mode can't be changed, and its
  retention period can't be shortened"; in governance mode, shortening, removing or changing a retention
  needs the ``x-amz-bypass-governance-retention`` header (and the ``s3:BypassGovernanceRetention``
  permission). Extending one is allowed in both. Refused: ``AccessDenied``.
  https://docs.aws.amazon.com/AmazonS3/latest/userguide/object-lock.html (Retention modes, "Bypassing
  governance mode")
- ``patch_versioning_stays_enabled``: PutBucketVersioning ``Suspended`` on a bucket with Object Lock is
  accepted. AWS: "You can't disable Object Lock or suspend versioning for a bucket with Object Lock
  enabled": ``InvalidBucketState``. https://docs.aws.amazon.com/AmazonS3/latest/userguide/object-lock.html
  (Object Lock considerations).
- ``patch_lock_configuration_on_a_bucket_with_objects``: PutObjectLockConfiguration on a bucket that holds
  objects fails (``BucketNeedsToBeNew``). AWS: "You can enable Object Lock for new or existing buckets", and
  the rule "will be applied by default to every new object placed in the specified bucket": an administrator
  can change or remove the default retention at any time, for the objects put after it (never for those
  locked already). https://docs.aws.amazon.com/AmazonS3/latest/API/API_PutObjectLockConfiguration.html"""

from __future__ import annotations

import datetime

from ..originals import ORIGINALS


def _until(text: str | None) -> datetime.datetime | None:
    if not text:
        return None
    return datetime.datetime.fromisoformat(str(text).replace("Z", "+00:00")).astimezone(datetime.timezone.utc)


def retention_change_refused(mode: str | None, until: str | None, new_mode: str | None, new_until: str | None,
                             bypass: bool, now: datetime.datetime) -> bool:
    """Whether S3 refuses to replace the retention ``(mode, until)`` of a version by ``(new_mode, new_until)``."""
    current = _until(until)
    if mode not in ("COMPLIANCE", "GOVERNANCE") or current is None or current <= now:
        return False  # no retention in force: any may be set
    target = _until(new_until)
    keeps = new_mode == mode and target is not None and target >= current
    if keeps:
        return False  # the same mode, as long or longer: extending is always allowed
    return mode == "COMPLIANCE" or not bypass


def patch_retention_never_shortened() -> None:
    from moto.s3.exceptions import AccessDeniedByLock
    from moto.s3.responses import S3Response

    original = ORIGINALS.setdefault("s3_put_object_retention", S3Response.put_object_retention)

    def put_object_retention(self):
        version_id = self._get_param("versionId")
        key = self.backend.get_object(self.bucket_name, self.parse_key_name(), version_id=version_id)
        if key is not None:
            new_mode, new_until = self._mode_until_from_body()
            bypass = self.headers.get("x-amz-bypass-governance-retention", "").lower() == "true"
            if retention_change_refused(key.lock_mode, key.lock_until, new_mode, new_until, bypass,
                                        datetime.datetime.now(datetime.timezone.utc)):
                raise AccessDeniedByLock()
        return original(self)

    S3Response.put_object_retention = put_object_retention


def patch_versioning_stays_enabled() -> None:
    from moto.s3.exceptions import InvalidBucketState
    from moto.s3.models import S3Backend

    original = ORIGINALS.setdefault("s3_put_bucket_versioning", S3Backend.put_bucket_versioning)

    def put_bucket_versioning(self, bucket_name: str, status: str) -> None:
        if self.get_bucket(bucket_name).object_lock_enabled and status != "Enabled":
            raise InvalidBucketState("An Object Lock configuration is present on this bucket, so the versioning "
                                     "state cannot be changed.")
        return original(self, bucket_name, status)

    S3Backend.put_bucket_versioning = put_bucket_versioning


def patch_lock_configuration_on_a_bucket_with_objects() -> None:
    from moto.s3.exceptions import InvalidBucketState
    from moto.s3.models import S3Backend

    ORIGINALS.setdefault("s3_put_object_lock_configuration", S3Backend.put_object_lock_configuration)

    def put_object_lock_configuration(self, bucket_name: str, lock_enabled: bool, mode: str | None = None,
                                      days: int | None = None, years: int | None = None) -> None:
        bucket = self.get_bucket(bucket_name)
        if not bucket.is_versioned:
            raise InvalidBucketState("Versioning must be 'Enabled' on the bucket to apply a Object Lock configuration")
        if lock_enabled:
            bucket.object_lock_enabled = True  # never turned off: a configuration without it keeps the lock on
        bucket.default_lock_mode, bucket.default_lock_days, bucket.default_lock_years = mode, days, years

    S3Backend.put_object_lock_configuration = put_object_lock_configuration
