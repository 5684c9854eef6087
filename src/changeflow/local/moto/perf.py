"""Where moto 5.2.5's cost grows faster than the work, and the patches that make it linear. Each patch
changes how fast moto answers, never what it answers (tests/test_moto_perf.py compares every patched
answer with moto's own, on random tables and executions):

- DynamoDB Query (``_patch_query_by_partition``): stock ``Table.query`` calls ``Table.all_items()``,
  which sorts every item of the table, then keeps the queried partition, then walks it from its first
  item to the ``ExclusiveStartKey``: each Query costs O(table log table + partition), so paging through
  one entity's N versions costs O(N^2) and every change gets slower as the table fills. DynamoDB reads
  one partition in sort-key order ("Query ... returns all items with that partition key value", in
  sort key order: https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/Query.html). The
  patch keeps each partition's sort keys in a sorted list, updated on each write (O(log n) to find the
  place), and starts the page by bisection: a Query costs O(log partition + page).
- DynamoDB Scan (``_patch_scan_by_key_order``): stock ``Table.scan`` also calls ``Table.all_items()`` and
  then walks the sorted table from its first item to the ``ExclusiveStartKey``: each page of a Scan costs
  O(table log table), so scanning a table of n items a page at a time costs O(n^2 log n / page) and
  ``verify --all`` grows faster than the table. A Scan reads the table from where the last page ended
  ("ExclusiveStartKey: the primary key of the first item that this operation will evaluate":
  https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_Scan.html). The patch keeps the
  table's partition keys in a sorted list (made on the first Scan, then updated on each new or removed
  partition) and starts the page by bisection in it and in the partition's sorted keys (the Query patch's):
  a page costs O(log table + page), in moto's order.
- Step Functions executions (``_patch_execution_index``): stock StartExecution looks for an execution of
  the same name, and DescribeExecution/GetExecutionHistory for the execution's ARN, by walking the state
  machine's list of every execution it ever ran: O(executions) per call, O(n^2) over a run. The patch
  indexes that list by name and by ARN: O(1).
- moto's model registry (``_patch_model_registry``): ``BaseModel.__new__`` appends every model object
  moto ever makes to its class's ``instances_tracked`` list, which only moto's dashboard
  (``/moto-api/data.json``) reads and nothing empties while a mock runs: every DynamoDB ``Item`` (each
  version written, each overwritten ``v0``, and the copy of every item each GetItem, Query and Scan
  returns), every CloudWatch Logs event, every state machine snapshot. A long ``serve`` kept them all,
  so memory grew with every read as well as every write. The patch keeps the registry's entries as weak
  references: the dashboard lists the objects still alive (everything the backends hold), in the order
  they were made; an object nothing else holds is freed.
- Closed executions (``_patch_compact_closed_executions``): a finished execution keeps its whole
  interpreter environment (threads, events, parsed inputs, the context object) only to answer
  GetExecutionHistory later: ~80 KB per change, never freed. The patch keeps, once the execution has
  closed, its history events as one compressed blob (what GetExecutionHistory returns, unchanged) and
  drops the environment. Like AWS, which keeps a closed Standard execution's history for 90 days
  (https://docs.aws.amazon.com/step-functions/latest/dg/service-quotas.html), the embedded stack keeps
  every execution for as long as it runs; only the form is compact. moto also appends every thread
  its interpreter starts to a module-level list (``parser.utils.TMP_THREADS``) that nothing empties;
  the patch drops the finished ones each time an execution closes. At the same moment it packs the
  execution's own CloudWatch Logs stream (its execution log: ~22 records of ~760 bytes, ~21 KB as
  moto's ``LogEvent`` objects, ~2 KB packed; read back unchanged), lets closed executions
  whose state machine snapshots are equal share one (moto deep-copies the state machine for every
  execution), and drops what only a running program reads (the evaluation details and logging session).
"""

from __future__ import annotations

import bisect
import copy
import inspect
import pickle
import threading
import weakref
import zlib
from collections import defaultdict
from typing import Any

