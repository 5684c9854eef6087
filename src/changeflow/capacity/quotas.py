"""The AWS quotas that bound a changeflow deployment: defaults for one account in us-east-1, each with the
page it was read from and the day it was read. The model computes every wall from this table: an edit of a
value here (a granted increase, another Region) changes the tables of ``make capacity``.

Read on 2026-11-24 through the documentation search of the project's tooling (stored copies of the pages).
The Step Functions throttling table is the one in the developer guide's source on GitHub
(awsdocs/aws-step-functions-developer-guide, doc_source/limits-overview.md, commit 28a1c16, archived, so
possibly older than the live page, whose table the search did not return in full); new accounts start
lower ("New AWS accounts have reduced state transition quotas", the live page), so an account's own values
(Service Quotas console) belong here before planning on them.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

READ_ON = "2026-11-24"
SFN_QUOTAS = "https://docs.aws.amazon.com/step-functions/latest/dg/service-quotas.html"
SFN_SOURCE = ("https://github.com/awsdocs/aws-step-functions-developer-guide/blob/"
              "28a1c1692519032cafcd0e8469a2863aa21be25d/doc_source/limits-overview.md")
LAMBDA_QUOTAS = "https://docs.aws.amazon.com/lambda/latest/dg/gettingstarted-limits.html"
LAMBDA_SCALING = "https://docs.aws.amazon.com/lambda/latest/dg/scaling-behavior.html"
DDB_ON_DEMAND = "https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/on-demand-capacity-mode.html"
DDB_QUOTAS = "https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/ServiceQuotas.html"
DDB_THROTTLING = "https://repost.aws/knowledge-center/on-demand-table-throttling-dynamodb"
APIGW_THROTTLING = "https://docs.aws.amazon.com/apigateway/latest/developerguide/api-gateway-request-throttling.html"
EVENTS_QUOTAS = "https://docs.aws.amazon.com/eventbridge/latest/userguide/eb-quota.html"
# the change feed (issue 36), read on 2026-11-25 through the same documentation search
PIPES_BATCHING = "https://docs.aws.amazon.com/eventbridge/latest/userguide/eb-pipes-batching-concurrency.html"
PIPES_DDB_SOURCE = ("https://docs.aws.amazon.com/eventbridge/latest/pipes-reference/"
                    "API_PipeSourceDynamoDBStreamParameters.html")
KINESIS_QUOTAS = "https://docs.aws.amazon.com/streams/latest/dev/service-sizes-and-limits.html"


@dataclass(frozen=True)
class Quota:
    """One quota: a token bucket (``bucket`` burst, ``rate`` refill per second) or a ceiling (``rate`` alone,
    e.g. concurrent executions, where ``bucket`` is None)."""

    key: str
    service: str
    name: str
    rate: float  # per second (a ceiling for a concurrency quota)
    bucket: float | None
    unit: str
    adjustable: str  # "yes", "no", or what the page says
    source: str
    note: str = ""
    read_on: str = READ_ON

    def value_text(self) -> str:
        if self.bucket is None:
            return f"{self.rate:,.0f} {self.unit}"
        return f"bucket {self.bucket:,.0f}, refill {self.rate:,.0f} {self.unit}"


QUOTAS: tuple[Quota, ...] = (
    Quota("sfn_standard_start", "Step Functions", "StartExecution, Standard", 300, 1300, "/s", "yes",
          SFN_SOURCE, "us-east-1, us-west-2, eu-west-1; other Regions bucket 800, refill 150"),
    Quota("sfn_standard_transition", "Step Functions", "StateTransition, Standard", 1500, 5000, "/s", "yes",
          SFN_SOURCE, "us-east-1, us-west-2, eu-west-1; other Regions 800 / 500; throttled transitions "
          "are delayed (CloudWatch ExecutionThrottled)"),
    Quota("sfn_express_start", "Step Functions", "StartExecution, Express", 6000, 6000, "/s", "yes",
          SFN_SOURCE, "Express state transitions: unlimited"),
    Quota("sfn_open_executions", "Step Functions", "open executions, Standard", 1_000_000, None, "executions",
          "yes (millions)", SFN_SOURCE, "per account and Region; ExecutionLimitExceeded beyond"),
    Quota("lambda_concurrency", "Lambda", "concurrent executions", 1000, None, "per account and Region",
          "yes (tens of thousands)", LAMBDA_QUOTAS, "new accounts start lower"),
    Quota("lambda_scaling", "Lambda", "concurrency scaling rate", 100, 1000, "environments/s per function", "no",
          LAMBDA_SCALING, "1,000 new execution environments every 10 s per function, refilled continuously"),
    Quota("ddb_partition_write", "DynamoDB", "one partition's writes", 1000, None, "WRU/s", "no",
          DDB_THROTTLING, "3,000 RRU/s for reads; one item lives in one partition: this is one item's "
          "write rate too"),
    Quota("ddb_partition_read", "DynamoDB", "one partition's reads", 3000, None, "RRU/s", "no", DDB_THROTTLING),
    Quota("ddb_table_write", "DynamoDB", "table-level writes, on demand", 40_000, None, "WRU/s", "yes", DDB_QUOTAS,
          "the same 40,000 RRU/s for reads"),
    Quota("ddb_table_read", "DynamoDB", "table-level reads, on demand", 40_000, None, "RRU/s", "yes", DDB_QUOTAS),
    Quota("ddb_new_table_write", "DynamoDB", "a new on-demand table's writes", 4000, None, "WRU/s",
          "grows by itself", DDB_ON_DEMAND, "12,000 RRU/s reads; instantly up to double the previous peak, "
          "more than that within 30 minutes may throttle"),
    Quota("sfn_describe_execution", "Step Functions", "DescribeExecution", 15, 300, "/s", "yes", SFN_SOURCE,
          "us-east-1, us-west-2, eu-west-1 (other Regions 250 / 10); POST /changes calls it once for each "
          "resend of a change on Standard (its StartExecution answers ExecutionAlreadyExists)", read_on="2026-11-25"),
    Quota("apigw_account", "API Gateway", "account throttle, all APIs", 10_000, 5000, "requests/s", "yes",
          APIGW_THROTTLING, "per account and Region; the stage's own ApiThrottling* parameters sit below it"),
    Quota("events_put", "EventBridge", "PutEvents", 10_000, None, "requests/s", "yes", EVENTS_QUOTAS,
          "us-east-1; up to 10 entries per request"),
    Quota("events_invocations", "EventBridge", "target invocations", 18_750, None, "invocations/s", "yes",
          EVENTS_QUOTAS, "us-east-1; over it invocations are delayed, not dropped"),
    # --- the change feed (issue 36): capacity.feed's block ----------------------------------------------------
    Quota("streams_readers", "DynamoDB Streams", "readers of one stream shard at a time", 2, None, "readers",
          "no", DDB_QUOTAS, "more are throttled: the feed's pipe is one; changeflow tail or the console another",
          read_on="2026-11-25"),
    Quota("pipes_bus_batch", "EventBridge Pipes", "events a batch to an event bus target", 10, None, "events", "no",
          PIPES_BATCHING, "so at least one PutEvents request per 10 versions", read_on="2026-11-25"),
    Quota("pipes_parallelization", "EventBridge Pipes", "batches in flight per stream shard "
          "(ParallelizationFactor)", 1, None, "batches", "1 to 10 (a pipe setting)", PIPES_DDB_SOURCE,
          "the default; the template's pipe sets 2, order kept per partition key (the entity)", read_on="2026-11-25"),
    Quota("kinesis_shard_write", "Kinesis Data Streams", "one shard's writes", 1000, None, "records/s", "no",
          KINESIS_QUOTAS, "and 1 MiB/s; an entity's versions share one shard (partition key: the entity id)",
          read_on="2026-11-25"),
    Quota("kinesis_new_on_demand", "Kinesis Data Streams", "a new on-demand stream's writes", 4000, None,
          "records/s", "grows by itself", KINESIS_QUOTAS, "and 4 MiB/s; up to double its 30-day peak, to "
          "200,000 records/s", read_on="2026-11-25"),
)


def stage_throttle(template_path: Path) -> Quota:
    """The stack's own first wall on the API path: the REST API stage's throttle (``ApiThrottlingRateLimit``,
    ``ApiThrottlingBurstLimit``: the template's defaults), one bucket for every route of the stage, so
    ``POST /changes`` shares it with the read routes (``GET /entities/...``). Over it API Gateway answers 429."""
    from changeflow.local.template import Template

    template = Template(template_path)
    rate = float(template.parameters["ApiThrottlingRateLimit"])
    burst = float(template.parameters["ApiThrottlingBurstLimit"])
    return Quota("api_stage", "API Gateway", "this stack's stage throttle, every route", rate, burst, "requests/s",
                 "a template parameter (ApiThrottlingRateLimit, ApiThrottlingBurstLimit)", APIGW_THROTTLING,
                 "POST /changes and the read routes take from one bucket; over it, 429", read_on="from template.yaml")


def quotas(template_path: Path | None = None, **overrides: float) -> dict[str, Quota]:
    """The quotas by key; ``template_path``: with the stack's own stage throttle (``stage_throttle``);
    ``overrides`` replace a quota's rate (``key=value``), e.g. a granted increase."""
    table = {q.key: q for q in QUOTAS}
    if template_path is not None:
        table["api_stage"] = stage_throttle(template_path)
    for key, value in overrides.items():
        if key not in table:
            raise KeyError(f"no quota {key!r}: one of {', '.join(table)}")
        table[key] = replace(table[key], rate=float(value))
    return table
