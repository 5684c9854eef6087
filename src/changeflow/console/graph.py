"""The state machine drawn from its ASL definition, as server-rendered SVG, with one execution's path on it.

Generic over any valid definition: the top-level ``States`` and their transitions (``Next``, ``Default``,
``Choices[].Next``, ``Catch[].Next``; ``End`` and the Succeed/Fail types end a path), laid out in layers
(the longest path from ``StartAt`` over the forward edges; back edges, such as a retry loop through a Wait
state, are drawn curving round the side). A Parallel or Map state is one box (its branches are not drawn).

The path comes from the execution history (GetExecutionHistory events, oldest first): which states were
entered and how each visit ended (succeeded, failed, retried, caught) and which transitions were taken.
See https://docs.aws.amazon.com/step-functions/latest/dg/concepts-states.html (transitions) and
https://docs.aws.amazon.com/step-functions/latest/apireference/API_HistoryEvent.html (event types).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from html import escape
from typing import Any

BOX_W, BOX_H, GAP_X, GAP_Y, MARGIN = 190, 54, 36, 58, 20
LINE_CHARS = 27


@dataclass(frozen=True)
class Edge:
    source: str
    target: str
    kind: str  # next, choice, default, catch


def edges(definition: dict[str, Any]) -> list[Edge]:
    """Every transition of the top-level states, in definition order (duplicates removed)."""
    found: list[Edge] = []
    for name, state in (definition.get("States") or {}).items():
        if not isinstance(state, dict):
            continue
        candidates = []
        if isinstance(state.get("Next"), str):
            candidates.append((state["Next"], "next"))
        for choice in state.get("Choices") or []:
            if isinstance(choice, dict) and isinstance(choice.get("Next"), str):
                candidates.append((choice["Next"], "choice"))
        if isinstance(state.get("Default"), str):
            candidates.append((state["Default"], "default"))
        for catcher in state.get("Catch") or []:
            if isinstance(catcher, dict) and isinstance(catcher.get("Next"), str):
                candidates.append((catcher["Next"], "catch"))
        for target, kind in candidates:
            edge = Edge(name, target, kind)
            if edge not in found and not any(e.source == name and e.target == target for e in found):
                found.append(edge)
    return found


def layout(definition: dict[str, Any]) -> tuple[dict[str, tuple[int, int]], set[Edge]]:
    """``({state: (layer, position)}, back edges)``: layers by longest forward path from StartAt."""
    states = list((definition.get("States") or {}).keys())
    all_edges = edges(definition)
    out: dict[str, list[str]] = {s: [] for s in states}
    for e in all_edges:
        if e.target in out:
            out[e.source].append(e.target)
    start = definition.get("StartAt")
    roots = [start] if start in out else []
    roots += [s for s in states if s not in roots]  # unreachable states still get drawn
    # back edges: those closing a cycle in a depth-first search from StartAt
    back: set[tuple[str, str]] = set()
    colour: dict[str, int] = {}
    for root in roots:
        if root in colour:
            continue
        stack = [(root, iter(out[root]))]
        colour[root] = 1
        while stack:
            node, children = stack[-1]
            child = next(children, None)
            if child is None:
                colour[node] = 2
                stack.pop()
            elif colour.get(child) == 1:
                back.add((node, child))
            elif child not in colour:
                colour[child] = 1
                stack.append((child, iter(out[child])))
    # longest path over forward edges (a DAG), in topological order
    indegree = {s: 0 for s in states}
    for s in states:
        for t in out[s]:
            if (s, t) not in back:
                indegree[t] += 1
    layer = {s: 0 for s in states}
    ready = [s for s in roots if indegree[s] == 0]
    order = []
    while ready:
        node = ready.pop(0)
        order.append(node)
        for t in out[node]:
            if (node, t) in back:
                continue
            layer[t] = max(layer[t], layer[node] + 1)
            indegree[t] -= 1
            if indegree[t] == 0:
                ready.append(t)
    # order within a layer: by the mean position of the parents (one sweep), else definition order
    rows: dict[int, list[str]] = {}
    position: dict[str, float] = {}
    parents: dict[str, list[str]] = {s: [] for s in states}
    for s in states:
        for t in out[s]:
            if (s, t) not in back:
                parents[t].append(s)
    for depth in sorted(set(layer.values())):
        members = [s for s in states if layer[s] == depth]
        members.sort(key=lambda s: (sum(position[p] for p in parents[s]) / len(parents[s])
                                    if parents[s] else states.index(s), states.index(s)))
        rows[depth] = members
        for i, s in enumerate(members):
            position[s] = i
    placed = {s: (layer[s], rows[layer[s]].index(s)) for s in states}
    return placed, {e for e in all_edges if (e.source, e.target) in back}


@dataclass
class StateRun:
    """What one execution did in one state."""

    visits: int = 0
    retries: int = 0
    caught: int = 0
    failed: bool = False
    succeeded: bool = False
    errors: list[str] = field(default_factory=list)

    @property
    def status(self) -> str:
        if self.failed:
            return "failed"
        if self.caught:
            return "caught"
        if self.retries:
            return "retried"
        if self.visits:
            return "succeeded" if self.succeeded else "running"
        return "unvisited"


@dataclass
class Path:
    states: dict[str, StateRun]
    taken: dict[tuple[str, str], int]  # (source, target): times
    retry_events: set[int]  # ids of the failure events that were retried and of the attempts they caused
    caught_events: set[int]
    state_of_event: dict[int, str]


def _details(event: dict[str, Any]) -> dict[str, Any]:
    return next((v for k, v in event.items() if k.endswith("EventDetails") and isinstance(v, dict)), {})


def _is_attempt_failure(kind: str) -> bool:
    return (kind.endswith("Failed") or kind.endswith("TimedOut") or kind.endswith("Aborted")) and not (
        kind.startswith("Execution") or kind.endswith("StateExited"))


def _is_attempt_start(kind: str) -> bool:
    return kind.endswith("Scheduled") and not kind.startswith("Execution")


def path(definition: dict[str, Any], events: list[dict[str, Any]]) -> Path:
    """The path an execution took, read from its history events (oldest first)."""
    types = {n: s.get("Type") for n, s in (definition.get("States") or {}).items() if isinstance(s, dict)}
    states: dict[str, StateRun] = {}
    taken: dict[tuple[str, str], int] = {}
    retry_events: set[int] = set()
    caught_events: set[int] = set()
    state_of_event: dict[int, str] = {}
    current, last_exited = None, None
    pending_failure: int | None = None  # id of an attempt's failure not yet followed by a retry or success
    for event in events:
        kind, details = event.get("type", ""), _details(event)
        if kind.endswith("StateEntered"):
            current = details.get("name")
            run = states.setdefault(current, StateRun())
            run.visits += 1
            if last_exited is not None:
                taken[(last_exited, current)] = taken.get((last_exited, current), 0) + 1
            last_exited, pending_failure = None, None
            if types.get(current) == "Fail":
                run.failed = True
        if current is not None:
            state_of_event[event["id"]] = current
        if current is None:
            continue
        run = states[current]
        if _is_attempt_failure(kind):
            pending_failure = event["id"]
            if details.get("error"):
                run.errors.append(str(details["error"]))
        elif _is_attempt_start(kind) and pending_failure is not None:
            run.retries += 1
            retry_events.update({pending_failure, event["id"]})
            pending_failure = None
        elif kind.endswith("Succeeded") and not kind.startswith("Execution"):
            pending_failure = None
        elif kind.endswith("StateExited"):
            if pending_failure is not None:  # the state failed and still exited: a Catch routed it on
                run.caught += 1
                caught_events.add(pending_failure)
            elif types.get(current) != "Fail":
                run.succeeded = True
            last_exited, current, pending_failure = current, None, None
        elif kind in ("ExecutionFailed", "ExecutionTimedOut", "ExecutionAborted"):
            run.failed = True
    return Path(states, taken, retry_events, caught_events, state_of_event)


def _lines(text: str) -> list[str]:
    words, lines, line = text.split(), [], ""
    for word in words:
        if line and len(line) + 1 + len(word) > LINE_CHARS:
            lines.append(line)
            line = word
        else:
            line = f"{line} {word}" if line else word
    if line:
        lines.append(line)
    lines = [ln if len(ln) <= LINE_CHARS else ln[: LINE_CHARS - 1] + "…" for ln in lines] or [""]
    if len(lines) > 2:
        lines = [lines[0], (lines[1] + " " + " ".join(lines[2:]))[: LINE_CHARS - 1] + "…"]
    return lines


def svg(definition: dict[str, Any], run: Path | None = None, title: str = "state machine") -> str:
    """The SVG markup of the graph (every name escaped), the path of ``run`` highlighted."""
    placed, back = layout(definition)
    if not placed:
        return '<p class="muted">The definition has no states.</p>'
    state_defs = definition.get("States") or {}
    widest = max(pos for _, pos in placed.values()) + 1
    deepest = max(layer for layer, _ in placed.values()) + 1
    lane = 50 if back else 0  # room on each side for the edges that go back up
    width = MARGIN * 2 + widest * BOX_W + (widest - 1) * GAP_X + 2 * lane
    height = MARGIN * 2 + deepest * BOX_H + (deepest - 1) * GAP_Y

    def box(name):
        layer, pos = placed[name]
        count = sum(1 for lyr, _ in placed.values() if lyr == layer)
        offset = (widest - count) * (BOX_W + GAP_X) / 2  # centre the layer
        return MARGIN + lane + offset + pos * (BOX_W + GAP_X), MARGIN + layer * (BOX_H + GAP_Y)

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="graph" role="img" viewBox="0 0 {width:.0f} {height:.0f}" '
        f'width="{width:.0f}" height="{height:.0f}" aria-label="{escape(title)}">',
        "<defs>",
        *(f'<marker id="arrow-{k}" viewBox="0 0 10 10" refX="9" refY="5" markerUnits="userSpaceOnUse" markerWidth="10" markerHeight="10" '
          f'orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" class="arrow-{k}"/></marker>'
          for k in ("plain", "taken", "catch")),
        "</defs>",
    ]
    for e in edges(definition):
        if e.target not in placed:
            continue
        sx, sy = box(e.source)
        tx, ty = box(e.target)
        is_taken = run is not None and (e.source, e.target) in run.taken
        cls = ["edge", e.kind] + (["taken"] if is_taken else [])
        marker = "taken" if is_taken else ("catch" if e.kind == "catch" else "plain")
        if e in back or placed[e.target][0] <= placed[e.source][0]:
            # up the nearer side, outside the boxes: from the source's side to the target's same side
            left = sx + BOX_W / 2 < width / 2
            x1, y1 = (sx if left else sx + BOX_W), sy + BOX_H / 2
            x2, y2 = (tx if left else tx + BOX_W), ty + BOX_H / 2
            bend = (MARGIN / 2 if left else width - MARGIN / 2) if lane else (min(x1, x2) - 40 if left else max(x1, x2) + 40)
            d = f"M{x1:.0f},{y1:.0f} C{bend:.0f},{y1:.0f} {bend:.0f},{y2:.0f} {x2:.0f},{y2:.0f}"
        else:
            x1, y1 = sx + BOX_W / 2, sy + BOX_H
            x2, y2 = tx + BOX_W / 2, ty
            mid = (y1 + y2) / 2
            d = f"M{x1:.0f},{y1:.0f} C{x1:.0f},{mid:.0f} {x2:.0f},{mid:.0f} {x2:.0f},{y2:.0f}"
        label = f"{e.source} → {e.target} ({e.kind})"
        if is_taken:
            label += f", taken {run.taken[(e.source, e.target)]}×"
        parts.append(f'<path class="{" ".join(cls)}" d="{d}" marker-end="url(#arrow-{marker})">'
                     f"<title>{escape(label)}</title></path>")
    for name, (layer, pos) in placed.items():
        x, y = box(name)
        state = state_defs.get(name) if isinstance(state_defs.get(name), dict) else {}
        kind = str(state.get("Type", "?"))
        status = run.states[name].status if run is not None and name in run.states else "unvisited"
        if run is None:
            status = "plain"
        badges = []
        if run is not None and name in run.states:
            r = run.states[name]
            if r.visits > 1:
                badges.append(f"{r.visits} visits")
            if r.retries:
                badges.append(f"retried ×{r.retries}")
            if r.caught:
                badges.append("caught")
            if r.failed:
                badges.append("failed")
        lines = _lines(name)
        tip = f"{name} ({kind}): {status}" + (f"; {', '.join(badges)}" if badges else "")
        parts.append(f'<g class="state {escape(status)}" data-state="{escape(name)}" data-status="{escape(status)}">'
                     f"<title>{escape(tip)}</title>")
        rx = 22 if kind == "Choice" else 6
        parts.append(f'<rect x="{x:.0f}" y="{y:.0f}" width="{BOX_W}" height="{BOX_H}" rx="{rx}"/>')
        top = y + (BOX_H - 14 * len(lines) - 10) / 2 + 12
        for i, line in enumerate(lines):
            parts.append(f'<text x="{x + BOX_W / 2:.0f}" y="{top + i * 14:.0f}" class="name">{escape(line)}</text>')
        meta = kind + (" · " + " · ".join(badges) if badges else "")
        parts.append(f'<text x="{x + BOX_W / 2:.0f}" y="{top + len(lines) * 14:.0f}" class="meta">{escape(meta)}</text>')
        parts.append("</g>")
    parts.append("</svg>")
    return "".join(parts)