_ORIGINALS: dict[str, Any] = {}
_LOCK = threading.Lock()

# moto refuses an item over 405,000 bytes (dynamo_type.LimitedSizeDict), measured as Item.size() measures.
_MAX_ITEM_SIZE = 410_000
# Range conditions whose matching sort keys form one contiguous run in sort-key order.
_CONTIGUOUS = {"EQ", "=", "LE", "<=", "LT", "<", "GE", ">=", "GT", ">", "BETWEEN", "BEGINS_WITH"}


def install() -> None:
    """Install every patch once per process (moto_patches.install calls this)."""
    with _LOCK:
        if _ORIGINALS.get("installed"):
            return
        _patch_query_by_partition()
        _patch_scan_by_key_order()
        _patch_execution_index()
        _patch_compact_closed_executions()
        _patch_model_registry()
        _ORIGINALS["installed"] = True


# --- DynamoDB: a Query reads one partition, in sort-key order ------------------------------------------
def _forgetting(base: type, name: str, *derived: str):
    """``base.name`` for a subclass that keeps derived indexes: the call first forgets them (sets each
    attribute in ``derived`` to None), to be rebuilt on their next use."""
    def method(self, *args, **kwargs):
        for attribute in derived:
            setattr(self, attribute, None)
        return getattr(base, name)(self, *args, **kwargs)
    method.__name__ = name
    return method


class Partition(dict):
    """One partition's items (sort key -> Item), as moto keeps them, plus its sort keys in order.

    The sorted lists are made on the first Query of the partition (O(n log n), once) and then kept up to
    date by every insert and delete (a bisection, O(log n), and a list insert, which is a memmove). Any
    other kind of change to the dict drops them, to be made again on the next Query."""

    _keys: list | None = None  # the DynamoType sort keys, in order
    _casts: list | None = None  # their cast values (what DynamoType compares), same order

    def sorted_keys(self) -> tuple[list, list]:
        if self._keys is None:
            keys = sorted(dict.keys(self), key=_cast)
            self._keys, self._casts = keys, [_cast(k) for k in keys]
        return self._keys, self._casts

    def __setitem__(self, key, value) -> None:
        if self._keys is not None and key not in self:
            i = bisect.bisect_left(self._casts, _cast(key))
            self._keys.insert(i, key)
            self._casts.insert(i, _cast(key))
        dict.__setitem__(self, key, value)

    def __delitem__(self, key) -> None:
        dict.__delitem__(self, key)
        self._forget(key)

    def pop(self, key, *default):
        present = key in self
        value = dict.pop(self, key, *default)
        if present:
            self._forget(key)
        return value

    def _forget(self, key) -> None:
        if self._keys is not None:
            i = bisect.bisect_left(self._casts, _cast(key))
            if i < len(self._keys) and self._keys[i] == key:
                del self._keys[i], self._casts[i]
            else:
                self._keys = self._casts = None

    update = _forgetting(dict, "update", "_keys", "_casts")
    setdefault = _forgetting(dict, "setdefault", "_keys", "_casts")
    popitem = _forgetting(dict, "popitem", "_keys", "_casts")
    clear = _forgetting(dict, "clear", "_keys", "_casts")
    __ior__ = _forgetting(dict, "__ior__", "_keys", "_casts")

    # copies (moto deep-copies a table's items for backups and restores) are plain copies of the items
    def __deepcopy__(self, memo):
        new = Partition()
        for key, value in dict.items(self):
            dict.__setitem__(new, copy.deepcopy(key, memo), copy.deepcopy(value, memo))
        return new

    def __copy__(self):
        new = Partition()
        dict.update(new, self)
        return new

    def __reduce__(self):
        return (Partition, (dict(self),))


def _cast(key) -> Any:
    return key.cast_value


