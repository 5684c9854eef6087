"""The console as a WSGI application: server-rendered HTML pages (Jinja2, every value escaped), one
stylesheet served from the package, no script at all.

Why server-rendered: the pages are tables, a drawing and a few forms; rendering them where the data is
read needs no build step, no JavaScript toolchain and no CDN, works with scripting disabled, and leaves
escaping to one place (Jinja2's autoescape) instead of every DOM write. The Content-Security-Policy
forbids every script, so even a value that escaped escaping could not run.
"""

from __future__ import annotations

import secrets
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable
from urllib.parse import urlencode

from jinja2 import Environment, FileSystemLoader
from markupsafe import Markup
from werkzeug.exceptions import BadRequest, Forbidden, HTTPException, MethodNotAllowed, NotFound
from werkzeug.exceptions import NotImplemented as NotSupported
from werkzeug.routing import Map, Rule
from werkzeug.utils import redirect
from werkzeug.wrappers import Request, Response

from changeflow_core import asof, wire
from changeflow_core.errors import ValidationError

from . import data, graph

HERE = Path(__file__).resolve().parent
# Step Functions' statuses, and UNKNOWN: an execution that ended OutcomeUnknown (Step Functions says FAILED)
STATUSES = ["RUNNING", "SUCCEEDED", "FAILED", "UNKNOWN", "TIMED_OUT", "ABORTED"]
LOCAL_HOSTS = {"127.0.0.1", "localhost", "::1", "[::1]"}
HEADERS = {
    # No script may run, styles and images only from here, forms only post here, never framed.
    "Content-Security-Policy": "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; "
                               "frame-ancestors 'none'; base-uri 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",  # no-referrer would make the browser send "Origin: null" on a POST
    "Cache-Control": "no-store",
}

ROUTES = Map([
    Rule("/console", endpoint="home"),
    Rule("/console/", endpoint="home"),
    Rule("/console/executions", endpoint="executions"),
    Rule("/console/execution", endpoint="execution"),
    Rule("/console/entities", endpoint="entities"),
    Rule("/console/entity", endpoint="entity"),
    Rule("/console/repair", endpoint="repair", methods=["POST"]),
    Rule("/console/feed", endpoint="feed"),
    Rule("/console/static/console.css", endpoint="css"),
], strict_slashes=False)


def entity_url(entity_id: str, **extra: Any) -> str:
    return "/console/entity?" + urlencode({"id": entity_id, **{k: v for k, v in extra.items() if v is not None}})


def execution_url(name_or_arn: str, entity: str | None = None) -> str:
    """The execution's page; with the entity whose version it wrote, the page can show it from the table
    once Step Functions and the execution log no longer hold it (docs/privacy.md)."""
    return "/console/execution?" + urlencode({"name": name_or_arn, **({"entity": entity} if entity else {})})


def _parse_time(text: str, field: str) -> datetime | None:
    if not text:
        return None
    try:
        moment = datetime.fromisoformat(text)
    except ValueError as exc:
        raise BadRequest(f"{field}: not a date and time ({text!r})") from exc
    return moment.replace(tzinfo=timezone.utc) if moment.tzinfo is None else moment


