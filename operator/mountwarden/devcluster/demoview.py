"""What `make run` shows of the operator's work, printed again only when something a person reads changes.

``view_of`` turns the objects (as `kubectl get -o json` returns them) into a ``DemoView``: what the view says and
nothing else. What changes on its own (ages, timestamps, counters, an Event's count) is left out, so two views are
equal exactly when a person would read the same thing. ``watch`` polls, compares with the last view, and shows a new
one in place (rich's Live display) on a terminal, or appends one block per change (CI logs, pipes).

Each profile's worst finding is the first of its status' worstOffenders, which the operator ranks by impact
(mountwarden.core.impact).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass
from datetime import datetime

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.rule import Rule
from rich.table import Table
from rich.text import Text

#: The object lists the view is computed from, by the name `kubectl get` knows them by; events are the operator's.
KINDS = ("storageprofiles", "storageclasses", "nodemountreports", "events", "policyreports", "clusterpolicyreports")
#: `kubectl get` arguments that narrow a kind to what the view shows.
SELECTORS = {"storageclasses": ("-l", "mountwarden.io/profile"), "events": ("--field-selector", "source=kopf")}
#: How many of the operator's Events the view lists (the latest).
EVENTS_SHOWN = 12

Objects = Mapping[str, list[dict]]


@dataclass(frozen=True)
class ProfileRow:
    name: str
    policy: str
    storage_class: str
    version: str
    ready: str
    compliant: str
    credits: str
    #: The Compliant condition's summary (counts), without the worst offenders it goes on to name.
    compliance: str
    #: The first of status.compliance.worstOffenders: (reason, pod, message); empty when none.
    worst: tuple[str, str, str] | tuple[()]
    credits_message: str


@dataclass(frozen=True)
class ClassRow:
    name: str
    superseded_by: str
    mount_options: str


@dataclass(frozen=True)
class MountRow:
    node: str
    volume: str
    source: str
    superblock: str
    options: str


@dataclass(frozen=True)
class EventRow:
    kind: str
    name: str
    type: str
    reason: str
    message: str


@dataclass(frozen=True)
class ReportRow:
    #: The namespace, or "(cluster)" for the ClusterPolicyReport.
    scope: str
    summary: str
    #: Each rule (a finding's reason) and how many results have it.
    rules: str


@dataclass(frozen=True)
class DemoView:
    profiles: tuple[ProfileRow, ...]
    classes: tuple[ClassRow, ...]
    mounts: tuple[MountRow, ...]
    sqlite: tuple[str, ...]
    events: tuple[EventRow, ...]
    reports: tuple[ReportRow, ...]
    #: What could not be read (a kind's CRD not installed yet, the API server gone), as kubectl said it.
    problems: tuple[str, ...] = ()

    def to_json(self) -> dict:
        return asdict(self)


def _condition(obj: dict, kind: str) -> dict:
    conditions = (obj.get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c.get("type") == kind), {})


def _profile(obj: dict) -> ProfileRow:
    status = obj.get("status") or {}
    credits = status.get("credits") or {}
    compliant = _condition(obj, "Compliant")
    offenders = (status.get("compliance") or {}).get("worstOffenders") or []
    worst = (offenders[0].get("reason", ""), offenders[0].get("pod", ""), offenders[0].get("message", "")) \
        if offenders else ()
    return ProfileRow(
        name=obj["metadata"]["name"], policy=str((obj.get("spec") or {}).get("cachePolicy") or ""),
        storage_class=str(status.get("storageClassName") or ""), version=str(status.get("version") or ""),
        ready=str(_condition(obj, "Ready").get("reason") or ""), compliant=str(compliant.get("reason") or ""),
        credits=str(credits.get("state") or ""),
        compliance=str(compliant.get("message") or "").split("; ")[0], worst=worst,
        credits_message=str(credits.get("message") or ""))


def _class(obj: dict) -> ClassRow:
    annotations = obj["metadata"].get("annotations") or {}
    return ClassRow(obj["metadata"]["name"], annotations.get("mountwarden.io/superseded-by", ""),
                    ",".join(obj.get("mountOptions") or []))


def _mounts(report: dict) -> Iterator[MountRow]:
    spec = report.get("spec") or {}
    node = spec.get("nodeName") or report["metadata"]["name"]
    for volume in spec.get("volumes") or []:
        source = f"{volume.get('server') or ''}:{volume.get('export') or ''}" if volume.get("server") \
            else volume.get("source", "")
        yield MountRow(node, volume.get("volumeName", ""), source, volume.get("superblock", ""),
                       ",".join(volume.get("effectiveOptions") or []))


def _sqlite(report: dict) -> Iterator[str]:
    spec = report.get("spec") or {}
    node = spec.get("nodeName") or report["metadata"]["name"]
    for use in spec.get("sqlite") or []:
        yield f"{node}: {use.get('path', '')} ({use.get('mode', '')}, {use.get('severity', '')})"


def _events(events: Iterable[dict]) -> tuple[EventRow, ...]:
    # Ordered by creation, as `kubectl get events --sort-by=.metadata.creationTimestamp`; the time is not shown.
    ordered = sorted(events, key=lambda e: (e["metadata"].get("creationTimestamp") or "", e["metadata"]["name"]))
    rows = [EventRow(str((e.get("involvedObject") or {}).get("kind", "")),
                     str((e.get("involvedObject") or {}).get("name", "")), str(e.get("type", "")),
                     str(e.get("reason", "")), str(e.get("message", ""))) for e in ordered]
    return tuple(rows[-EVENTS_SHOWN:])


def _report(obj: dict) -> ReportRow:
    summary = obj.get("summary") or {}
    said = ", ".join(f"{outcome} {summary[outcome]}" for outcome in ("fail", "warn", "error", "pass", "skip")
                     if summary.get(outcome))
    rules = Counter(str(result.get("rule", "")) for result in obj.get("results") or [])
    return ReportRow(obj["metadata"].get("namespace") or "(cluster)", said or "no results",
                     ", ".join(f"{rule} x{count}" if count > 1 else rule for rule, count in sorted(rules.items())))


def view_of(objects: Objects, problems: Iterable[str] = ()) -> DemoView:
    """What a person reads in ``objects``: every value that changes on its own (ages, times, counters) left out."""
    def of(kind: str) -> list[dict]:
        return sorted(objects.get(kind) or [], key=lambda o: (o["metadata"].get("namespace") or "",
                                                             o["metadata"]["name"]))
    return DemoView(
        profiles=tuple(_profile(o) for o in of("storageprofiles")),
        classes=tuple(_class(o) for o in of("storageclasses")),
        mounts=tuple(row for report in of("nodemountreports") for row in _mounts(report)),
        sqlite=tuple(line for report in of("nodemountreports") for line in _sqlite(report)),
        events=_events(objects.get("events") or []),
        reports=tuple(_report(o) for o in of("clusterpolicyreports") + of("policyreports")),
        problems=tuple(problems),
    )


def _table(title: str, columns: Iterable[str], rows: Iterable[Iterable[str]], *, compact: bool) -> Group:
    # The title on a line of its own: a table's title wraps at the table's width.
    table = Table(box=None, pad_edge=False, expand=False)
    for column in columns:
        table.add_column(column, no_wrap=compact, overflow="ellipsis" if compact else "fold")
    for row in rows:
        table.add_row(*(Text(value) for value in row))
    return Group(Text(title, style="bold"), table)


def render(view: DemoView, *, compact: bool = False) -> RenderableType:
    """The view as rich renderables, in the order a person reads them: profiles, classes, the node, what was said.

    ``compact``: one line per row and message, cut at the width (a view drawn in place cannot be scrolled back).
    """
    def line(text: str) -> Text:
        return Text(text, no_wrap=compact, overflow="ellipsis" if compact else "fold")

    parts: list[RenderableType] = [
        _table("StorageProfiles (a consumer pattern each) and the StorageClass carrying their options",
               ("PROFILE", "POLICY", "CLASS", "VERSION", "READY", "COMPLIANT", "CREDITS"),
               ((p.name, p.policy, p.storage_class, p.version, p.ready, p.compliant, p.credits)
                for p in view.profiles), compact=compact),
        Text(""),
        _table("Their versioned StorageClasses", ("CLASS", "SUPERSEDED-BY", "MOUNT-OPTIONS"),
               ((c.name, c.superseded_by, c.mount_options) for c in view.classes), compact=compact),
        Text(""),
        Text("Compliance, each profile's worst finding (ranked by impact) and credits", style="bold"),
    ]
    for profile in view.profiles:
        parts.append(line(f"  {profile.name}: {profile.compliance or 'not checked yet'}"))
        if profile.worst:
            reason, pod, message = profile.worst
            parts.append(line(f"    worst: {reason} ({pod}): {message}"))
        if profile.credits_message:
            parts.append(line(f"    credits: {profile.credits_message}"))
    if view.mounts or view.sqlite:
        parts += [Text(""), _table("What the nodes really mounted, as their agents report it (NodeMountReports)",
                                   ("NODE", "VOLUME", "SOURCE", "SUPERBLOCK", "OPTIONS IN EFFECT"),
                                   ((m.node, m.volume, m.source, m.superblock, m.options) for m in view.mounts),
                                   compact=compact)]
        parts += [line(f"  SQLite: {use}") for use in view.sqlite]
    parts += [Text(""), _table(f"What the operator said (its latest {EVENTS_SHOWN} Events, oldest first)",
                               ("KIND", "NAME", "TYPE", "REASON", "MESSAGE"),
                               ((e.kind, e.name, e.type, e.reason, e.message) for e in view.events),
                               compact=compact)]
    parts += [Text(""), _table("Findings as PolicyReports (one per namespace, one cluster-wide)",
                               ("SCOPE", "RESULTS", "RULES"), ((r.scope, r.summary, r.rules) for r in view.reports),
                               compact=compact)
              if view.reports else Text("Findings as PolicyReports: none yet", style="bold")]
    parts += [Text(f"could not read {problem}", style="yellow") for problem in view.problems]
    return Group(*parts)


def changes(views: Iterable[DemoView]) -> Iterator[DemoView]:
    """The views that differ from the one before: what is worth showing again."""
    last: DemoView | None = None
    for view in views:
        if view != last:
            yield view
            last = view


def watch(fetch: Callable[[], DemoView], console: Console, *, interval: float,
          keep_going: Callable[[], bool], sleep: Callable[[float], None], now: Callable[[], datetime]) -> int:
    """Show each view that changed until ``keep_going`` says stop; returns how many were shown.

    On a terminal the view is redrawn in place, one line per row (a drawing in place cannot be scrolled back);
    otherwise each change is appended in full as one block under a rule with the time it was seen (a log reads as
    a history of changes).
    """
    def views() -> Iterator[DemoView]:
        while True:
            yield fetch()
            sleep(interval)
            if not keep_going():
                return

    shown = 0
    if console.is_terminal:
        with Live(console=console, auto_refresh=False, redirect_stdout=False, redirect_stderr=False) as live:
            for view in changes(views()):
                live.update(Group(render(view, compact=True), Text(f"changed at {now():%H:%M:%S}; Ctrl-C stops", style="dim")),
                            refresh=True)
                shown += 1
        return shown
    for view in changes(views()):
        console.print(Rule(f"{now():%H:%M:%S}", align="left"))
        console.print(render(view))
        shown += 1
    return shown


def fetch_objects(get: Callable[[str], tuple[bool, str]]) -> DemoView:
    """The view, from ``get(kind) -> (ok, kubectl's output)`` for each of KINDS (its JSON list, or its error)."""
    objects: dict[str, list[dict]] = {}
    problems = []
    for kind in KINDS:
        ok, output = get(kind)
        if ok:
            objects[kind] = json.loads(output).get("items") or []
        else:
            problems.append(f"{kind}: {output.strip().splitlines()[-1] if output.strip() else 'no answer'}")
    return view_of(objects, problems)
