"""The audit console in a real browser: Debian's chromium driven by Playwright, clicking through what an
auditor would, against ``changeflow serve`` (the demo's story, a retried step, hostile ids and values, an
entity with thousands of versions, a damaged entity that ``repair`` can fix) and against
``changeflow console --endpoint-url`` (a separate reader that must change nothing).

Screenshots of the main pages go to build/console/ (docs/ keeps copies for docs/console.md)."""

from __future__ import annotations

import io
import json
import os
import re
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from conftest import ROOT

pytestmark = pytest.mark.enable_socket

CHROMIUM = "/usr/bin/chromium"
SHOTS = ROOT / "build" / "console"
NAVIGATION_MS = 120_000  # Playwright's bound on a navigation or an action (Watched): see there
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]
HOSTILE_ID = "<script>alert(\"id\")</script>'\"&amp; é中🙂 <img src=x onerror=alert(1)>"
FEED_ID = "<b onmouseover=alert(2)>feed</b> &amp; 🙂"
HOSTILE_VALUE = "</pre><script>alert('value')</script><b onmouseover=alert(2)>\"'é🙂"
RETRIED = "retried#1"
DAMAGED = "damaged#1"
MANY = "many#1"
MANY_VERSIONS = 2500



# --- the stack the console shows --------------------------------------------------------------------
def write_versions(cf, entity_id: str, count: int) -> None:
    """``count`` versions written straight into the tables (what thousands of executions would leave)."""
    from changeflow_core import codec, items
    from changeflow_core.validation import Change

    latest = None
    batch = []
    for version in range(1, count + 1):
        change = Change(entityId=entity_id, operation="put", effectiveAt=1767225600000 + version,
                        changeId=f"bulk-{version}", actor="loader", reason=f"bulk load {version}")
        item = items.build_latest(change, {"n": version, "even": version % 2 == 0}, latest, version,
                                  1767225600000 + version, "arn:aws:states:us-east-1:123456789012:execution:"
                                  "changeflow-ChangeStateMachine:bulk")
        latest = items.latest_state(item)
        batch.append({"PutRequest": {"Item": codec.serialize_item(items.history_of(item))}})
        if len(batch) == 25:
            cf.dynamodb.batch_write_item(RequestItems={cf.history_table: batch})
            batch = []
    if batch:
        cf.dynamodb.batch_write_item(RequestItems={cf.history_table: batch})
    cf.dynamodb.put_item(TableName=cf.table, Item=codec.serialize_item(item))


@pytest.fixture(scope="module")
def served():
    """``changeflow serve`` (port 0) holding the demo's story and the cases the tests click through."""
    from changeflow import demo
    from changeflow.client import Changeflow
    from changeflow.checks.faults import Injector
    from changeflow.local.server import EmbeddedServer
    from changeflow_core import model

    saved = {k: os.environ.get(k) for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION",
                                            "CHANGEFLOW_ROOT", "AWS_CONFIG_FILE", "AWS_SHARED_CREDENTIALS_FILE")}
    os.environ.update({"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                       "AWS_DEFAULT_REGION": "us-east-1", "CHANGEFLOW_ROOT": str(ROOT),
                       "AWS_CONFIG_FILE": os.devnull, "AWS_SHARED_CREDENTIALS_FILE": os.devnull})
    with EmbeddedServer(port=0, time_scale=0.001) as server:
        cf = Changeflow.for_embedded(server.stack)
        entity, _ = demo.play(cf, server.stack.root, io.StringIO())
        # a history put that fails twice before it succeeds: its Retry policy at work
        with Injector().around(server.stack.lambdas, [("PutHistoryFunction", "before", 2)]):
            retried = cf.submit({"entityId": RETRIED, "operation": "put", "attributes": {"a": 1},
                                 "changeId": "retry-me", "actor": "bob", "reason": "flaky history table"})
        hostile = [cf.submit({"entityId": HOSTILE_ID, "operation": "put", "changeId": f"hostile-{i}",
                              "actor": HOSTILE_VALUE, "reason": HOSTILE_VALUE,
                              "attributes": {HOSTILE_VALUE: HOSTILE_VALUE, "n": i}}) for i in (1, 2)]
        # an entity whose v0 lost its history item (what a history outage leaves): repair can act
        cf.submit({"entityId": DAMAGED, "operation": "put", "attributes": {"a": 1}, "changeId": "d1"})
        cf.submit({"entityId": DAMAGED, "operation": "put", "attributes": {"a": 2}, "changeId": "d2"})
        cf.dynamodb.delete_item(TableName=cf.history_table,
                                Key={model.PK: {"S": DAMAGED}, model.SK: {"S": model.history_sk(2)}})
        write_versions(cf, MANY, MANY_VERSIONS)
        yield {"server": server, "cf": cf, "entity": entity, "retried": retried, "hostile": hostile}
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


