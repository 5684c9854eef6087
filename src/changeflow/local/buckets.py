"""The template's S3 buckets on the embedded stack (issue 35: the digests' bucket): each created with its Object
Lock and default retention, versioning, encryption, public access block, lifecycle rules and ownership, and the
template's bucket policies, as CloudFormation creates them. S3 itself, Object Lock included, is moto's, patched
where it is more lenient than AWS (``moto_patches.s3``)."""

from __future__ import annotations

import json

from .template import Template


def create(template: Template, s3) -> None:
    for logical_id, spec in template.of_type("AWS::S3::Bucket").items():
        props = template.resolve(spec.get("Properties", {}))
        name = template.physical_name(logical_id)
        s3.create_bucket(Bucket=name, ObjectLockEnabledForBucket=bool(props.get("ObjectLockEnabled")),
                         **({} if template.region == "us-east-1" else
                            {"CreateBucketConfiguration": {"LocationConstraint": template.region}}))
        if props.get("VersioningConfiguration"):
            s3.put_bucket_versioning(Bucket=name, VersioningConfiguration=props["VersioningConfiguration"])
        if props.get("ObjectLockConfiguration"):
            s3.put_object_lock_configuration(Bucket=name,
                                             ObjectLockConfiguration=_lock(props["ObjectLockConfiguration"]))
        if props.get("BucketEncryption"):
            s3.put_bucket_encryption(Bucket=name, ServerSideEncryptionConfiguration={
                "Rules": [{"ApplyServerSideEncryptionByDefault": rule["ServerSideEncryptionByDefault"]}
                          for rule in props["BucketEncryption"]["ServerSideEncryptionConfiguration"]]})
        if props.get("PublicAccessBlockConfiguration"):
            s3.put_public_access_block(Bucket=name, PublicAccessBlockConfiguration=props["PublicAccessBlockConfiguration"])
        if props.get("LifecycleConfiguration"):
            s3.put_bucket_lifecycle_configuration(Bucket=name, LifecycleConfiguration={
                "Rules": [_lifecycle_rule(rule) for rule in props["LifecycleConfiguration"]["Rules"]]})
        if props.get("OwnershipControls"):
            s3.put_bucket_ownership_controls(Bucket=name, OwnershipControls=props["OwnershipControls"])
    for spec in template.of_type("AWS::S3::BucketPolicy").values():
        props = template.resolve(spec["Properties"])
        s3.put_bucket_policy(Bucket=props["Bucket"], Policy=json.dumps(props["PolicyDocument"]))


def _lock(lock: dict) -> dict:
    """CloudFormation's ObjectLockConfiguration as PutObjectLockConfiguration takes it."""
    config = {"ObjectLockEnabled": lock.get("ObjectLockEnabled", "Enabled")}
    rule = lock.get("Rule", {}).get("DefaultRetention")
    if rule:
        config["Rule"] = {"DefaultRetention": {"Mode": rule["Mode"],
                                               **{k: int(rule[k]) for k in ("Days", "Years") if k in rule}}}
    return config


def _lifecycle_rule(rule: dict) -> dict:
    """A CloudFormation lifecycle rule as PutBucketLifecycleConfiguration takes it."""
    converted = {"ID": rule.get("Id", ""), "Status": rule["Status"], "Filter": {"Prefix": rule.get("Prefix", "")}}
    if "Transitions" in rule:
        converted["Transitions"] = [{"Days": t["TransitionInDays"], "StorageClass": t["StorageClass"]}
                                    for t in rule["Transitions"]]
    if "AbortIncompleteMultipartUpload" in rule:
        converted["AbortIncompleteMultipartUpload"] = rule["AbortIncompleteMultipartUpload"]
    return converted