class Console:
    """The console of one stack (``reader``): ``app(environ, start_response)`` answers every /console URL."""

    def __init__(self, reader: data.Reader, label: str = ""):
        self.reader = reader
        self.label = label
        self.token = secrets.token_urlsafe(24)  # repair's form carries it: a cross-site POST cannot
        self.env = Environment(loader=FileSystemLoader(str(HERE / "templates")), autoescape=True,
                               trim_blocks=True, lstrip_blocks=True)
        self.env.globals.update(entity_url=entity_url, execution_url=execution_url, ms_date=data.ms_date,
                                s_date=data.s_date, when=data.when, pretty=data.pretty, compact=data.compact,
                                label=label, statuses=STATUSES, describe_principal=data.describe_principal)
        self.css = (HERE / "static" / "console.css").read_bytes()

    # --- WSGI -----------------------------------------------------------------------------------------
    def __call__(self, environ: dict, start_response: Callable) -> Any:
        request = Request(environ)
        try:
            self._check_origin(request)
            endpoint, values = ROUTES.bind_to_environ(environ).match()
            response = getattr(self, f"page_{endpoint}")(request, **values)
        except HTTPException as exc:
            if exc.code in (301, 302, 303, 307, 308):  # werkzeug's own redirects
                response = exc.get_response(environ)
            else:
                response = self._html("error.html", code=exc.code or 500, title=exc.name, message=exc.description)
        for key, value in HEADERS.items():
            response.headers.setdefault(key, value)
        return response(environ, start_response)

    def route(self, environ: dict, start_response: Callable) -> Any:
        """A route for ``changeflow serve`` (changeflow.local.server.EmbeddedServer): None for any other path."""
        path = environ.get("PATH_INFO", "")
        if path == "/console" or path.startswith("/console/"):
            return self(environ, start_response)
        return None

    def _check_origin(self, request: Request) -> None:
        """Only this machine's names (no DNS rebinding), and a POST only from the console's own pages."""
        host = (request.host or "").rsplit(":", 1)[0] if not (request.host or "").startswith("[") else "[::1]"
        if host not in LOCAL_HOSTS:
            raise Forbidden("the console answers on 127.0.0.1 and localhost only")
        if request.method == "POST":
            origin = request.headers.get("Origin")
            if origin and origin != f"{request.scheme}://{request.host}":
                raise Forbidden("a cross-origin POST is refused")

    def _html(self, template: str, code: int = 200, **context: Any) -> Response:
        body = self.env.get_template(template).render(**context)
        return Response(body, status=code, content_type="text/html; charset=utf-8")

    # --- pages ----------------------------------------------------------------------------------------
    def page_css(self, request: Request) -> Response:
        return Response(self.css, content_type="text/css; charset=utf-8",
                        headers={"Cache-Control": "max-age=300"})

    def page_home(self, request: Request) -> Response:
        return redirect("/console/executions", code=302)

    def page_executions(self, request: Request) -> Response:
        status = request.args.get("status", "")
        if status and status not in STATUSES:
            raise BadRequest(f"status: one of {', '.join(STATUSES)}")
        entity = request.args.get("entity", "")
        since = _parse_time(request.args.get("since", ""), "since")
        until = _parse_time(request.args.get("until", ""), "until")
        token = request.args.get("token") or None
        try:
            rows, next_token, examined = self.reader.list_executions(status, entity, since, until, token)
        except self.reader.client.sfn.exceptions.InvalidToken as exc:
            raise BadRequest("the page token is no longer valid: start again from the first page") from exc
        except RuntimeError as exc:  # an Express machine whose execution log is not kept whole: it says so
            raise NotSupported(str(exc)) from exc
        query = {k: v for k, v in request.args.items() if k != "token" and v}
        older = "/console/executions?" + urlencode({**query, "token": next_token}) if next_token else None
        return self._html("executions.html", rows=rows, status=status, entity=entity,
                          since=request.args.get("since", ""), until=request.args.get("until", ""),
                          older=older, examined=examined, first_page=token is None,
                          first_url="/console/executions?" + urlencode(query))

    def page_execution(self, request: Request) -> Response:
        name = request.args.get("name", "")
        if not name:
            raise BadRequest("name: the execution's name or ARN")
        arn = self.reader.execution_arn(name)
        written_entity = request.args.get("entity") or None
        try:
            description = self.reader.describe(arn, written_entity)
        except Exception as exc:  # noqa: BLE001 - a malformed ARN: the service's own message
            raise NotFound(f"execution {name}: {exc}") from exc
        if description is None:
            raise NotFound(f"no execution named {name}")
        events = self.reader.history(arn) if description["status"] != "AGED_OUT" else []
        definition = self.reader.definition(description["stateMachineArn"])
        run = graph.path(definition, events)
        request_input = data.change_request(description.get("input"))
        entity = request_input.get("entityId") if isinstance(request_input, dict) else description.get("entityId")
        return self._html(
            "execution.html", d=description, entity=entity if isinstance(entity, str) else None,
            request_input=wire.dumps(request_input, default=str) if request_input is not None else None,
            output=description.get("output"),
            message=data.error_message(description.get("cause")),
            graph=Markup(graph.svg(definition, run, title=f"state machine, path of {description['name']}")),
            visits=_visits(events, run), rows=_event_rows(events, run),
            duration=_duration(description.get("startDate"), description.get("stopDate")),
            states=run.states, definition=definition)

    def page_entities(self, request: Request) -> Response:
        query = request.args.get("q", "")
        if query and (self.reader.latest(query) is not None or self.reader.versions_page(query, size=1)[0]):
            return redirect(entity_url(query), code=302)
        found, more = self.reader.search(query)
        return self._html("entities.html", q=query, found=found, more=more)

    def page_entity(self, request: Request, repair_result: tuple[list[str], list[str]] | None = None) -> Response:
        entity_id = request.args.get("id")
        if entity_id is None:
            entity_id = request.form.get("id", "")
        before = request.args.get("before")
        if before is not None:
            if not before.isdigit() or int(before) < 1:
                raise BadRequest("before: a version number")
            before = int(before)
        times = {"asOf": request.args.get("asOf") or None, "knownAt": request.args.get("knownAt") or None}
        answer = None
        if times["asOf"] or times["knownAt"]:
            try:
                as_of, known_at = (asof.parse_instant(name, text) for name, text in times.items())
            except ValidationError as exc:
                raise BadRequest(str(exc)) from None
            answer = self.reader.as_of(entity_id, as_of, known_at)
            if answer["version"] and before is None:  # the page starts at the version in effect
                before = answer["version"] + 1
        latest = self.reader.latest(entity_id)
        rows, older = self.reader.versions_page(entity_id, before)
        if latest is None and not rows and before is None:
            raise NotFound(f"no entity {entity_id!r} (no v0 and no history)")
        for row in rows:
            row["outcome"], row["execution_status"] = self.reader.outcome(row["view"]["executionArn"], entity_id)
        # verify reads every version: at once for a small entity, on request for a big one
        newest = latest["version"] if latest else (rows[0]["view"]["version"] if rows else 0)
        run_verify = repair_result is not None or request.args.get("verify") == "1" or newest <= data.VERIFY_AT_ONCE
        report = self.reader.verify(entity_id) if run_verify else None
        return self._html("entity.html", entity_id=entity_id, latest=latest, rows=rows, report=report,
                          verify_url=entity_url(entity_id, before=before, verify=1), newest_version=newest,
                          older=entity_url(entity_id, before=older) if older else None,
                          newest=entity_url(entity_id) if before else None,
                          can_repair=report is not None and not report.ok and self.reader.repair_can_act(entity_id),
                          token=self.token, repair_result=repair_result, times=times, answer=answer)

    def page_feed(self, request: Request) -> Response:
        """The change feed as it is recorded (issue 36): the newest versions first, each checked against the
        chain; the page refreshes itself every ``refresh`` seconds (5; 0 stops), with no script."""
        text = request.args.get("refresh", "5")
        if not text.isdigit() or int(text) > 3600:
            raise BadRequest("refresh: seconds between refreshes, 0 to 3600 (0: never)")
        window = self.reader.feed()
        return self._html("feed.html", nav="feed", events=list(window.events), broken=window.broken,
                          refresh=int(text), tally=window.follower.tally)

    def page_repair(self, request: Request) -> Response:
        if request.method != "POST":
            raise MethodNotAllowed(["POST"])
        if not secrets.compare_digest(request.form.get("token", ""), self.token):
            raise Forbidden("the repair form's token does not match: reload the entity's page")
        entity_id = request.form.get("id", "")
        result = self.reader.repair(entity_id)
        return self.page_entity(request, repair_result=result)