@pytest.fixture(scope="module")
def browser():
    if not Path(CHROMIUM).exists():
        if os.environ.get("CI") == "true":
            pytest.fail(f"{CHROMIUM} is missing: make test's set-up installs Debian's chromium")
        pytest.skip(f"{CHROMIUM} is not installed (make setup installs it)")
    playwright_api = pytest.importorskip("playwright.sync_api")
    # Playwright gives the browser a fresh profile directory of its own (and removes it afterwards).
    with playwright_api.sync_playwright() as p:
        launched = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        try:
            yield launched
        finally:
            launched.close()


class Watched:
    """A page whose dialogs (alert: a script ran) and requests (anything not from the console) are recorded."""

    def __init__(self, page, origin: str):
        self.page, self.origin = page, origin
        self.dialogs: list[str] = []
        self.requests: list[str] = []
        self.console_errors: list[str] = []
        page.on("dialog", lambda d: (self.dialogs.append(d.message), d.dismiss()))
        page.on("request", lambda r: self.requests.append(r.url))
        # bounds, not expectations: a page loads in a second or two alone, but `make test` beside another run
        # (six jobs on two cores) saw the feed page pass Playwright's default 30 s (2026-11-26)
        page.set_default_navigation_timeout(NAVIGATION_MS)
        page.set_default_timeout(NAVIGATION_MS)

    def open(self, path: str):
        response = self.page.goto(self.origin + path)
        assert response is not None and response.status == 200, (path, response and response.status)
        return response

    def shot(self, name: str, full_page: bool = True) -> None:
        SHOTS.mkdir(parents=True, exist_ok=True)
        self.page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=full_page)

    def shot_of(self, selector: str, name: str) -> None:
        SHOTS.mkdir(parents=True, exist_ok=True)
        self.page.locator(selector).screenshot(path=str(SHOTS / f"{name}.png"))

    def foreign(self) -> list[str]:
        return [u for u in self.requests if not u.startswith(self.origin + "/console")]


@pytest.fixture
def page(browser, served):
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    watched = Watched(context.new_page(), served["server"].url)
    yield watched
    context.close()
    assert watched.dialogs == [], f"a script ran: {watched.dialogs}"
    assert watched.foreign() == [], f"requests beyond the console: {watched.foreign()}"


def state_of(events: list[dict], event_id: int) -> str:
    """The state an event belongs to: the last state entered before it."""
    name = None
    for e in events:
        if e["type"].endswith("StateEntered"):
            name = e["stateEnteredEventDetails"]["name"]
        if e["id"] == event_id:
            return name
    raise KeyError(event_id)


def failing_state(events: list[dict], error: str) -> str:
    failed = [e for e in events if e["type"] == "TaskFailed" and e["taskFailedEventDetails"]["error"] == error]
    assert len(failed) == 1
    return state_of(events, failed[0]["id"])


def cells(row) -> list[str]:
    return [c.strip() for c in row.locator("td").all_inner_texts()]


