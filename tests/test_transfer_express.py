"""Import on an Express stack (issue 24). Its own file: tests/test_transfer.py shares one Standard stack across
its tests, and moto keeps one backend per account and Region, so a second stack cannot run beside it."""

from __future__ import annotations

from changeflow.client import Changeflow
from changeflow.transfer import sources
from changeflow.transfer.importer import Checkpoint, Importer, Plan, Rejects, entry_point

T0 = 1_700_000_000_000


def versions_of(client: Changeflow, entity_id: str) -> list[int]:
    return [v["version"] for v in client.entity(entity_id)["versions"]]


def test_an_express_stack_imports_once_without_describing_executions(make_stack, monkeypatch):
    # Express has no DescribeExecution and does not dedupe names: the data answers, and v0's ids keep it once
    client = Changeflow.for_embedded(make_stack(WorkflowType="EXPRESS"))
    described = []
    monkeypatch.setattr(client, "describe", lambda arn: described.append(arn))
    start, wait = entry_point(client, "stepfunctions", 60)
    records = [sources.Record(str(i), {"id": f"xp#{i}", "x": i}) for i in range(4)]
    for run in range(2):
        summary = Importer(start, wait, Plan("id", effective_at=T0), Checkpoint(None, {}), Rejects(None),
                           concurrency=4).run(iter(records))
        assert summary.counts["applied" if run == 0 else "duplicate"] == 4, summary.to_json()
    assert all(versions_of(client, f"xp#{i}") == [1] for i in range(4)) and described == []