def _patch_query_by_partition() -> None:
    from moto.dynamodb.models import table as table_module
    from moto.dynamodb.models.dynamo_type import DynamoType, Item

    Table = table_module.Table
    original_init = _ORIGINALS.setdefault("table_init", Table.__init__)
    original_query = _ORIGINALS.setdefault("table_query", Table.query)
    signature = inspect.signature(original_query)

    def __init__(self, *args, **kwargs):
        original_init(self, *args, **kwargs)
        if type(self.items) is defaultdict and not self.items:
            self.items = Partitions(Partition if self.range_key_attr else dict)

    def query(self, *args, **kwargs):
        bound = signature.bind(self, *args, **kwargs)
        bound.apply_defaults()
        a = bound.arguments
        window = _window(self, a, DynamoType, Item)
        if window is None:  # a shape this patch does not handle: moto's own path, unchanged
            return original_query(self, *args, **kwargs)
        return _query_window(self, a, window, table_module.RESULT_SIZE_LIMIT, Item)

    Table.__init__ = __init__
    Table.query = query


def _window(table, a: dict, DynamoType, Item):
    """The candidates of a Query on the table's own key, in moto's order, from the first one that can
    change the answer: ``(candidates, past)``, or ``None`` to use moto's own path."""
    hash_key, start = a["hash_key"], a["exclusive_start_key"]
    if a["index_name"] or a["filter_kwargs"] or hash_key is None or (a["limit"] is not None and a["limit"] < 1):
        return None
    if not table.range_key_attr:  # a hash-key-only table: at most one item per partition
        item = table.items.get(hash_key)
        return ([item] if isinstance(item, Item) and item.hash_key == hash_key else []), None
    partition = table.items.get(hash_key)
    if partition is None:
        return [], None
    if type(partition) is not Partition or table.range_key_type not in ("S", "N"):
        return None
    conditions = a["range_key_conditions"]
    if conditions and (len(conditions) != 1 or conditions[0][0] != table.range_key_attr):
        return None
    forward = a["scan_index_forward"] is not False
    keys, casts = partition.sorted_keys()
    lo, hi = 0, len(keys)  # the slice [lo, hi) holds every item moto could return
    if start is not None:
        try:
            if DynamoType(start[table.hash_key_attr]) != hash_key:
                return None
            start_key = DynamoType(start[table.range_key_attr])
        except (KeyError, TypeError, AttributeError):
            return None
        if start_key.type != table.range_key_type:
            return None
        if forward:  # moto skips every item up to and including the start key
            lo = bisect.bisect_right(casts, start_key.cast_value)
        else:
            hi = bisect.bisect_left(casts, start_key.cast_value)
    past = None  # past(cast value): is this sort key beyond the run of keys the condition can match?
    comparison, objs = a["range_comparison"], a["range_objs"]
    if comparison:
        if comparison not in _CONTIGUOUS or any(o.type != table.range_key_type for o in objs):
            return None
        if comparison == "BEGINS_WITH" and table.range_key_type != "S":
            return None
        low, high = objs[0].cast_value, objs[-1].cast_value
        lower = comparison in ("EQ", "=", "GE", ">=", "GT", ">", "BETWEEN", "BEGINS_WITH")
        upper = comparison in ("EQ", "=", "LE", "<=", "LT", "<", "BETWEEN")
        # Before the run, in the order moto walks, nothing matches and nothing is returned yet (moto's
        # limits cannot trigger on an empty page): the walk may start at the run. After the run, moto
        # still visits items (one can end the page with a LastEvaluatedKey): the loop decides there.
        if forward and lower:
            lo = max(lo, bisect.bisect_left(casts, low))
        if not forward and upper:
            hi = min(hi, bisect.bisect_right(casts, high))
        if comparison == "BEGINS_WITH":
            past = (lambda c: not c.startswith(low)) if forward else (lambda c: c < low)
        elif forward and upper:
            past = lambda c: c > high  # noqa: E731
        elif not forward and lower:
            past = lambda c: c < low  # noqa: E731
    if forward:
        candidates = (partition[keys[i]] for i in range(lo, hi))
    else:
        candidates = (partition[keys[i]] for i in range(hi - 1, lo - 1, -1))
    return candidates, past