# --- the demo's entity, its versions and diffs, the execution of version 4 ---------------------------
def test_the_demo_entity_shows_every_version_with_its_audit_fields_and_diffs(page, served):
    entity = served["entity"]
    page.open("/console/executions")
    page.page.get_by_role("link", name=entity).first.click()  # from the execution list to the entity
    assert page.page.locator("#entity-id").inner_text() == entity
    versions = page.page.locator("#versions tbody tr")
    shown = [int(v) for v in versions.evaluate_all("rows => rows.map(r => r.dataset.version)")]
    entity_view = served["cf"].entity(entity)
    assert shown == sorted((v["version"] for v in entity_view["versions"]), reverse=True) == list(range(9, 0, -1))

    v1 = cells(page.page.locator("#v1"))
    assert v1[1] == "put" and v1[2] == "applied"
    assert v1[3] == "2026-01-01 00:00:00.000Z"  # effectiveAt 1767225600000 as a date
    # the principal AWS authenticated (a direct start: not known) beside the actor the client claims
    assert "StartExecution" in v1[4] and v1[5] == "alice@example.com" and v1[6] == "first draft"
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}Z", v1[7])  # recordedAt as a date
    # version 1 against nothing: every field added
    assert {li.get_attribute("data-field") for li in page.page.locator("#v1 td.diff li.added").all()} == {
        "title", "status", "pages"}
    # version 2 against version 1: field by field, as the change files say
    before = entity_view["versions"][0]["attributes"]
    after = entity_view["versions"][1]["attributes"]
    changed = {k for k in set(before) | set(after) if before.get(k) != after.get(k)}
    diff_fields = {li.get_attribute("data-field") for li in page.page.locator("#v2 td.diff li").all()}
    assert diff_fields == changed and changed
    status_change = page.page.locator('#v2 td.diff li[data-field="status"]')
    if "status" in changed:
        assert json.dumps(before["status"]) in status_change.inner_text()
        assert json.dumps(after["status"]) in status_change.inner_text()

    # the two concurrent patches: each names the fields it set, and the diff shows only those changed
    for number in (5, 6):
        version = entity_view["versions"][number - 1]
        assert cells(page.page.locator(f"#v{number}"))[1].startswith("patch")
        named = {li.get_attribute("data-field") for li in page.page.locator(f"#v{number} ul.patch li").all()}
        assert named == set(version["patch"]["set"]) | set(version["patch"]["remove"]) and named
        diff = {li.get_attribute("data-field") for li in page.page.locator(f"#v{number} td.diff li").all()}
        assert diff <= named  # a patch changes nothing it does not name
    # the delete: a tombstone with its expiry, every field removed
    v7 = page.page.locator("#v7")
    assert "tombstone" in v7.get_attribute("class") and "tombstone" in v7.inner_text()
    assert page.page.locator("#v7 td.diff li.removed").count() == len(entity_view["versions"][5]["attributes"])
    # the rollback names its source version
    assert "rollback of v2" in cells(page.page.locator("#v9"))[1]
    assert page.page.locator("#verify h2").inner_text() == "Verify: ok"
    assert page.page.locator("#repair").count() == 0  # nothing for repair to do
    page.shot("entity")

    # version 4 links to the execution that wrote it
    page.page.locator("#v4 a.execution-link").click()
    writer = next(v for v in entity_view["versions"] if v["version"] == 4)
    assert page.page.locator("#execution-name").inner_text() == writer["executionArn"].rsplit(":", 1)[1]
    assert page.page.locator("#execution-status").inner_text() == "SUCCEEDED"
    assert json.loads(page.page.locator("#execution-output").inner_text())["version"] == 4
    graph = page.page.locator("#graph svg")
    statuses = dict(graph.locator("g.state").evaluate_all(
        "gs => gs.map(g => [g.dataset.state, g.dataset.status])"))
    definition = json.loads((ROOT / "statemachines" / "change.asl.json").read_text())
    assert set(statuses) == set(definition["States"])  # every state of the deployed ASL is drawn
    visited = {v["stateEnteredEventDetails"]["name"] for v in served["cf"].history(writer["executionArn"])
               if v["type"].endswith("StateEntered")}
    assert {s for s, status in statuses.items() if status != "unvisited"} == visited
    # version 4 is the racing writer that lost once: its write step failed with WriteConflict, which a
    # Catch routed to the back-off (the ASL's design), so that state shows caught; every other succeeded
    failed_in, current = set(), None
    for event in served["cf"].history(writer["executionArn"]):
        if event["type"].endswith("StateEntered"):
            current = event["stateEnteredEventDetails"]["name"]
        elif event["type"] in ("TaskFailed", "LambdaFunctionFailed"):
            failed_in.add(current)
    assert all(statuses[s] == ("caught" if s in failed_in else "succeeded") for s in visited), (statuses, failed_in)
    assert graph.locator("path.edge.taken").count() >= len(visited) - 1
    # each state's input and output, expandable
    page.shot_of("#graph", "execution-graph")
    first_visit = page.page.locator("#visits li").first
    assert not first_visit.locator("pre").first.is_visible()
    first_visit.locator("summary").click()
    # the first state's input is what Step Functions received: the request as its JSON text (numbers exact)
    first_input = json.loads(first_visit.locator("pre").first.inner_text())
    assert json.loads(first_input["request"])["entityId"] == served["entity"]
    page.shot("execution")


