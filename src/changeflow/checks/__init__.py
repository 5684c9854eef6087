"""Checks that go beyond one test: the reliability campaigns and the faults they inject, the second
interpreter of the state machine (``diffasl``), and the security tools (``make lint``)."""
