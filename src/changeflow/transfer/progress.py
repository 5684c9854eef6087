"""Progress as people expect it: a bar on stderr when it is a terminal (tqdm: records/s, ETA, the outcome
counts), plain lines every ``every`` seconds when it is not (a log, CI)."""

from __future__ import annotations

import sys
import threading
import time
from typing import Any, TextIO


def counts_text(summary: Any) -> str:
    parts = [f"{name} {count}" for name, count in summary.counts.items() if count]
    if summary.skipped:
        parts.append(f"skipped {summary.skipped} (done before)")
    if summary.throttled:
        parts.append(f"throttled {summary.throttled} (retried)")
    return ", ".join(parts) or "nothing yet"


class Progress:
    def __init__(self, total: int | None, stream: TextIO = sys.stderr, every: float = 10.0, label: str = "import"):
        self.total, self.stream, self.every, self.label = total, stream, every, label
        self.bar = None
        self._last = time.monotonic()
        self._started = self._last
        self._lock = threading.Lock()
        if stream.isatty():
            from tqdm import tqdm

            self.bar = tqdm(total=total, file=stream, unit="rec", desc=label, dynamic_ncols=True)

    def update(self, summary: Any) -> None:
        with self._lock:
            if self.bar is not None:
                self.bar.n = summary.records
                self.bar.set_postfix_str(counts_text(summary), refresh=False)
                self.bar.refresh()
                return
            now = time.monotonic()
            if now - self._last < self.every:
                return
            self._last = now
            self.stream.write(self.line(summary, now) + "\n")
            self.stream.flush()

    def line(self, summary: Any, now: float | None = None) -> str:
        elapsed = max(1e-9, (now or time.monotonic()) - self._started)
        rate = summary.records / elapsed
        of = f"/{self.total:,}" if self.total else ""
        eta = ""
        if self.total and rate > 0:
            eta = f", about {max(0, self.total - summary.records) / rate:,.0f} s left"
        return f"{self.label}: {summary.records:,}{of} records, {rate:,.1f}/s{eta}: {counts_text(summary)}"

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