def test_a_failed_execution_shows_its_error_cause_and_the_caught_path(page, served):
    page.open("/console/executions")
    page.shot("executions", full_page=False)
    page.page.locator("#status").select_option("FAILED")
    page.page.get_by_role("button", name="Filter").click()
    rows = page.page.locator("table.executions tbody tr")
    assert rows.count() >= 1
    assert all("FAILED" in cells(rows.nth(i))[1] for i in range(rows.count()))
    rows.filter(has_text="ValidationError").first.locator("td.name a").click()

    assert page.page.locator("#execution-status").inner_text() == "FAILED"
    assert page.page.locator("#failure-error").inner_text() == "ValidationError"
    assert "attributes" in page.page.locator("#failure-message").inner_text()  # the errorMessage of the cause
    # what the graph must say follows from the ASL's semantics, not from today's state names: the state
    # whose task failed with ValidationError is "caught" if one of its Catchers matches the error
    # (the error's name or States.ALL) and "failed" if none does; a Fail state that was entered failed.
    definition = json.loads((ROOT / "statemachines" / "change.asl.json").read_text())
    name = page.page.locator("#execution-name").inner_text()
    events = list(served["cf"].history(served["cf"].state_machine_arn.replace(":stateMachine:", ":execution:")
                                       + ":" + name))
    raised_in = failing_state(events, "ValidationError")
    catchers = definition["States"][raised_in].get("Catch", [])
    caught = any({"ValidationError", "States.ALL"} & set(c["ErrorEquals"]) for c in catchers)
    statuses = dict(page.page.locator("#graph g.state").evaluate_all(
        "gs => gs.map(g => [g.dataset.state, g.dataset.status])"))
    assert statuses[raised_in] == ("caught" if caught else "failed")
    entered_fail = {e["stateEnteredEventDetails"]["name"] for e in events if e["type"] == "FailStateEntered"}
    assert {s for s, v in statuses.items() if v == "failed"} == entered_fail | ({raised_in} if not caught else set())
    assert page.page.locator("#events tr.tag-caught").count() == (1 if caught else 0)
    failure_rows = page.page.locator("#events tr.failure-row")
    assert "ValidationError" in failure_rows.first.inner_text()
    page.shot("execution-failed")


def test_an_execution_with_retries_shows_each_attempt(page, served):
    page.open("/console/executions?" + urllib.parse.urlencode({"entity": RETRIED}))
    rows = page.page.locator("table.executions tbody tr")
    assert rows.count() == 1 and cells(rows.first)[2] == RETRIED
    rows.first.locator("td.name a").click()

    assert page.page.locator("#execution-status").inner_text() == "SUCCEEDED"
    # the state that ran the failing function: read from the history (its TaskScheduled parameters name
    # the function), not from today's state names
    events = list(served["cf"].history(served["retried"].arn))
    scheduled = [e for e in events if e["type"] == "TaskScheduled"
                 and "PutHistoryFunction" in e["taskScheduledEventDetails"]["parameters"]]
    states = {state_of(events, e["id"]) for e in scheduled}
    assert len(states) == 1 and len(scheduled) == 3  # one state, three attempts
    name = states.pop()
    state = page.page.locator(f'#graph g.state[data-state="{name}"]')
    assert state.get_attribute("data-status") == "retried"
    assert "retried ×2" in state.text_content()
    # the event table: two failed attempts, each followed by a retry
    failed = page.page.locator("#events tr.tag-retried")
    assert failed.count() == 2 and all("InjectedFault" in t for t in failed.all_inner_texts())
    retries = page.page.locator("#events tr.tag-retry")
    assert [r.split("\t")[1:3] for r in retries.all_inner_texts()] == [["TaskScheduled", name]] * 2
    assert "retry 1" in retries.nth(0).inner_text() and "retry 2" in retries.nth(1).inner_text()
    visit = page.page.locator(f'#visits li[data-state="{name}"]')
    assert visit.get_attribute("data-status") == "retried" and "×2" in visit.inner_text()
    page.shot("execution-retried")