def _query_window(table, a: dict, window, size_limit: int, Item):
    """moto's Query loop (table.py, ``Table.query``: SKIP/LIMIT/FILTER), over the window only. Two
    differences, neither visible in the answer: items moto would skip as before the start key, or reject
    before the first match, are not visited; and the walk ends when the range condition's run of matching
    keys has ended and no later item could trigger moto's limit checks."""
    candidates, past = window
    limit, start = a["limit"], a["exclusive_start_key"]
    forward = a["scan_index_forward"] is not False
    range_comparison, range_objs = a["range_comparison"], a["range_objs"]
    conditions = a["range_key_conditions"]
    last_range_key_name = conditions[-1][0] if conditions else None
    hash_attrs, range_attrs = [table.hash_key_attr], [table.range_key_attr]

    results: list = []
    result_size = scanned_count = 0
    last_evaluated_key = None
    processing_previous_page = start is not None
    matched = False
    for result in candidates:
        if processing_previous_page:
            if table._item_comes_before_dct(result, start, hash_attrs, range_attrs, forward):
                continue
            processing_previous_page = False
        reached_length_limit = len(results) == limit
        reached_size_limit = (result_size + result.size()) > size_limit
        if reached_length_limit or reached_size_limit:
            last_evaluated_key = table._get_last_evaluated_key(results[-1], None)
            break
        if not range_comparison:
            results.append(result)
            result_size += result.size()
            scanned_count += 1
            continue
        if last_range_key_name:
            value = result.attrs.get(last_range_key_name)
            hit = bool(value) and value.compare(range_comparison, range_objs)
        else:
            hit = result.range_key.compare(range_comparison, range_objs)
        if hit:
            matched = True
            results.append(result)
            result_size += result.size()
            scanned_count += 1
        elif (matched or (past and past(result.range_key.cast_value))) and result_size + _MAX_ITEM_SIZE <= size_limit:
            # the run of matching sort keys is over (the keys that match form one run, in sort order): no
            # later item can match, nor reach moto's size limit; the length limit was not reached here,
            # and cannot be later
            break

    results = copy.deepcopy(results)
    if a["filter_expression"] is not None:
        results = [item for item in results if a["filter_expression"].expr(item)]
    if a["projection_expressions"]:
        results = [r.project(a["projection_expressions"]) for r in results]
    return results, scanned_count, last_evaluated_key


# --- DynamoDB: a Scan page starts where the last one ended, in moto's order ----------------------------
class Partitions(defaultdict):
    """A table's partitions (partition key -> Partition, or -> Item on a table with no sort key), as moto
    keeps them, plus the partition keys in order. The sorted lists are made on the first Scan (O(p log p),
    once) and then kept up to date by every new or removed partition; any other kind of change to the dict
    drops them, to be made again on the next Scan. An emptied partition stays (moto keeps it too, and a
    GetItem of an absent key on a table with a sort key makes one); a Scan passes over it."""

    _keys: list | None = None  # the DynamoType partition keys, in order
    _casts: list | None = None  # their cast values, same order

    def sorted_keys(self) -> tuple[list, list]:
        if self._keys is None:
            keys = sorted(dict.keys(self), key=_cast)
            self._keys, self._casts = keys, [_cast(k) for k in keys]
        return self._keys, self._casts

    # defaultdict's __missing__ stores the new partition through __setitem__, so it is indexed here too
    __setitem__ = Partition.__setitem__
    __delitem__ = Partition.__delitem__
    pop = Partition.pop
    _forget = Partition._forget
    update = Partition.update
    setdefault = Partition.setdefault
    popitem = Partition.popitem
    clear = Partition.clear
    __ior__ = Partition.__ior__

    def __deepcopy__(self, memo):
        new = Partitions(self.default_factory)
        for key, value in dict.items(self):
            dict.__setitem__(new, copy.deepcopy(key, memo), copy.deepcopy(value, memo))
        return new

    def __copy__(self):
        new = Partitions(self.default_factory)
        dict.update(new, self)
        return new

    def __reduce__(self):
        return (_partitions, (self.default_factory, dict(self)))


