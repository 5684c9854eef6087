"""moto, patched for the embedded stack, grouped by service as moto groups its own code (``core``,
``stepfunctions``, ``events``, ``dynamodb``, ``kms``, ``s3``, ``scheduler``), one AWS behaviour group per module, each module
citing its AWS page. Two kinds of patch:

- Where moto 5.2.5 is more lenient than AWS, or does something AWS does not, the patch makes it do what
  AWS's documentation says (tests/test_parity.py shows each one failing on stock moto). Patches of the
  Step Functions interpreter keep what it does (the same states, transitions, retries and history
  events) and change only how the world around it behaves.
- Where moto's cost grows faster than the work, a ``perf`` module per service makes it linear, changing
  how fast moto answers and never what it answers (tests/test_moto_perf.py compares the answers).

What each module does:

- ``core.locking``: every request atomic; ``core.perf``: moto's model registry keeps live objects only, and
  a request's action is found without listing its class's functions.
- ``stepfunctions.lambda_tasks``: Lambda tasks answered by the stack's handlers (results with AWS's
  ``SdkHttpMetadata`` and ``SdkResponseMetadata``), failures named
  ``Lambda.<Code>``; ``.clock``: Wait states and retry back-offs on the stack's time scale;
  ``.parse_cache``: definitions and JSONPath parsed once; ``.history``: GetExecutionHistory paged;
  ``.start_execution``: StartExecution's name and input rules; ``.context_object``: ``StartTime`` as AWS
  writes it; ``.termination``: an event when an execution ends; ``.express``: Express workflows and
  execution time limits; ``.execution_log``: the execution log in CloudWatch Logs (an input or output
  past 248 KB escaped cut, as AWS cuts it); ``.redrive``: RedriveExecution (moto has none);
  ``.intrinsics``: ``States.MathRandom``; ``.perf``: executions indexed, closed executions compacted, the
  interpreter's deep copies of JSON made fast; ``.threads``: the Task states' threads from a pool.
- ``events.targets``: a rule's Step Functions targets, with their input and dead-letter queue;
  ``events.input_transformer``: an input transformer's predefined variables (the rule's ARN, the event
  without its detail, the ingestion time as ISO 8601).
- ``dynamodb.limits``: AWS's number, expression and key limits; ``dynamodb.numbers``: numbers stored
  normalised, returned written out and read back exactly; ``dynamodb.attribute_values``: one type per
  attribute value; ``dynamodb.indexes``: a local secondary index's Query fetches the items it does not
  project; ``dynamodb.index_keys``: an index key attribute of its declared type in every item;
  ``dynamodb.perf``: Query and Scan in linear time.
- ``kms.perf``: key material made on first use.
- ``awslambda.invoke``: moto's Lambda ``Invoke`` answered by the stack's in-process functions.
- ``iam.enforcement``: every request signed by an identity moto issued is authorized as AWS does it
  (``iam.evaluation``: identity and resource policies, conditions; ``iam.requests``: each request's
  resource, policy and context keys); ``events.targets`` authorizes a rule's target as EventBridge does.
- ``dynamodbstreams.retention``: a stream record lives 24 hours, then it is trimmed (on the stream's clock,
  ``StreamClock``); ``pipes.runner``: a pipe with a DynamoDB stream source runs as Pipes does (issue 36).
- ``s3.object_lock``: a locked version's retention never shortened (compliance mode: never changed),
  versioning never suspended on a bucket with Object Lock, and its default retention changed on a bucket
  that holds objects, as AWS allows (issue 35's digests).
- ``scheduler.runs``: EventBridge Scheduler's schedules invoke their Lambda targets, on the stack's time scale
  (moto stores a schedule and never runs it).
"""

from __future__ import annotations

import threading
from typing import Any, Callable

from .core import locking
from .core import perf as core_perf
from .awslambda import invoke as lambda_invoke
from .dynamodb import attribute_values as dynamodb_attribute_values
from .dynamodb import index_keys as dynamodb_index_keys
from .dynamodb import indexes as dynamodb_indexes
from .dynamodb import limits as dynamodb_limits
from .dynamodb import numbers as dynamodb_numbers
from .dynamodb import perf as dynamodb_perf
from .dynamodbstreams import retention as stream_retention
from .events import input_transformer, targets
from .iam import enforcement, requests as iam_requests
from .kms import perf as kms_perf
from .originals import ORIGINALS
from .pipes import runner as pipes_runner
from .s3 import object_lock as s3_object_lock
from .scheduler import runs as scheduler_runs
from .stepfunctions import (clock, context_object, execution_log, express, history, intrinsics, lambda_tasks,
                            parse_cache, redrive, start_execution, termination, threads)