# --- hostile ids and values --------------------------------------------------------------------------
def test_hostile_ids_and_values_are_shown_as_text_and_nothing_runs(page, served):
    page.open("/console/entities?" + urllib.parse.urlencode({"q": "中🙂"}))  # search by part of the id
    page.page.get_by_role("link", name=HOSTILE_ID).click()
    assert page.page.locator("#entity-id").inner_text() == HOSTILE_ID
    assert page.page.title().startswith(HOSTILE_ID)
    row = page.page.locator("#v2")
    assert HOSTILE_VALUE in row.inner_text()  # actor, reason, and the attribute's name and value as text
    assert page.page.locator('#v2 td.diff li[data-field="n"]').inner_text().endswith("1 → 2")
    # nothing from the data became markup: the page has no script, no img, no event handler attribute
    assert page.page.locator("script").count() == 0
    assert page.page.locator("img").count() == 0
    assert page.page.evaluate("[...document.querySelectorAll('*')].filter(e => "
                              "[...e.attributes].some(a => a.name.startsWith('on'))).length") == 0
    page.page.locator("#v2 a.execution-link").click()
    page.page.get_by_text("Execution input").click()  # expand it
    shown_input = json.loads(page.page.locator("#execution-input").inner_text())
    assert shown_input["attributes"][HOSTILE_VALUE] == HOSTILE_VALUE and shown_input["actor"] == HOSTILE_VALUE
    assert page.page.locator("#execution-entity").inner_text() == HOSTILE_ID
    page.open("/console/executions?" + urllib.parse.urlencode({"entity": HOSTILE_ID}))
    assert page.page.locator("table.executions tbody tr").count() == 2
    assert page.page.locator("#entity-filter").input_value() == HOSTILE_ID
    assert page.page.locator("script").count() == 0
    # the markup itself holds the id only escaped
    html = urllib.request.urlopen(served["server"].url + "/console/entity?" + urllib.parse.urlencode(
        {"id": HOSTILE_ID})).read().decode()
    assert "<script>" not in html and "&lt;script&gt;" in html


# --- paging, verify and repair ------------------------------------------------------------------------
def test_an_entity_with_thousands_of_versions_is_paged(page, served):
    page.open("/console/entity?" + urllib.parse.urlencode({"id": MANY}))
    versions = lambda: [int(v) for v in page.page.locator("#versions tbody tr").evaluate_all(  # noqa: E731
        "rows => rows.map(r => r.dataset.version)")]
    assert versions() == list(range(MANY_VERSIONS, MANY_VERSIONS - 50, -1))
    # verify reads every version: for thousands it waits to be asked (a small entity runs it at once)
    assert page.page.locator("#verify h2").inner_text() == "Verify: not run yet"
    assert "verify=1" in page.page.locator("#run-verify").get_attribute("href")
    page.page.locator("#older").click()
    assert versions() == list(range(MANY_VERSIONS - 50, MANY_VERSIONS - 100, -1))
    # the oldest row of a page still has its diff against the version before it (on the next page)
    assert page.page.locator(f"#v{MANY_VERSIONS - 99} td.diff li").count() == 2  # n and even changed
    page.open("/console/entity?" + urllib.parse.urlencode({"id": MANY, "before": 51}))
    assert versions() == list(range(50, 0, -1))
    assert page.page.locator("#older").count() == 0  # the last page


def test_verify_finds_the_damage_and_repair_writes_the_missing_history_item(page, served):
    page.open("/console/entity?" + urllib.parse.urlencode({"id": DAMAGED}))
    assert page.page.locator("#verify h2").inner_text() == "Verify: problems found"
    assert "versions missing from history: [2]" in page.page.locator("#problems").inner_text()
    page.shot("entity-damaged", full_page=False)
    page.page.locator("#repair").click()
    assert "repaired: wrote history item of version 2 from v0" in page.page.locator("#repair-result").inner_text()
    assert page.page.locator("#verify h2").inner_text() == "Verify: ok"
    assert [v["version"] for v in served["cf"].entity(DAMAGED)["versions"]] == [1, 2]


def test_repair_refuses_a_post_without_the_form_token_or_from_another_origin(served):
    url = served["server"].url + "/console/repair"
    body = urllib.parse.urlencode({"id": DAMAGED, "token": "guessed"}).encode()
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(urllib.request.Request(url, data=body, method="POST"))
    assert refused.value.code == 403
    with pytest.raises(urllib.error.HTTPError) as foreign:
        urllib.request.urlopen(urllib.request.Request(url, data=body, method="POST",
                                                      headers={"Origin": "http://evil.example"}))
    assert foreign.value.code == 403
    with pytest.raises(urllib.error.HTTPError) as rebound:  # a DNS-rebinding page names another host
        urllib.request.urlopen(urllib.request.Request(served["server"].url + "/console/executions",
                                                      headers={"Host": "evil.example"}))
    assert rebound.value.code == 403
    with pytest.raises(urllib.error.HTTPError) as get:
        urllib.request.urlopen(url)
    assert get.value.code == 405


