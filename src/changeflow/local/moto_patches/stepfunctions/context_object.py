"""The context object's ``$$.Execution.StartTime`` is the ISO-8601 string AWS gives (stock moto passes a
Python datetime). https://docs.aws.amazon.com/step-functions/latest/dg/input-output-contextobject.html"""

from __future__ import annotations

import datetime

from ..originals import ORIGINALS


def patch_start_time() -> None:
    from moto.stepfunctions.parser.backend import execution_worker

    worker = execution_worker.ExecutionWorker
    original = ORIGINALS.setdefault("evaluation_environment", worker._get_evaluation_environment)

    def _get_evaluation_environment(self):
        env = original(self)
        execution = env.states.context_object.context_object_data["Execution"]
        start = execution.get("StartTime")
        if isinstance(start, datetime.datetime):
            execution["StartTime"] = (
                start.astimezone(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
            )
        return env

    worker._get_evaluation_environment = _get_evaluation_environment
