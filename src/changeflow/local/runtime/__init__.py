"""The Lambda runtime without Docker: the Runtime Interface Emulator that ships in aws-sam-cli, with
``awslambdaric`` on Lambda's python3.13."""
