"""Patches of moto's S3 (``moto.s3``): Object Lock as AWS enforces it (``object_lock``)."""