# --- narrow windows ----------------------------------------------------------------------------------
def test_pages_fit_a_narrow_window(browser, served):
    context = browser.new_context(viewport={"width": 420, "height": 800})
    watched = Watched(context.new_page(), served["server"].url)
    try:
        execution = served["retried"].name
        for path in ("/console/executions", "/console/execution?" + urllib.parse.urlencode({"name": execution}),
                     "/console/entity?" + urllib.parse.urlencode({"id": served["entity"]})):
            watched.open(path)
            # the page itself never scrolls sideways: wide tables and the graph scroll in their own boxes
            assert watched.page.evaluate("document.documentElement.scrollWidth") <= 420
        # the version table becomes one labelled card per version: no sideways scrolling to read a version
        assert watched.page.evaluate("[...document.querySelectorAll('#versions')].every("
                                     "t => t.parentElement.scrollWidth <= t.parentElement.clientWidth)")
        assert watched.page.locator("#v1 td").first.evaluate(
            "td => getComputedStyle(td, '::before').content") == '"Version"'
        watched.shot("entity-narrow", full_page=False)
    finally:
        context.close()


# --- the console as its own process: changeflow console, changeflow demo --serve ---------------------
def snapshot(cf) -> tuple:
    """Everything a reader could change: every item of the tables, every execution and its status."""
    found = []
    for table in sorted({cf.table, cf.history_table}):
        start, items = None, []
        while True:
            page = cf.dynamodb.scan(TableName=table, **({"ExclusiveStartKey": start} if start else {}))
            items.extend(json.dumps(i, sort_keys=True, default=bytes.hex) for i in page["Items"])
            start = page.get("LastEvaluatedKey")
            if not start:
                break
        found.append(sorted(items))
    executions = sorted((e["executionArn"], e["status"]) for e in cf.executions(limit=10_000))
    return tuple(map(tuple, found)), tuple(executions)


def read_line(process, prefix: str, limit: int = 200) -> str:
    for _ in range(limit):
        line = process.stdout.readline()
        if not line:
            break
        if line.startswith(prefix):
            return line
    raise AssertionError(f"no line starting {prefix!r}")


def test_changeflow_console_reads_a_stack_through_its_endpoint_and_changes_nothing(browser, served):
    # GIVEN changeflow serve with the demo's story, and `changeflow console` as a separate process that
    # reads it as it would read a deployed stack (CloudFormation outputs, then the stack's own APIs)
    import signal
    import subprocess
    import sys

    cf = served["cf"]
    before = snapshot(cf)
    process = subprocess.Popen([sys.executable, "-m", "changeflow", "console", "--endpoint-url",
                                served["server"].url, "--port", "0"], stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, cwd=ROOT)
    try:
        url = read_line(process, "changeflow console: ").split()[2]
        origin = url.rsplit("/console", 1)[0]
        context = browser.new_context(viewport={"width": 1280, "height": 800})
        watched = Watched(context.new_page(), origin)
        try:
            # WHEN every kind of page is visited, from the list down to the damaged entity
            watched.open("/console/executions")
            names = watched.page.locator("table.executions td.name a").all_inner_texts()
            assert len(names) == len(before[1])  # every execution of the stack, none hidden
            for name in names[:3]:
                watched.open("/console/execution?" + urllib.parse.urlencode({"name": name}))
                assert watched.page.locator("#execution-name").inner_text() == name
            for entity in (served["entity"], RETRIED, HOSTILE_ID, DAMAGED, MANY):
                watched.open("/console/entity?" + urllib.parse.urlencode({"id": entity}))
                assert watched.page.locator("#entity-id").inner_text() == entity
            watched.open("/console/entities?q=1")
            watched.open("/console/executions?status=FAILED")
        finally:
            context.close()
        assert watched.dialogs == [] and watched.foreign() == []
    finally:
        process.send_signal(signal.SIGTERM)
        out, _ = process.communicate(timeout=30)
    assert process.returncode == 0, out
    # THEN the stack holds exactly what it held: the console only reads
    assert snapshot(cf) == before


