"""The embedded stack (like ``samcli.local``): the SAM template read and run in this process on moto, its
Lambda functions dispatched to the real handlers (in-process, or in the Lambda runtime emulator), its REST
API answered as API Gateway answers it, and ``changeflow serve``'s endpoint; moto's patches by service."""
