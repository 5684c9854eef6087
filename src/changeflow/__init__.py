"""changeflow: the local toolkit (embedded stack, CLI, tooling). Never deployed to Lambda."""

__version__ = "0.1.0"
