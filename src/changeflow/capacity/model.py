"""The capacity model in closed form: token buckets, and the walls a deployment meets.

For each workflow type (Standard, Express) and a steady rate of changes spread over many entities, every
quota's utilisation is demand / limit, where the demand per change comes from the ASL (state transitions and
Lambda invocations of an applied change, ``workflow``), from the measured cost table (DynamoDB units of an
update, ``docs/cost.md``), and for Lambda concurrency from Little's law (invocations/s × mean duration). The
binding quota is the one with the highest utilisation; the headroom is 1 / utilisation. One hot entity is
bounded by its partition's write rate and by optimistic concurrency (one applied write per read-to-write
window), whichever is lower.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .quotas import Quota
from .workflow import Workflow

RATES = (100, 1_000, 10_000)  # changes per second, the three loads


@dataclass(frozen=True)
class TokenBucket:
    """AWS's token bucket: ``bucket`` tokens at most, ``refill`` tokens per second; a request takes one."""

    bucket: float
    refill: float

    def admitted(self, rate: float, seconds: float) -> float:
        """Requests admitted in ``seconds`` at a constant ``rate``, starting from a full bucket."""
        return min(rate * seconds, self.bucket + self.refill * seconds)

    def burst_seconds(self, rate: float) -> float:
        """How long ``rate`` is admitted in full from a full bucket before throttling starts."""
        return math.inf if rate <= self.refill else self.bucket / (rate - self.refill)

    def steady(self, rate: float) -> float:
        """The rate admitted in the long run."""
        return min(rate, self.refill)


@dataclass(frozen=True)
class Demand:
    """What one applied change asks of each service (no contention)."""

    transitions: float
    invocations: float  # of the workflow's functions
    entry_invocations: float  # the entry point's function: SubmitChange (API) or ReceiveChangeEvent (EventBridge)
    read_units: float
    write_units: float
    invocation_seconds: float  # mean duration of one invocation on AWS (Little's law)


@dataclass(frozen=True)
class Load:
    quota: Quota
    demand: float  # per second, in the quota's unit
    moves: str

    @property
    def utilisation(self) -> float:
        return self.demand / self.quota.rate

    @property
    def headroom(self) -> float:
        return math.inf if self.demand == 0 else self.quota.rate / self.demand


# What moves each wall (the levers): a quota increase where adjustable, Express, batching, an SQS
# FIFO front per entity, sharding across Regions or accounts.
MOVES = {
    "sfn_standard_start": "quota increase (adjustable); Express (6,000/s); shard across Regions or accounts",
    "sfn_standard_transition": "quota increase (adjustable); Express (no transition quota); fewer states per change",
    "sfn_express_start": "quota increase (adjustable); batch several changes per execution (not built); "
                         "shard across Regions or accounts",
    "lambda_concurrency": "quota increase (adjustable); shorter invocations; shard across accounts",
    "ddb_table_write": "quota increase (adjustable); SeparateHistoryTable=true splits the writes over two tables",
    "ddb_table_read": "quota increase (adjustable)",
    "ddb_new_table_write": "ramp up over 30 minutes, or pre-warm the table (warm throughput)",
    "apigw_account": "quota increase (adjustable); EventBridge or direct StartExecution; shard across Regions",
    "api_stage": "raise ApiThrottlingRateLimit / BurstLimit (parameters, up to the account's 10,000/s); "
                 "EventBridge or direct StartExecution for bulk writers (changeflow import); reads elsewhere",
    "sfn_describe_execution": "quota increase (adjustable); fewer resends (a client waits for its answer); "
                              "Express (no DescribeExecution: it reads v0 instead)",
    "events_put": "batch up to 10 entries per PutEvents; quota increase (adjustable)",
    "events_invocations": "quota increase (adjustable); over it EventBridge delays, it does not drop",
    "ddb_partition_write": "an SQS FIFO front (MessageGroupId = entityId) or merging changes; split the entity",
    "occ": "an SQS FIFO front per entity (one change in flight: no conflicts); merge changes upstream",
}


