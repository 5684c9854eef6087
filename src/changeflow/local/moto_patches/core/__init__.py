"""Patches of moto's core (``moto.core``), under every service: requests applied atomically
(``locking``), and a model registry that keeps only live objects (``perf``)."""
