"""Patches of moto's KMS (``moto.kms``): key material made when it is first used (``perf``)."""
