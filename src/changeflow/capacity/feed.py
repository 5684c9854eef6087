"""Where the change feed stops (issue 36): its quotas' load at the model's rates, and what one stream shard
asks of the pipe. Every applied change is one version, so one event.

- PutEvents (a bus target): Pipes hands an event bus 10 events a batch at most, so between rate/10 requests
  a second (full batches, under load) and one per version (a batch of one); the same quota the event entry
  point uses.
- Target invocations: each rule a consumer puts on ``VersionRecorded`` is one invocation a version.
- A new on-demand Kinesis stream (``FeedTarget=kinesis``): 4,000 records/s until it grows.
- One stream shard: a table's partition takes at most its write rate, so at most ``partition WRU/s ÷ WRU per
  applied change`` versions a second arrive in its shard; the pipe keeps ``ParallelizationFactor`` batches in
  flight a shard, each one GetRecords, the enrichment (an invoke, the handler, one BatchGetItem) and one
  PutEvents: ``batch ÷ that time`` versions a second. Latencies are the capacity model's assumed ones, and
  PutEvents' (``PUT_EVENTS_S``) assumed too.
- Readers of a shard: the pipe, and a ``changeflow tail`` or the console's feed page, make two of DynamoDB's two.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..local.template import Template
from .quotas import Quota

PUT_EVENTS_S = 0.020  # assumed: one PutEvents request of 10 entries, median
RULES = 1  # consumers' rules on VersionRecorded, assumed


@dataclass(frozen=True)
class ShardPipe:
    """One stream shard: versions arriving at most (``arriving``) against what the pipe delivers (``delivered``)."""

    arriving: float
    delivered: float
    batch_seconds: float
    factor: float

    @property
    def utilisation(self) -> float:
        return self.arriving / self.delivered


def parallelization(root: Path) -> float | None:
    """The template's pipe's ``ParallelizationFactor`` (1 when it sets none); None without a template (a copy of
    the model's inputs alone: Pipes' default then)."""
    if not (root / "template.yaml").exists():
        return None
    pipe = Template(root / "template.yaml").resources["FeedPipe"]["Properties"]
    return float(pipe["SourceParameters"]["DynamoDBStreamParameters"].get("ParallelizationFactor", 1))


def shard_pipe(q: dict[str, Quota], write_units: float, read_s: float, invoke_s: float, handler_s: float,
               parallelization: float | None = None) -> ShardPipe:
    batch = q["pipes_bus_batch"].rate
    seconds = read_s + invoke_s + handler_s + read_s + PUT_EVENTS_S
    factor = parallelization or q["pipes_parallelization"].rate
    return ShardPipe(q["ddb_partition_write"].rate / write_units, factor * batch / seconds, seconds, factor)


def rows(rates: tuple[int, ...], q: dict[str, Quota], shard: ShardPipe, hot_limit: float) -> list[list[str]]:
    """The feed's block: each quota's utilisation at each rate (changes/s over many entities)."""
    def pct(x: float) -> str:
        return f"{x * 100:,.0f}%" if x >= 0.01 else f"{x * 100:.1f}%"

    batch, put = q["pipes_bus_batch"].rate, q["events_put"].rate
    out = [
        ["PutEvents (FeedTarget=bus), full batches of 10 / batches of 1"]
        + [f"{pct(r / batch / put)} / {pct(r / put)}" for r in rates]
        + ["shared with the event entry point; quota increase (adjustable)"],
        [f"target invocations, {RULES} consumer rule"] + [pct(r * RULES / q["events_invocations"].rate) for r in rates]
        + ["each rule on VersionRecorded adds a version's worth; quota increase (adjustable)"],
        ["a new on-demand Kinesis stream's writes (FeedTarget=kinesis)"]
        + [pct(r / q["kinesis_new_on_demand"].rate) for r in rates] + ["grows by itself within 30 days, to 200,000/s"],
        [f"one stream shard through the pipe: {shard.arriving:,.0f} versions/s at a partition's full write rate, "
         f"{shard.delivered:,.0f}/s delivered ({shard.factor:g} batches of 10 in flight, "
         f"{shard.batch_seconds * 1000:.0f} ms each)"]
        + [pct(shard.utilisation)] * len(rates)
        + ["a higher ParallelizationFactor (up to 10; order per entity kept)"],
        [f"one hot entity: {hot_limit:,.0f} versions/s at most, in one shard of a Kinesis stream"]
        + [pct(hot_limit / q["kinesis_shard_write"].rate)] * len(rates) + ["no wall: optimistic concurrency binds first"],
        ["readers of a stream shard: the pipe and one tail or console"]
        + [pct(2 / q["streams_readers"].rate)] * len(rates) + ["more consumers read the bus or the Kinesis stream"],
    ]
    return out
