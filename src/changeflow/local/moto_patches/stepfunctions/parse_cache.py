"""Parse caches: a definition is parsed once, not once per execution (with every component's lazily made
heap key made up front, so concurrent executions sharing the tree cannot race on it); a definition that
CreateStateMachine has found valid once is not parsed again to validate it (each embedded stack creates
the same state machine), and its parse is the one executions run (``parsed``: one parse per text, where
validating it and running it were two); and each JSONPath expression is parsed once, not once per evaluation
(one of plain field names, every path of changeflow's ASL, is walked without jsonpath_ng). Speed only:
no AWS behaviour changes (``caches=False`` leaves them out, to measure what they save)."""

from __future__ import annotations

import threading
from typing import Any

from ..originals import ORIGINALS, rebind

_PROGRAMS: dict[str, Any] = {}  # a definition's text -> the program moto's parser makes of it
_LOCK = threading.Lock()


def parsed(definition: str) -> Any:
    """The program of ``definition`` (``AmazonStateLanguageParser.parse``), parsed once for the process: it
    depends on the text alone. Raises what the parser raises for a text it refuses (nothing is kept)."""
    from moto.stepfunctions.parser.asl.parse.asl_parser import AmazonStateLanguageParser

    with _LOCK:
        program = _PROGRAMS.get(definition)
        if program is None:
            program = AmazonStateLanguageParser.parse(definition)[0]
            _make_heap_keys(program, set())
            _PROGRAMS[definition] = program
    return program


def _make_heap_keys(node: Any, seen: set) -> None:
    """Retry counters and the like live in env.heap under each component's heap_key, made on first use."""
    from moto.stepfunctions.parser.asl.component.eval_component import EvalComponent

    if id(node) in seen:
        return
    seen.add(id(node))
    if isinstance(node, EvalComponent):
        node.heap_key  # noqa: B018 - the property makes the key
    if isinstance(node, (list, tuple, set)):
        children = node
    elif isinstance(node, dict):
        children = node.values()
    elif hasattr(node, "__dict__") and type(node).__module__.startswith("moto.stepfunctions"):
        children = vars(node).values()
    else:
        return
    for child in list(children):
        _make_heap_keys(child, seen)


def patch_parse_cache() -> None:
    from moto.stepfunctions.parser.backend import execution_worker

    def _get_evaluation_entrypoint(self):
        return parsed(self._evaluation_details.state_machine_details.definition)

    execution_worker.ExecutionWorker._get_evaluation_entrypoint = _get_evaluation_entrypoint


def patch_validation_cache() -> None:
    """CreateStateMachine (and UpdateStateMachine) parse the definition to validate it: ~0.2 s of ANTLR for
    changeflow's, once per embedded stack. The parse depends on the text alone, so a text that parsed once
    passes (``parsed`` keeps it, for executions too); one that fails is refused as moto refuses it, every time."""
    from moto.stepfunctions.parser import models

    backend = models.StepFunctionsParserBackend
    original = ORIGINALS.setdefault("validate_definition", backend._validate_definition)

    def _validate_definition(definition: str):
        try:
            parsed(definition)
        except Exception:  # noqa: BLE001 - moto's own check words the refusal (InvalidDefinition)
            original(definition=definition)
            raise

    backend._validate_definition = staticmethod(_validate_definition)


def patch_jsonpath_cache() -> None:
    import functools
    import re

    from moto.stepfunctions.parser.asl.component.common.path import result_path
    from moto.stepfunctions.parser.asl.utils import json_path

    for module in (result_path, json_path):
        if not hasattr(module.parse, "cache_info"):
            module.parse = functools.lru_cache(maxsize=4096)(module.parse)

    # A path of plain field names (``$``, ``$.Payload.version``: every path of changeflow's ASL) selects one
    # value by walking dicts: answered without jsonpath_ng where every name is there; anything else (a name
    # missing, a list on the way, brackets, wildcards, filters) takes moto's own extract_json, errors included.
    original = ORIGINALS.setdefault("extract_json", json_path.extract_json)
    plain = re.compile(r"\$(?:\.[A-Za-z_][A-Za-z0-9_]*)*")

    @functools.lru_cache(maxsize=4096)
    def names(path: str) -> tuple[str, ...] | None:
        return tuple(path.split(".")[1:]) if plain.fullmatch(path) else None

    def extract_json(path: str, data: Any) -> Any:
        fields = names(path)
        if fields is None:
            return original(path, data)
        value = data
        for name in fields:
            if type(value) is not dict or name not in value:
                return original(path, data)
            value = value[name]
        return value

    rebind("extract_json", original, extract_json)
