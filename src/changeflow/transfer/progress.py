"""Progress as people expect it: a bar on stderr when it is a terminal (tqdm: done/total, records/s, ETA, the
outcome counts), plain lines every ``every`` seconds when it is not (a log, CI), nothing with ``enabled=False``."""

from __future__ import annotations

import sys
import threading
import time
from typing import Any, TextIO


def counts_text(summary: Any) -> str:
    parts = [f"{name} {count:,}" for name, count in summary.counts.items() if count]
    if summary.skipped:
        parts.append(f"skipped {summary.skipped:,} (done before)")
    if summary.throttled:
        parts.append(f"throttled {summary.throttled:,} (retried)")
    return ", ".join(parts) or "nothing yet"


def summary_text(summary: Any) -> str:
    """The one line a finished (or stopped) import ends with."""
    counts = ", ".join(f"{name} {count:,}" for name, count in summary.counts.items())
    return (f"{summary.records:,} records in {summary.seconds:,.1f} s: {counts}, skipped {summary.skipped:,} "
            f"(done by an earlier run), throttled {summary.throttled:,} (backed off and retried)")


class Progress:
    def __init__(self, total: int | None, stream: TextIO | None = None, every: float = 10.0, label: str = "import",
                 enabled: bool = True):
        self.stream = stream if stream is not None else sys.stderr
        self.total, self.every, self.label, self.enabled = total, every, label, enabled
        self.bar = None
        self._last = time.monotonic()
        self._started = self._last
        self._lock = threading.Lock()
        if enabled and self.stream.isatty():
            from tqdm import tqdm

            self.bar = tqdm(total=total, file=self.stream, unit="rec", desc=label, dynamic_ncols=True,
                            mininterval=0.2)

    def update(self, summary: Any) -> None:
        if not self.enabled:
            return
        with self._lock:
            if self.bar is not None:
                self.bar.set_postfix_str(counts_text(summary), refresh=False)
                self.bar.update(summary.records - self.bar.n)  # tqdm redraws at most every mininterval
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
        return f"{self.label}: {summary.records:,}{of} records, {rate:,.1f} records/s{eta}: {counts_text(summary)}"

    def close(self, summary: Any = None) -> None:
        with self._lock:
            if self.bar is not None:
                if summary is not None:
                    self.bar.set_postfix_str(counts_text(summary), refresh=False)
                    self.bar.update(summary.records - self.bar.n)
                self.bar.close()
                self.bar = None
            elif self.enabled and summary is not None:
                self.stream.write(self.line(summary) + "\n")
                self.stream.flush()
