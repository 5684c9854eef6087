"""KMS key material made when a key first needs it. moto 5.2.5 generates a 2,048-bit RSA private key for every
KMS key it creates, symmetric ones included (``kms.utils.generate_private_key``'s default branch), and
DynamoDB creates a KMS key for each table with server-side encryption: ~50 ms of CPU per embedded stack
for material nothing reads. The patch makes the same key on first use (Sign, Verify, GetPublicKey): the
same answers, the key as random as before. Speed only (tests/test_moto_perf.py)."""

from __future__ import annotations

from ..originals import ORIGINALS


class PendingKey:
    """A private key not made yet: the key spec to make it with."""

    __slots__ = ("key_spec",)

    def __init__(self, key_spec: str):
        self.key_spec = key_spec


def patch_lazy_key_material() -> None:
    from moto.kms import models

    make = ORIGINALS.setdefault("kms_generate_private_key", models.generate_private_key)
    models.generate_private_key = PendingKey  # what Key.__init__ calls, with the key spec

    def get(self):
        value = self.__dict__.get("private_key")
        if isinstance(value, PendingKey):
            value = self.__dict__["private_key"] = make(value.key_spec)
        return value

    def set(self, value) -> None:
        self.__dict__["private_key"] = value

    models.Key.private_key = property(get, set)