from .stepfunctions import perf as stepfunctions_perf

_INSTALL_LOCK = threading.Lock()
_PERF_LOCK = threading.Lock()


def install(invoke: Callable[..., Any], caches: bool = True, invoke_request: Callable[..., Any] | None = None) -> None:
    """Install every patch once per process. ``invoke`` answers ``before-call.lambda.Invoke``;
    ``invoke_request(name, qualifier, body, invocation type)`` answers moto's Lambda ``Invoke`` for the stack's
    functions (None: not one of them).
    ``caches=False`` leaves out the caches (clients, parsed definitions, JSONPath) and the perf patches, for
    measuring what they save; nothing else depends on them. The order is part of the design: where two
    patches wrap one method, the one installed later runs outside the other."""
    with _INSTALL_LOCK:
        if "installed" in ORIGINALS:
            if ORIGINALS["caches"] != caches:
                raise RuntimeError("moto is already patched with caches=%s in this process" % ORIGINALS["caches"])
            ORIGINALS["invoke"][0] = invoke
            ORIGINALS["invoke_request"][0] = invoke_request or _not_ours
            return
        ORIGINALS["caches"] = caches
        ORIGINALS["invoke"] = [invoke]
        ORIGINALS["invoke_request"] = [invoke_request or _not_ours]
        lambda_tasks.patch_lambda_clients(cache=caches)
        lambda_tasks.patch_lambda_error_names()
        lambda_tasks.patch_lambda_task_sdk_metadata()
        clock.patch_time()
        if caches:
            parse_cache.patch_parse_cache()
            parse_cache.patch_validation_cache()
            parse_cache.patch_jsonpath_cache()
            lambda_tasks.patch_lambda_task_invoke_in_process()
            threads.patch_interpreter_threads()
            install_perf()  # linear-cost indexes: same answers, no super-linear scans
        history.patch_history_paging()
        start_execution.patch_execution_names()
        targets.patch_eventbridge_to_stepfunctions()
        input_transformer.patch_predefined_variables()
        context_object.patch_start_time()
        termination.patch_termination()
        locking.patch_request_lock()
        # AWS's limits and semantics where moto 5.2.5 is more lenient (tests/test_parity.py shows each
        # failing on stock moto; limits moto already enforces as AWS does are not patched)
        start_execution.patch_execution_name_rules()
        start_execution.patch_execution_input_limit()
        express.patch_express_names_not_deduped()
        express.patch_express_apis_unavailable()
        execution_log.patch_execution_log_delivery()
        execution_log.patch_execution_log_truncation()  # after the delivery: it wraps its publisher
        redrive.patch_redrive_execution()
        express.patch_express_duration_limit()
        intrinsics.patch_math_random_end_exclusive()
        dynamodb_limits.patch_dynamodb_number_limits()
        dynamodb_limits.patch_dynamodb_expression_size()
        dynamodb_limits.patch_dynamodb_key_size_on_reads()
        dynamodb_numbers.patch_number_normalisation()  # after the number limits: it rewrites what they passed
        dynamodb_numbers.patch_numbers_read_exactly()
        dynamodb_attribute_values.patch_one_type_per_attribute_value()
        dynamodb_indexes.patch_local_index_fetches()
        enforcement.patch_request_authorization(iam_requests.checks_of, iam_requests.s3_checks)
        lambda_invoke.patch_invoke_in_process_functions()
        stream_retention.patch_stream_retention()  # issue 36: the feed's source and its runner
        pipes_runner.patch_pipes_run()  # after the retention: it wraps the shard's add to wake the pipes
        dynamodb_index_keys.patch_index_key_types()
        s3_object_lock.patch_retention_never_shortened()
        s3_object_lock.patch_versioning_stays_enabled()
        s3_object_lock.patch_lock_configuration_on_a_bucket_with_objects()
        scheduler_runs.patch_schedules_run()
        ORIGINALS["installed"] = True


def _not_ours(*args: Any) -> None:
    return None


def install_perf() -> None:
    """The perf patches, once per process (``install`` calls this unless ``caches=False``)."""
    with _PERF_LOCK:
        if ORIGINALS.get("perf installed"):
            return
        dynamodb_perf.patch_query_by_partition()
        dynamodb_perf.patch_scan_by_key_order()
        stepfunctions_perf.patch_execution_index()
        stepfunctions_perf.patch_compact_closed_executions()
        stepfunctions_perf.patch_json_deep_copies()
        core_perf.patch_model_registry()
        core_perf.patch_action_lookup()
        core_perf.patch_response_member_keys()
        kms_perf.patch_lazy_key_material()
        ORIGINALS["perf installed"] = True
