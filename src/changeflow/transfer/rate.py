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
                if self.tokens >= 1 - 1e-9:  # a float's last bit is not a wait
                    self.tokens = max(0.0, self.tokens - 1)
                    return
                wait = (1 - self.tokens) / self.rate
            self.sleep(wait)


class AdaptiveRate:
    """The start rate, adapted to throttling the way botocore's ``adaptive`` retry mode adapts its client-side
    rate limiter (botocore/retries/adaptive.py, cubic.py): on a throttled request the rate drops to
    ``BETA`` (0.7) of what it was; after each request that went through it climbs back towards the ceiling
    (``--rate``), faster the longer it has been since the last throttle. The bucket then starts at the new
    rate. Never below ``floor``: a throttled import slows down, it never stops."""

    BETA = 0.7  # botocore.retries.cubic: the multiplicative decrease
    SCALE = 0.4  # botocore.retries.cubic: the CUBIC scale constant

    def __init__(self, bucket: TokenBucket, ceiling: float, floor: float = 0.5,
                 clock: Callable[[], float] = time.monotonic):
        self.bucket, self.ceiling, self.floor, self.clock = bucket, ceiling, min(floor, ceiling), clock
        self._lock = threading.Lock()
        self.last_max = ceiling  # the rate when it was last throttled
        self.last_throttle = clock()

    def _set(self, rate: float) -> None:
        with self.bucket._lock:
            self.bucket.rate = max(self.floor, min(self.ceiling, rate))

    def throttled(self) -> None:
        with self._lock:
            self.last_max = self.bucket.rate
            self.last_throttle = self.clock()
            self._set(self.bucket.rate * self.BETA)

    def succeeded(self) -> None:
        with self._lock:
            if self.bucket.rate >= self.ceiling:
                return
            # CUBIC: W(t) = C (t - K)^3 + W_max, K = cbrt(W_max (1 - beta) / C)
            k = (self.last_max * (1 - self.BETA) / self.SCALE) ** (1 / 3)
            t = self.clock() - self.last_throttle
            self._set(self.SCALE * (t - k) ** 3 + self.last_max)
