"""The audit console of an Express stack: ListExecutions refuses Express, so the executions page (where
``/console`` leads) lists the executions from the execution log, or says what to deploy when the log is not
kept whole (docs/operations.md, docs/console.md).

A file of its own: an embedded stack started and stopped beside test_console's module-wide served stack
resets, at its stop, what every stack of the process shares (``EmbeddedStack.stop``: the schedules' runs,
every pipe, the termination events, the clock's scale), and the feed page's test, run after that, waited its
120 s in vain (served stack, then an Express stack's test, then the feed's: reproduced, 3 of 3 tests run)."""

from __future__ import annotations

import re


def test_an_express_stacks_executions_page_lists_them_from_the_execution_log(make_stack):
    from werkzeug.test import Client

    from changeflow.client import Changeflow
    from changeflow.console import for_embedded

    # GIVEN an Express stack that keeps its execution log whole (docs/operations.md), and a change applied
    stack = make_stack(WorkflowType="EXPRESS", StateMachineLogLevel="ALL", StateMachineIncludeExecutionData="true")
    Changeflow.for_embedded(stack).submit({"entityId": "express#1", "operation": "put", "attributes": {"n": 1},
                                           "changeId": "express-1"})
    console = Client(for_embedded(stack))
    # WHEN an auditor opens the console's executions page (where /console leads)
    page = console.get("/console/executions")
    # THEN it lists the execution with its entity and outcome, read from the execution log, and its link opens
    # the execution's page
    assert page.status_code == 200, page.get_data(as_text=True)[-2000:]
    html = page.get_data(as_text=True)
    assert "express#1" in html and "applied" in html
    link = re.search(r'href="(/console/execution\?[^"]+)"', html).group(1).replace("&amp;", "&")
    assert console.get(link).status_code == 200


def test_an_express_stack_without_its_whole_log_says_why_its_executions_cannot_be_listed(make_stack):
    from werkzeug.test import Client

    from changeflow.console import for_embedded

    # GIVEN an Express stack at the default log level (failures only): nothing lists its executions
    console = Client(for_embedded(make_stack(WorkflowType="EXPRESS")))
    # WHEN the executions page is opened, THEN it says what to deploy, instead of an internal server error
    page = console.get("/console/executions")
    assert page.status_code == 501 and "StateMachineLogLevel=ALL" in page.get_data(as_text=True)
