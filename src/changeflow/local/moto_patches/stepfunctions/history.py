"""GetExecutionHistory pages as AWS pages it: ``maxResults`` (default 100), ``nextToken`` and
``reverseOrder``; stock moto returns every event at once.
https://docs.aws.amazon.com/step-functions/latest/apireference/API_GetExecutionHistory.html"""

from __future__ import annotations


def patch_history_paging() -> None:
    from moto.core.responses import ActionResult
    from moto.stepfunctions import responses

    def get_execution_history(self):
        history = self.stepfunction_backend.get_execution_history(self._get_param("executionArn"))
        events = list(history["events"])
        if self._get_param("reverseOrder"):
            events.reverse()
        start = int(self._get_param("nextToken") or 0)
        size = int(self._get_param("maxResults") or 0) or 100
        page = {"events": events[start:start + size]}
        if start + size < len(events):
            page["nextToken"] = str(start + size)
        return ActionResult(page)

    responses.StepFunctionResponse.get_execution_history = get_execution_history