def _partitions(factory, items: dict) -> Partitions:
    new = Partitions(factory)
    dict.update(new, items)
    return new


def _patch_scan_by_key_order() -> None:
    from moto.dynamodb.models import table as table_module
    from moto.dynamodb.models.dynamo_type import DynamoType

    Table = table_module.Table
    original_scan = _ORIGINALS.setdefault("table_scan", Table.scan)
    signature = inspect.signature(original_scan)

    def scan(self, *args, **kwargs):
        bound = signature.bind(self, *args, **kwargs)
        bound.apply_defaults()
        a = bound.arguments
        candidates = _scan_window(self, a, DynamoType)
        if candidates is None:  # a shape this patch does not handle: moto's own path, unchanged
            return original_scan(self, *args, **kwargs)
        return _scan_window_loop(self, a, candidates, table_module.RESULT_SIZE_LIMIT)

    Table.scan = scan


def _scan_window(table, a: dict, DynamoType):
    """The items of a Scan of the table's own key, in moto's order (``all_items``: by partition key, then
    sort key), from the first one after ``ExclusiveStartKey``; ``None`` to use moto's own path."""
    partitions, start = table.items, a["exclusive_start_key"]
    if a["index_name"] or type(partitions) is not Partitions or table.hash_key_type not in ("S", "N"):
        return None
    has_range = bool(table.range_key_attr)
    if has_range and table.range_key_type not in ("S", "N"):
        return None
    hash_keys, hash_casts = partitions.sorted_keys()
    first, after = 0, None  # the first partition to walk, and where to start in it (a sort key's cast)
    if start is not None:
        try:
            start_hash = DynamoType(start[table.hash_key_attr])
            start_range = DynamoType(start[table.range_key_attr]) if has_range else None
        except (KeyError, TypeError, AttributeError):
            return None
        if start_hash.type != table.hash_key_type or (has_range and start_range.type != table.range_key_type):
            return None
        # moto skips every item up to and including the start key, comparing the partition key, then the
        # sort key (Table._item_comes_before_dct)
        first = bisect.bisect_left(hash_casts, start_hash.cast_value)
        if first < len(hash_keys) and hash_casts[first] == start_hash.cast_value:
            if has_range:
                after = start_range.cast_value
            else:
                first += 1

    def walk():
        for i in range(first, len(hash_keys)):
            partition = dict.get(partitions, hash_keys[i])
            if not has_range:
                yield partition
                continue
            if type(partition) is not Partition:
                raise _NotIndexed
            keys, casts = partition.sorted_keys()
            lo = bisect.bisect_right(casts, after) if (i == first and after is not None) else 0
            for j in range(lo, len(keys)):
                yield dict.__getitem__(partition, keys[j])

    return walk()


class _NotIndexed(Exception):
    """A partition that is not a Partition (put there by code other than moto's): moto's own path."""


def _scan_window_loop(table, a: dict, candidates, size_limit: int):
    """moto's Scan loop (table.py, ``Table.scan``: SEGMENT/SKIP/LIMIT/FILTER), over the window only: the
    items moto would skip as before the start key are not visited, and the walk ends where moto's does."""
    limit, start, segments, filters = a["limit"], a["exclusive_start_key"], a["segments"], a["filters"]
    hash_attrs, range_attrs = [table.hash_key_attr], [table.range_key_attr]
    results: list = []
    result_size = scanned_count = 0
    last_evaluated_key = None
    processing_previous_page = start is not None
    try:
        for item in candidates:
            if not item.is_within_segment(segments):
                continue
            if processing_previous_page:
                if table._item_comes_before_dct(item, start, hash_attrs, range_attrs, True):
                    continue
                processing_previous_page = False
            reached_length_limit = len(results) == limit
            reached_size_limit = (result_size + item.size()) > size_limit
            if reached_length_limit or reached_size_limit:
                last_evaluated_key = table._get_last_evaluated_key(results[-1], None)
                break
            passes_all_conditions = True
            for attribute_name in filters:
                attribute = item.attrs.get(attribute_name)
                (comparison_operator, comparison_objs) = filters[attribute_name]
                if attribute:
                    if not attribute.compare(comparison_operator, comparison_objs):
                        passes_all_conditions = False
                        break
                elif comparison_operator == "NULL":
                    continue
                else:
                    passes_all_conditions = False
                    break
            if passes_all_conditions:
                results.append(copy.deepcopy(item))
                result_size += item.size()
            scanned_count += 1
    except _NotIndexed:
        return _ORIGINALS["table_scan"](table, **{k: v for k, v in a.items() if k != "self"})
    if a["filter_expression"] is not None:
        results = [item for item in results if a["filter_expression"].expr(item)]
    if a["projection_expression"]:
        results = [r.project(a["projection_expression"]) for r in results]
    return results, scanned_count, last_evaluated_key