def test_executions_are_filtered_by_time(page, served):
    from datetime import datetime, timedelta, timezone

    future = (datetime.now(timezone.utc) + timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%S")
    page.open("/console/executions?" + urllib.parse.urlencode({"since": future}))
    assert page.page.locator("table.executions").count() == 0
    assert "No execution matches" in page.page.locator("#no-executions").inner_text()
    page.open("/console/executions?" + urllib.parse.urlencode({"until": future, "entity": served["entity"]}))
    rows = page.page.locator("table.executions tbody tr")
    started = rows.evaluate_all("rows => rows.map(r => r.querySelector('td.time').innerText)")
    from changeflow import demo

    sent = sum(len(r) if isinstance(r := json.loads((ROOT / "events" / "workflow" / f).read_text()), list) else 1
               for _, f in demo.STEPS)
    assert len(started) == sent == 13 and started == sorted(started, reverse=True)  # the demo's, newest first


# --- the drawing is generic over any valid ASL ----------------------------------------------------------
OTHER_ASL = {
    "StartAt": "a <b> & \"c\"",
    "States": {
        "a <b> & \"c\"": {"Type": "Task", "Resource": "arn:aws:states:::lambda:invoke",
                          "Parameters": {"FunctionName.$": "$.fn"}, "Next": "pick",
                          "Retry": [{"ErrorEquals": ["States.ALL"], "MaxAttempts": 2}],
                          "Catch": [{"ErrorEquals": ["Boom"], "Next": "handle"}]},
        "pick": {"Type": "Choice", "Choices": [{"Variable": "$.x", "NumericEquals": 1, "Next": "fan"}],
                 "Default": "done"},
        "fan": {"Type": "Parallel", "Branches": [{"StartAt": "inner", "States": {"inner": {"Type": "Succeed"}}}],
                "Next": "wait"},
        "wait": {"Type": "Wait", "Seconds": 1, "Next": "a <b> & \"c\""},
        "handle": {"Type": "Pass", "End": True},
        "done": {"Type": "Succeed"},
        "orphan": {"Type": "Fail", "Error": "Never"},
    },
}


def event(i, kind, **details):
    from datetime import datetime, timedelta, timezone

    key = {"StateEntered": "stateEnteredEventDetails", "StateExited": "stateExitedEventDetails"}
    field = next((v for k, v in key.items() if kind.endswith(k)), "x" + kind + "EventDetails")
    return {"id": i, "type": kind, "timestamp": datetime(2026, 1, 1, tzinfo=timezone.utc) + timedelta(milliseconds=i),
            field: details}


def test_the_graph_draws_any_definition_its_transitions_and_a_loop():
    from changeflow.console import graph

    found = {(e.source, e.target, e.kind) for e in graph.edges(OTHER_ASL)}
    start = "a <b> & \"c\""
    assert found == {(start, "pick", "next"), (start, "handle", "catch"), ("pick", "fan", "choice"),
                     ("pick", "done", "default"), ("fan", "wait", "next"), ("wait", start, "next")}
    placed, back = graph.layout(OTHER_ASL)
    assert set(placed) == set(OTHER_ASL["States"])  # unreachable states are drawn too
    assert [(e.source, e.target) for e in back] == [("wait", start)]  # the loop back is the one back edge
    assert placed[start][0] == 0 and placed["pick"][0] == 1 and placed["fan"][0] == 2 and placed["wait"][0] == 3
    drawn = graph.svg(OTHER_ASL)
    assert "a &lt;b&gt; &amp; &quot;c&quot;" in drawn and "<b>" not in drawn
    assert drawn.count('class="state ') == len(OTHER_ASL["States"])


def test_the_path_tells_retried_caught_and_failed_states_apart():
    from changeflow.console import graph

    start = "a <b> & \"c\""
    events = [
        event(1, "ExecutionStarted"),
        event(2, "TaskStateEntered", name=start), event(3, "TaskScheduled"), event(4, "TaskFailed", error="Flaky"),
        event(5, "TaskScheduled"), event(6, "TaskSucceeded"), event(7, "TaskStateExited", name=start),
        event(8, "ChoiceStateEntered", name="pick"), event(9, "ChoiceStateExited", name="pick"),
        event(10, "ParallelStateEntered", name="fan"), event(11, "ParallelStateExited", name="fan"),
        event(12, "WaitStateEntered", name="wait"), event(13, "WaitStateExited", name="wait"),
        event(14, "TaskStateEntered", name=start), event(15, "TaskScheduled"), event(16, "TaskFailed", error="Boom"),
        event(17, "TaskStateExited", name=start),
        event(18, "PassStateEntered", name="handle"), event(19, "PassStateExited", name="handle"),
        event(20, "ExecutionSucceeded"),
    ]
    run = graph.path(OTHER_ASL, events)
    assert run.states[start].visits == 2 and run.states[start].retries == 1 and run.states[start].caught == 1
    assert run.states[start].status == "caught" and run.states["handle"].status == "succeeded"
    assert run.retry_events == {4, 5} and run.caught_events == {16}
    assert run.taken == {(start, "pick"): 1, ("pick", "fan"): 1, ("fan", "wait"): 1, ("wait", start): 1,
                         (start, "handle"): 1}
    assert "done" not in run.states
    failing = events[:3] + [event(4, "TaskFailed", error="Boom"), event(5, "ExecutionFailed", error="Boom")]
    assert graph.path(OTHER_ASL, failing).states[start].status == "failed"  # no Catch took it: it failed there


def test_the_demo_ends_by_saying_where_the_console_is_and_serve_keeps_it_open():
    # make run is `changeflow demo`; `changeflow demo --serve` keeps the stack and its console open
    import signal
    import subprocess
    import sys

    process = subprocess.Popen([sys.executable, "-m", "changeflow", "demo", "--serve", "--port", "0"],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT)
    try:
        line = read_line(process, "== the audit console: ", limit=2000)
        url = line.split()[4]
        assert re.fullmatch(r"http://127\.0\.0\.1:\d+/console", url), line
        entity_page = line.split("(entity: ")[1].rstrip(")\n")
        html = urllib.request.urlopen(entity_page, timeout=60).read().decode()
        assert '<span id="entity-id">doc#42</span>' in html and 'data-version="7"' in html
    finally:
        process.send_signal(signal.SIGTERM)
        process.communicate(timeout=30)
    assert process.returncode == 0


def test_verify_of_a_big_entity_runs_when_asked(page, served, monkeypatch):
    from changeflow.console import data

    monkeypatch.setattr(data, "VERIFY_AT_ONCE", 5)  # the demo's entity (7 versions) counts as big here
    page.open("/console/entity?" + urllib.parse.urlencode({"id": served["entity"]}))
    assert page.page.locator("#verify h2").inner_text() == "Verify: not run yet"
    page.page.locator("#run-verify").click()
    assert page.page.locator("#verify h2").inner_text() == "Verify: ok"
    assert "versions 1..9 in history (9 items)" in page.page.locator("#verify").inner_text()


# --- the change feed (issue 36) ----------------------------------------------------------------------------
def test_the_feed_page_shows_each_version_as_it_is_recorded_checked_and_refreshes_itself(page, served):
    cf = served["cf"]
    page.open("/console/feed?refresh=1")
    assert page.page.locator('meta[http-equiv="refresh"]').get_attribute("content") == "1"
    # the damaged entity's history lost version 2 (not by TTL): the break is shown, the others go on
    assert f"{DAMAGED}: version 2: deleted from history" in page.page.locator("#breaks").inner_text()
    # its own hostile entity: redacting the shared one would change what the other tests read
    cf.submit({"entityId": FEED_ID, "operation": "put", "changeId": "hostile-feed-1", "attributes": {"n": 1}})
    cf.submit({"entityId": FEED_ID, "operation": "put", "changeId": "hostile-feed", "actor": HOSTILE_VALUE,
               "attributes": {"n": 3}})
    cf.submit({"entityId": FEED_ID, "operation": "redact", "redactVersion": 1, "changeId": "hostile-erase",
               "reason": "test"})
    page.page.wait_for_selector("table.feed tbody tr:first-child >> text=erase version 1 downstream")
    rows = page.page.locator("table.feed tbody tr")
    newest, before = cells(rows.nth(0)), cells(rows.nth(1))
    assert newest[1:4] == [FEED_ID, "3", "redact erase version 1 downstream"] and newest[5].endswith("checked")
    assert before[1:3] == [FEED_ID, "2"] and f"actor {HOSTILE_VALUE} (claimed)" in before[4]
    assert page.page.locator("script").count() == 0
    page.shot("feed")
    page.page.get_by_role("link", name="pause").click()
    assert page.page.locator('meta[http-equiv="refresh"]').count() == 0
