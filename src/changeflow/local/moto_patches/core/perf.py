"""moto's model registry, live objects only; the action a request names, found without listing its class;
and the helper the perf patches' indexes share.

``BaseModel.__new__`` appends every model object moto ever makes to its class's ``instances_tracked``
list, which only moto's dashboard (``/moto-api/data.json``) reads and nothing empties while a mock runs:
every DynamoDB ``Item`` (each version written, each overwritten ``v0``, and the copy of every item each
GetItem, Query and Scan returns), every CloudWatch Logs event, every state machine snapshot. A long
``serve`` kept them all, so memory grew with every read as well as every write. The patch keeps the
registry's entries as weak references: the dashboard lists the objects still alive (everything the
backends hold), in the order they were made; an object nothing else holds is freed. Not an AWS
behaviour: what moto answers is unchanged (tests/test_moto_perf.py).

Every request moto answers (``BaseResponse.call_action``) listed its response class's functions
(``method_names_from_class``: ``inspect.getmembers`` over some 200 names) to ask whether the action's name is
one of them: about 6% of a request's CPU. The patch answers the same question about that one name.

Every member of every structure of a response (each of the ten members of each DynamoDB ``AttributeValue``
of every item a read returns) asked the serializer's attribute picker which keys it may be found under: six
alias providers made and asked, and a context with the path joined, for a list that depends only on the
member, its shape and the structure that holds it, and the object's class. For a plain ``dict`` (no class
``Meta``, no aliases of its own) with a picker that transforms nothing, the patch works that list out once and
reads the dict as the picker would: a third of a DynamoDB read's CPU in moto, the same answer.
"""

from __future__ import annotations

import weakref

from ..originals import ORIGINALS


def forgetting(base: type, name: str, *derived: str):
    """``base.name`` for a subclass that keeps derived indexes: the call first forgets them (sets each
    attribute in ``derived`` to None), to be rebuilt on their next use."""
    def method(self, *args, **kwargs):
        for attribute in derived:
            setattr(self, attribute, None)
        return getattr(base, name)(self, *args, **kwargs)
    method.__name__ = name
    return method


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


def patch_model_registry() -> None:
    from moto.core.common_models import BaseModel

    ORIGINALS.setdefault("model_new", BaseModel.__dict__["__new__"])

    def __new__(cls, *args, **kwargs):
        instance = super(BaseModel, cls).__new__(cls)
        tracked = cls.__dict__.get("instances_tracked")
        if type(tracked) is not LiveInstances:  # made by moto's metaclass, or reset to [] since
            tracked = LiveInstances(tracked or ())
            cls.instances_tracked = tracked
        tracked.append(instance)
        return instance

    BaseModel.__new__ = staticmethod(__new__)


class _Functions:
    """What ``method_names_from_class(cls)`` lists, asked by name: ``name in`` it is whether ``cls`` has a
    function of that name (what ``inspect.getmembers(cls, inspect.isfunction)`` would find), at the time of
    asking (a patch may add one later)."""

    __slots__ = ("cls",)

    def __init__(self, cls: type):
        self.cls = cls

    def __contains__(self, name: object) -> bool:
        import inspect

        return isinstance(name, str) and inspect.isfunction(getattr(self.cls, name, None))

    def __iter__(self):
        return iter(ORIGINALS["method_names_from_class"](self.cls))


def patch_action_lookup() -> None:
    from moto.core import responses

    ORIGINALS.setdefault("method_names_from_class", responses.method_names_from_class)
    responses.method_names_from_class = _Functions


def patch_response_member_keys() -> None:
    from moto.core import serialize
    from moto.core.utils import MISSING, get_value

    original = ORIGINALS.setdefault("serializer_get_value", serialize.ResponseSerializer.get_value)
    pickers = (serialize.AttributePicker, serialize.XFormedAttributePicker)  # what they pick: their providers'
    known: dict[tuple, tuple[str, ...]] = {}

    def get_value_of_member(self, value, key, shape):
        picker = self._value_picker
        if type(value) is not dict or type(picker) not in pickers or picker.response_transformers:
            return original(self, value, key, shape)
        parent = getattr(shape, "parent", None)
        which = (type(picker), tuple(picker.alias_providers), key, shape, parent)
        keys = known.get(which)
        if keys is None:
            context = serialize.AttributePickerContext(obj=value, key=key, shape=shape)
            keys = known.setdefault(which, tuple(picker.get_possible_keys(context)))
        for possible in keys:
            found = get_value(value, possible, MISSING)
            if found is not MISSING:
                return found
        return None

    serialize.ResponseSerializer.get_value = get_value_of_member