# --- Step Functions: executions by name and by ARN ------------------------------------------------------
class Executions(list):
    """A state machine's executions, in the order they started (moto's list), with the first execution of
    each name and of each ARN indexed. Appends keep the index; any other change rebuilds it on next use."""

    def __init__(self, *args):
        super().__init__(*args)
        self._by_name: dict | None = None
        self._by_arn: dict | None = None
        self._index()

    def _index(self) -> tuple[dict, dict]:
        if self._by_name is None:
            self._by_name, self._by_arn = {}, {}
            for execution in self:
                self._by_name.setdefault(execution.name, execution)
                self._by_arn.setdefault(execution.execution_arn, execution)
        return self._by_name, self._by_arn

    def named(self, name: str):
        return self._index()[0].get(name)

    def with_arn(self, arn: str):
        return self._index()[1].get(arn)

    def append(self, execution) -> None:
        super().append(execution)
        if self._by_name is not None:
            self._by_name.setdefault(execution.name, execution)
            self._by_arn.setdefault(execution.execution_arn, execution)

    extend = _forgetting(list, "extend", "_by_name", "_by_arn")
    insert = _forgetting(list, "insert", "_by_name", "_by_arn")
    remove = _forgetting(list, "remove", "_by_name", "_by_arn")
    pop = _forgetting(list, "pop", "_by_name", "_by_arn")
    clear = _forgetting(list, "clear", "_by_name", "_by_arn")
    sort = _forgetting(list, "sort", "_by_name", "_by_arn")
    reverse = _forgetting(list, "reverse", "_by_name", "_by_arn")
    __setitem__ = _forgetting(list, "__setitem__", "_by_name", "_by_arn")
    __delitem__ = _forgetting(list, "__delitem__", "_by_name", "_by_arn")
    __iadd__ = _forgetting(list, "__iadd__", "_by_name", "_by_arn")
    __imul__ = _forgetting(list, "__imul__", "_by_name", "_by_arn")

    def __deepcopy__(self, memo):
        return Executions(copy.deepcopy(list(self), memo))

    def __reduce__(self):
        return (Executions, (list(self),))


def _patch_execution_index() -> None:
    from moto.stepfunctions import models
    from moto.stepfunctions.exceptions import ExecutionAlreadyExists, ExecutionDoesNotExist

    machine = models.StateMachine
    backend = models.StepFunctionBackend
    original_init = _ORIGINALS.setdefault("machine_init", machine.__init__)
    original_idempotency = _ORIGINALS.setdefault("idempotency", machine._handle_name_input_idempotency)
    original_describe = _ORIGINALS.setdefault("describe_execution", backend.describe_execution)

    def __init__(self, *args, **kwargs):
        original_init(self, *args, **kwargs)
        self.executions = Executions(self.executions)

    def _handle_name_input_idempotency(self, name, execution_input):
        if not isinstance(self.executions, Executions):
            return original_idempotency(self, name, execution_input)
        execution = self.executions.named(name)  # moto: the first execution of this name in the list
        if execution is None:
            return None
        if execution_input == execution.execution_input and execution.status == "RUNNING":
            return execution
        raise ExecutionAlreadyExists("Execution Already Exists: '" + execution.execution_arn + "'")

    def describe_execution(self, execution_arn):
        self._validate_execution_arn(execution_arn)
        state_machine = self._get_state_machine_for_execution(execution_arn)
        if not isinstance(state_machine.executions, Executions):
            return original_describe(self, execution_arn)
        execution = state_machine.executions.with_arn(execution_arn)
        if not execution:
            raise ExecutionDoesNotExist("Execution Does Not Exist: '" + execution_arn + "'")
        return execution

    machine.__init__ = __init__
    machine._handle_name_input_idempotency = _handle_name_input_idempotency
    backend.describe_execution = describe_execution