def demand_of(workflow: Workflow, units: tuple[float, float], invocation_seconds: float) -> Demand:
    """An applied change's demand: transitions and invocations read from the ASL, ``units`` (read, write)
    from the measured cost table, ``invocation_seconds`` from the AWS platform's latencies."""
    return Demand(workflow.transitions_per_applied, workflow.invocations_per_applied, 1.0, units[0], units[1],
                  invocation_seconds)


def loads(rate: float, standard: bool, demand: Demand, table: dict[str, Quota], entry: str = "api",
          reads_per_change: float = 0.0, resends_per_change: float = 0.0) -> list[Load]:
    """Every quota's load at ``rate`` changes/s over many entities, for one workflow type and entry point
    (``api``: the REST API and SubmitChange; ``events``: EventBridge's rule and ReceiveChangeEvent, one event per
    PutEvents). Through
    the API, the stage's throttle (``api_stage``, when the table has the stack's) takes every request of the
    stage: the changes, ``reads_per_change`` reads and ``resends_per_change`` resends; on Standard each
    resend is a DescribeExecution."""
    invocations = demand.invocations + demand.entry_invocations  # both entry points start through a function
    rows = [Load(table["sfn_standard_start" if standard else "sfn_express_start"], rate,
                 MOVES["sfn_standard_start" if standard else "sfn_express_start"])]
    if standard:
        rows.append(Load(table["sfn_standard_transition"], rate * demand.transitions, MOVES["sfn_standard_transition"]))
    rows += [
        Load(table["lambda_concurrency"], rate * invocations * demand.invocation_seconds, MOVES["lambda_concurrency"]),
        Load(table["ddb_table_write"], rate * demand.write_units, MOVES["ddb_table_write"]),
        Load(table["ddb_new_table_write"], rate * demand.write_units, MOVES["ddb_new_table_write"]),
        Load(table["ddb_table_read"], rate * demand.read_units, MOVES["ddb_table_read"]),
    ]
    if entry == "api":
        requests = rate * (1 + reads_per_change + resends_per_change)
        rows.append(Load(table["apigw_account"], requests, MOVES["apigw_account"]))
        if "api_stage" in table:
            rows.append(Load(table["api_stage"], requests, MOVES["api_stage"]))
        if standard:
            rows.append(Load(table["sfn_describe_execution"], rate * resends_per_change, MOVES["sfn_describe_execution"]))
    else:
        rows += [Load(table["events_put"], rate, MOVES["events_put"]),
                 Load(table["events_invocations"], rate, MOVES["events_invocations"])]
    return rows


# Walls of the first half hour only: a new on-demand table grows by itself (shown, never the steady wall).
TRANSIENT = {"ddb_new_table_write"}


def binding(rows: list[Load]) -> Load:
    """The first wall in steady state: the quota with the highest utilisation (transient ones aside)."""
    return max((row for row in rows if row.quota.key not in TRANSIENT), key=lambda row: row.utilisation)


@dataclass(frozen=True)
class HotKey:
    partition_limit: float  # applied changes/s one partition's write rate allows
    occ_limit: float  # applied changes/s optimistic concurrency allows (1 / read-to-write window)
    window_s: float

    @property
    def limit(self) -> float:
        return min(self.partition_limit, self.occ_limit)

    @property
    def binding(self) -> str:
        return "ddb_partition_write" if self.partition_limit <= self.occ_limit else "occ"


def hot_key(demand: Demand, table: dict[str, Quota], window_s: float) -> HotKey:
    """One entity: all its items share one partition (the design: v0 and its history under one key), so its
    writes are bounded by one partition's write rate; and each applied change needs the entity unchanged
    between its read and its conditional write, so at most one change applies per ``window_s``."""
    return HotKey(table["ddb_partition_write"].rate / demand.write_units, 1.0 / window_s, window_s)
