"""A token bucket on the client side, so that an import starts executions no faster than Step Functions'
own StartExecution bucket refills (and leaves the account's state transitions room): ``rate`` tokens a
second, at most ``burst`` saved up; ``take`` waits for one. Step Functions throttles StartExecution and
state transitions with token buckets too (bucket size and refill rate per Region):
https://docs.aws.amazon.com/step-functions/latest/dg/service-quotas.html#service-limits-api-action-throttling-general"""

from __future__ import annotations

import threading
import time
from typing import Callable


class TokenBucket:
    def __init__(self, rate: float, burst: float = 1.0, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep):
        if rate <= 0:
            raise ValueError("rate must be positive")
        self.rate, self.burst, self.clock, self.sleep = rate, burst, clock, sleep
        self.tokens = burst
        self.updated = clock()
        self._lock = threading.Lock()

    def take(self) -> None:
        """Wait until a token is there, and take it."""
        while True:
            with self._lock:
                now = self.clock()
                self.tokens = min(self.burst, self.tokens + (now - self.updated) * self.rate)
                self.updated = now
                if self.tokens >= 1:
                    self.tokens -= 1
                    return
                wait = (1 - self.tokens) / self.rate
            self.sleep(wait)