# --- Step Functions: a closed execution keeps its history, compressed, and nothing else -----------------
class ClosedHistory:
    """What a closed execution's interpreter environment is still asked for: its history events (the list
    GetExecutionHistory returns), kept pickled and compressed; its final program state; its callback and
    map-run pools (SendTaskFailure and DescribeMapRun walk every execution's); and StopExecution, which
    does nothing to a closed program (``Environment.set_stop`` only stops a running one)."""

    def __init__(self, env: Any):
        events = env.event_manager.get_event_history()
        self._blob = zlib.compress(pickle.dumps(events, protocol=pickle.HIGHEST_PROTOCOL), 1)
        self._program_state = env.program_state()
        self.callback_pool_manager = env.callback_pool_manager
        self.map_run_record_pool_manager = env.map_run_record_pool_manager
        self.event_manager = self

    def get_event_history(self) -> list:
        return pickle.loads(zlib.decompress(self._blob))  # noqa: S301 - our own bytes, made just above

    def program_state(self) -> Any:
        return self._program_state

    def set_stop(self, *args: Any, **kwargs: Any) -> None:
        """The program has ended: nothing to stop."""


class PackedLogEvents:
    """A closed execution's log stream events (moto's ``LogStream.events``, a list of ``LogEvent``), kept
    pickled and compressed: the execution's ARN and the state names repeat in every record, so 22 records
    of ~730 bytes each (16 KB of text, ~21 KB as objects) pack into ~2 KB. Reading unpacks them (equal
    objects each time); ``+=`` (a later PutLogEvents into the stream: all that moto's logs backend does to
    the list besides reading it) gives back a plain list, unpacked."""

    __slots__ = ("_blob", "_count")

    def __init__(self, events: list):
        self._blob = zlib.compress(pickle.dumps(events, protocol=pickle.HIGHEST_PROTOCOL), 1)
        self._count = len(events)

    def _events(self) -> list:
        return pickle.loads(zlib.decompress(self._blob))  # noqa: S301 - our own bytes, made just above

    def __iter__(self):
        return iter(self._events())

    def __len__(self) -> int:
        return self._count

    def __bool__(self) -> bool:
        return self._count > 0

    def __getitem__(self, index):
        return self._events()[index]

    def __add__(self, other: list) -> list:
        return self._events() + list(other)

    __iadd__ = __add__

    def __eq__(self, other) -> bool:
        return list(self) == list(other)

    __hash__ = None


def _pack_execution_log(execution) -> None:
    """Pack the closed execution's own log stream (one stream per execution: moto_patches names it after
    the execution), once the execution has written its last record."""
    session = getattr(execution, "_cloud_watch_logging_session", None)
    if session is None:
        return
    from moto.logs.models import logs_backends

    config = session.configuration
    try:
        logs = logs_backends[config.log_account_id][config.log_region]
    except (AttributeError, KeyError):
        return
    group = logs.groups.get(config.log_group_name)
    stream = group.streams.get(config.log_stream_name) if group is not None else None
    if stream is not None and type(stream.events) is list and stream.events:
        stream.events = PackedLogEvents(stream.events)


