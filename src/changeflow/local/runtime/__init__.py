"""The Lambda runtime without Docker, as ``sam local invoke`` runs it but with no container: the Runtime
Interface Emulator that ships in aws-sam-cli, with ``awslambdaric`` on Lambda's python3.13.
``emulator``: one execution environment (a process) and what its answers mean; ``functions``: a template's
function as the runtime runs it; ``endpoint``: the AWS endpoint of the handlers in the emulator;
``dispatch``: the embedded stack's Lambda invocations in warm environments (``--lambda-runtime emulator``).
The command is ``changeflow local invoke`` (changeflow.commands.local)."""

# Where the handlers of an embedded stack run: in this process (the default, fastest), or each function in
# its own Lambda runtime process (the emulator, ``dispatch``).
LAMBDA_RUNTIMES = ("in-process", "emulator")
