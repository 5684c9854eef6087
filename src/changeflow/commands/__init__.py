"""The command line, one module per command group (like ``samcli.commands``), each thin: its options, its
help and exit statuses, and calls to the parts below (the embedded stack, the client, the audit, the
console). changeflow.cli builds the parser from the groups in the order ``changeflow --help`` lists them.

- ``run``: ``run``, ``demo`` (the embedded stack in this process);
- ``local``: ``serve``, ``local invoke``, ``console`` (what runs on 127.0.0.1, or one function in the
  Lambda runtime);
- ``submit``: ``submit``; ``reads``: ``versions``, ``history``, ``executions``; ``audit``: ``verify``,
  ``digest``, ``repair`` (against ``changeflow serve`` or a stack deployed on AWS);
- ``options``, ``output``, ``changes``: what the groups share (option types and help, printing and exit
  statuses, change files).
"""