def _share_snapshot(execution, snapshots: dict) -> None:
    """moto gives each execution its own deep copy of the state machine (a snapshot of the definition and
    settings it started with). Closed executions whose snapshots are equal share one: what
    DescribeExecution reads from it (definition, name, ARN, revision, logging) is unchanged."""
    snapshot = getattr(execution, "state_machine", None)
    if snapshot is None:
        return
    key = getattr(execution, "state_machine_arn", None)
    fields = {k: v for k, v in vars(snapshot).items() if k not in ("executions", "backend")}
    kept = snapshots.get(key)
    if kept is not None and type(kept[0]) is type(snapshot) and kept[1] == fields:
        execution.state_machine = kept[0]
    else:
        snapshots[key] = (snapshot, fields)


def _patch_compact_closed_executions() -> None:
    from moto.stepfunctions.parser.backend import execution as execution_module

    from moto.stepfunctions.parser import utils

    communication = execution_module.BaseExecutionWorkerCommunication
    original = _ORIGINALS.setdefault("terminated_perf", communication.terminated)
    threads = utils.TMP_THREADS  # every interpreter thread moto ever started, never emptied
    snapshots: dict = {}  # state machine ARN -> (the snapshot closed executions share, its fields)

    def terminated(self):
        try:
            original(self)
        finally:
            execution = self.execution
            worker = execution.exec_worker
            env = getattr(worker, "env", None)
            if env is not None and not isinstance(env, ClosedHistory):
                worker.env = ClosedHistory(env)
            # what the worker needed to start the program (the evaluation details, ~1 KB) and the logging
            # session (which only a running program writes through) are not read once it has ended
            with _LOCK:
                _pack_execution_log(execution)
                for holder in (worker, execution):
                    for name in ("_evaluation_details", "_cloud_watch_logging_session"):
                        if getattr(holder, name, None) is not None:
                            setattr(holder, name, None)
                _share_snapshot(execution, snapshots)
                # keep the threads still running: O(threads alive), not O(threads ever started)
                threads[:] = [t for t in threads if t.is_alive()]

    communication.terminated = terminated


# --- moto's model registry: live objects only --------------------------------------------------------------
class LiveInstances:
    """A model class's ``instances_tracked``: what moto's list held (every object of the class made since
    the last reset, in order), as weak references, so an object the backends no longer hold is freed.
    Dead references are dropped whenever the list has doubled since the last sweep (amortised O(1))."""

    __slots__ = ("_refs", "_swept")

    def __init__(self, objects=()):
        self._refs: list = []
        self._swept = 0
        for obj in objects:
            self.append(obj)

    def append(self, obj) -> None:
        try:
            self._refs.append(weakref.ref(obj))
        except TypeError:  # not weakly referenceable (a class with __slots__): kept as moto keeps it
            self._refs.append(lambda obj=obj: obj)
        if len(self._refs) > 2 * self._swept + 64:
            self._refs = [r for r in self._refs if r() is not None]
            self._swept = len(self._refs)

    def __iter__(self):
        return (obj for obj in (r() for r in list(self._refs)) if obj is not None)

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def __bool__(self) -> bool:
        return any(True for _ in self)

    def __getitem__(self, index):
        return list(self)[index]

    def remove(self, obj) -> None:
        for i, r in enumerate(self._refs):
            if r() is obj:
                del self._refs[i]
                return
        raise ValueError("not tracked")

    def clear(self) -> None:
        self._refs.clear()
        self._swept = 0


def _patch_model_registry() -> None:
    from moto.core.common_models import BaseModel

    _ORIGINALS.setdefault("model_new", BaseModel.__dict__["__new__"])

    def __new__(cls, *args, **kwargs):
        instance = super(BaseModel, cls).__new__(cls)
        tracked = cls.__dict__.get("instances_tracked")
        if type(tracked) is not LiveInstances:  # made by moto's metaclass, or reset to [] since
            tracked = LiveInstances(tracked or ())
            cls.instances_tracked = tracked
        tracked.append(instance)
        return instance

    BaseModel.__new__ = staticmethod(__new__)
