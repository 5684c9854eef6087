"""DynamoDB Query and Scan in moto 5.2.5 at a cost that grows with what they return, not with the table.
Each patch changes how fast moto answers, never what it answers (tests/test_moto_perf.py compares every
patched answer with moto's own, on random tables).

- Query (``patch_query_by_partition``): stock ``Table.query`` calls ``Table.all_items()``, which sorts
  every item of the table, then keeps the queried partition, then walks it from its first item to the
  ``ExclusiveStartKey``: each Query costs O(table log table + partition), so paging through one entity's N
  versions costs O(N^2) and every change gets slower as the table fills. DynamoDB reads one partition in
  sort-key order ("Query ... returns all items with that partition key value", in sort key order:
  https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/Query.html). The patch keeps each
  partition's sort keys in a sorted list, updated on each write (O(log n) to find the place), and starts
  the page by bisection: a Query costs O(log partition + page).
- Scan (``patch_scan_by_key_order``): stock ``Table.scan`` also calls ``Table.all_items()`` and then walks
  the sorted table from its first item to the ``ExclusiveStartKey``: each page of a Scan costs
  O(table log table), so scanning a table of n items a page at a time costs O(n^2 log n / page) and
  ``verify --all`` grows faster than the table. A Scan reads the table from where the last page ended
  ("ExclusiveStartKey: the primary key of the first item that this operation will evaluate":
  https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_Scan.html). The patch keeps the
  table's partition keys in a sorted list (made on the first Scan, then updated on each new or removed
  partition) and starts the page by bisection in it and in the partition's sorted keys (the Query
  patch's): a page costs O(log table + page), in moto's order.
"""

from __future__ import annotations

import bisect
import copy
import inspect
from collections import defaultdict
from typing import Any

from ..core.perf import forgetting
from ..originals import ORIGINALS


_MAX_ITEM_SIZE = 410_000


_CONTIGUOUS = {"EQ", "=", "LE", "<=", "LT", "<", "GE", ">=", "GT", ">", "BETWEEN", "BEGINS_WITH"}


# --- Query: one partition, in sort-key order ---------------------------------------------------------


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

    update = forgetting(dict, "update", "_keys", "_casts")
    setdefault = forgetting(dict, "setdefault", "_keys", "_casts")
    popitem = forgetting(dict, "popitem", "_keys", "_casts")
    clear = forgetting(dict, "clear", "_keys", "_casts")
    __ior__ = forgetting(dict, "__ior__", "_keys", "_casts")

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


def patch_query_by_partition() -> None:
    from moto.dynamodb.models import table as table_module
    from moto.dynamodb.models.dynamo_type import DynamoType, Item

    Table = table_module.Table
    original_init = ORIGINALS.setdefault("table_init", Table.__init__)
    original_query = ORIGINALS.setdefault("table_query", Table.query)
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


# --- Scan: a page starts where the last one ended, in moto's order ----------------------------------


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


def patch_scan_by_key_order() -> None:
    from moto.dynamodb.models import table as table_module
    from moto.dynamodb.models.dynamo_type import DynamoType

    Table = table_module.Table
    original_scan = ORIGINALS.setdefault("table_scan", Table.scan)
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
        return ORIGINALS["table_scan"](table, **{k: v for k, v in a.items() if k != "self"})
    if a["filter_expression"] is not None:
        results = [item for item in results if a["filter_expression"].expr(item)]
    if a["projection_expression"]:
        results = [r.project(a["projection_expression"]) for r in results]
    return results, scanned_count, last_evaluated_key