def _duration(start: Any, stop: Any) -> str:
    if not isinstance(start, datetime) or not isinstance(stop, datetime):
        return ""
    return f"{(stop - start).total_seconds() * 1000:.0f} ms"


def _ms(event: dict, first: dict) -> int:
    return int((event["timestamp"] - first["timestamp"]).total_seconds() * 1000)


def _visits(events: list[dict], run: graph.Path) -> list[dict[str, Any]]:
    """Each state visit in order: its input and output, its time, and how it ended."""
    visits: list[dict[str, Any]] = []
    current = None
    for event in events:
        kind, details = event["type"], graph._details(event)
        if kind.endswith("StateEntered"):
            current = {"name": details.get("name"), "type": kind[: -len("StateEntered")],
                       "input": details.get("input"), "output": None, "start": event, "end": None,
                       "retries": 0, "caught": False, "errors": []}
            visits.append(current)
        elif current is None:
            continue
        elif kind.endswith("StateExited"):
            current["output"], current["end"] = details.get("output"), event
            current = None
        else:
            if event["id"] in run.retry_events and graph._is_attempt_start(kind):
                current["retries"] += 1
            if event["id"] in run.caught_events:
                current["caught"] = True
            if details.get("error"):
                current["errors"].append({"error": details["error"], "message": data.error_message(details.get("cause"))})
    first = events[0] if events else None
    for v in visits:
        v["elapsed"] = _ms(v["start"], first)
        v["took"] = _ms(v["end"], v["start"]) if v["end"] else None
        if v["type"] == "Fail":
            v["status"] = "failed"
        elif v["caught"]:
            v["status"] = "caught"
        elif v["end"] is None:
            v["status"] = "failed" if v["errors"] else "running"
        elif v["retries"]:
            v["status"] = "retried"
        else:
            v["status"] = "succeeded"
    return visits


def _event_rows(events: list[dict], run: graph.Path) -> list[dict[str, Any]]:
    rows = []
    first = events[0] if events else None
    previous = first
    attempts: dict[str, int] = {}
    for event in events:
        kind, details = event["type"], graph._details(event)
        state = details.get("name") or run.state_of_event.get(event["id"], "")
        tags = []
        if graph._is_attempt_start(kind):
            attempts[state] = attempts.get(state, 0) + 1
            if event["id"] in run.retry_events:
                tags.append(("retry", f"retry {attempts[state] - 1}"))
        elif event["id"] in run.retry_events:
            tags.append(("retried", "failed, retried"))
        if event["id"] in run.caught_events:
            tags.append(("caught", "failed, caught"))
        if kind.endswith("StateEntered"):
            attempts[state] = 0
        expandable = [(key, details[key]) for key in ("input", "parameters", "output") if details.get(key)]
        if any((details.get(f"{key}Details") or {}).get("truncated") for key in ("input", "output")):
            tags.append(("truncated", "cut at 248 KB by the execution log"))
        rows.append({
            "id": event["id"], "type": kind, "state": state, "elapsed": _ms(event, first),
            "delta": _ms(event, previous), "tags": tags, "error": details.get("error"),
            "message": data.error_message(details.get("cause")), "cause": details.get("cause"),
            "expandable": expandable, "failure": "error" in details,
        })
        previous = event
    return rows

