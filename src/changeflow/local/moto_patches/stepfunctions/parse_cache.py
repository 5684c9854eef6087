"""Parse caches: a definition is parsed once, not once per execution (with every component's lazily made
heap key made up front, so concurrent executions sharing the tree cannot race on it), and each JSONPath
expression once, not once per evaluation. Speed only: no AWS behaviour changes (``caches=False`` leaves
them out, to measure what they save)."""

from __future__ import annotations

import threading
from typing import Any


def patch_parse_cache() -> None:
    from moto.stepfunctions.parser.asl.component.eval_component import EvalComponent
    from moto.stepfunctions.parser.asl.parse.asl_parser import AmazonStateLanguageParser
    from moto.stepfunctions.parser.backend import execution_worker

    programs: dict[str, Any] = {}
    lock = threading.Lock()

    def make_heap_keys(node: Any, seen: set) -> None:
        # retry counters and the like live in env.heap under each component's heap_key, made on first use
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
            make_heap_keys(child, seen)

    def _get_evaluation_entrypoint(self):
        definition = self._evaluation_details.state_machine_details.definition
        with lock:
            program = programs.get(definition)
            if program is None:
                program = AmazonStateLanguageParser.parse(definition)[0]
                make_heap_keys(program, set())
                programs[definition] = program
        return program

    execution_worker.ExecutionWorker._get_evaluation_entrypoint = _get_evaluation_entrypoint


def patch_jsonpath_cache() -> None:
    import functools

    from moto.stepfunctions.parser.asl.component.common.path import result_path
    from moto.stepfunctions.parser.asl.utils import json_path

    for module in (result_path, json_path):
        if not hasattr(module.parse, "cache_info"):
            module.parse = functools.lru_cache(maxsize=4096)(module.parse)
