"""`make run`'s view (mountwarden.devcluster.demoview): shown again only when what a person reads changes."""

import copy
import io
import json
import re
from datetime import UTC, datetime, timedelta

from rich.console import Console

from mountwarden.core.compliance import Consumer, Contract, ProfileCompliance, assess
from mountwarden.core.node.report import NodeReport, ReportedMount
from mountwarden.core.policy import resolve_policy
from mountwarden.core.policyreport import compliance_findings, report_body
from mountwarden.devcluster.demoview import changes, fetch_objects, render, view_of, watch

NOW = datetime(2026, 12, 2, 8, 0, tzinfo=UTC)
#: The upload service's volume in `make run`: the old shared mount's flags (the import's), as the kernel prints them.
IMPORT_FLAGS = ("rw", "sync", "vers=4.1", "rsize=1048576", "wsize=1048576", "namlen=255", "acregmin=0", "acregmax=0",
                "acdirmin=0", "acdirmax=0", "hard", "lookupcache=none", "proto=tcp", "timeo=600", "retrans=2",
                "sec=sys", "local_lock=none")


def _uploads_compliance() -> tuple[ProfileCompliance, list]:
    """The upload-staging profile's check of the demo's uploads pod, by the operator's own core."""
    policy = resolve_policy(provisioner="efs.csi.aws.com", cache_policy="staging", required_options=("hard", "cto"),
                            forbidden_options=("nocto",))
    report = NodeReport("lab-node-0", NOW, (ReportedMount(
        "uid-uploads", "demo-uploads", "/var/lib/kubelet/pods/uid-uploads/volumes/kubernetes.io~nfs/demo-uploads",
        "0:61", IMPORT_FLAGS, server="127.0.0.1"),))
    verdict = assess(Consumer("uid-uploads", "web", "uploads", "lab-node-0", "demo-uploads"),
                     Contract(policy.options, ("hard", "cto"), ("nocto",)), {"lab-node-0": report}, now=NOW,
                     stale_after=timedelta(minutes=15))
    return ProfileCompliance.of([verdict]), compliance_findings("upload-staging", [verdict])


def _objects() -> dict[str, list[dict]]:
    compliance, findings = _uploads_compliance()
    status, reason, message = compliance.condition()
    profile = {
        "metadata": {"name": "upload-staging", "creationTimestamp": "2026-12-02T07:55:00Z", "resourceVersion": "41"},
        "spec": {"cachePolicy": "staging"},
        "status": {"storageClassName": "upload-staging-v1", "version": 1,
                   "conditions": [{"type": "Ready", "status": "True", "reason": "Ready",
                                   "lastTransitionTime": "2026-12-02T07:55:02Z"},
                                  {"type": "Compliant", "status": status, "reason": reason, "message": message,
                                   "lastTransitionTime": "2026-12-02T07:56:00Z"}],
                   "compliance": {**compliance.to_status(), "checkedAt": "2026-12-02T07:59:57Z"},
                   "credits": {"state": "Healthy", "message": "fs-0123456789abcdef0: 2.1 TiB of credits",
                               "checkedAt": "2026-12-02T07:59:00Z"}},
    }
    storage_class = {"metadata": {"name": "upload-staging-v1", "labels": {"mountwarden.io/profile": "upload-staging"},
                                  "creationTimestamp": "2026-12-02T07:55:01Z"},
                     "mountOptions": ["vers=4.1", "hard", "acregmin=0", "acregmax=0", "lookupcache=positive", "cto"]}
    node_report = {"metadata": {"name": "lab-node-0"},
                   "spec": {"nodeName": "lab-node-0", "scanTime": "2026-12-02T07:59:58Z", "volumes": [
                       {"volumeName": "demo-uploads", "server": "127.0.0.1", "export": "/srv/export2",
                        "superblock": "0:61", "effectiveOptions": list(IMPORT_FLAGS),
                        "operations": {"WRITE": {"ops": 12}}}]}}
    event = {"metadata": {"name": "uploads.1", "namespace": "web", "creationTimestamp": "2026-12-02T07:58:00Z"},
             "involvedObject": {"kind": "Pod", "name": "uploads"}, "type": "Warning", "reason": "MountPolicyDrift",
             "message": findings[0].message, "count": 1, "lastTimestamp": "2026-12-02T07:58:00Z",
             "source": {"component": "kopf"}}
    first_seen = {finding.identity: NOW for finding in findings}
    report = report_body("web", findings, first_seen)
    report["metadata"]["creationTimestamp"] = "2026-12-02T07:58:01Z"
    return {"storageprofiles": [profile], "storageclasses": [storage_class], "nodemountreports": [node_report],
            "events": [event], "policyreports": [report], "clusterpolicyreports": []}


def _text(view, *, width: int = 400, compact: bool = False) -> str:
    console = Console(file=io.StringIO(), width=width, record=True)
    console.print(render(view, compact=compact))
    return console.export_text()


def test_the_view_says_each_profiles_worst_finding_by_impact_and_what_the_node_mounted():
    view = view_of(_objects())
    [profile] = view.profiles
    assert (profile.name, profile.policy, profile.storage_class, profile.ready, profile.compliant) == \
        ("upload-staging", "staging", "upload-staging-v1", "Ready", "Drifted")
    assert profile.compliance == "0 of 1 pod volumes compliant, 1 drifted, 0 unknown"
    reason, pod, message = profile.worst
    # The import's sync comes first, not the directory cache the checks emit before it.
    assert (reason, pod) == ("UndeclaredOption", "web/uploads")
    assert message.startswith("web/uploads on lab-node-0: sync is in effect")
    text = _text(view)
    assert "worst: UndeclaredOption (web/uploads): web/uploads on lab-node-0: sync is in effect" in text
    assert "127.0.0.1:/srv/export2" in text and "lookupcache=none" in text
    assert "MountPolicyDrift" in text
    [report] = view.reports
    # sync, acdir*=0 and lookupcache=none fail; resvport (EFS recommends noresvport) warns.
    assert report.scope == "web" and report.summary == "fail 3, warn 1"
    assert report.rules == "OptionMismatch x2, UndeclaredOption x2"
    # Nothing of what changes on its own is in the view.
    for volatile in ("2026-12-02", "checkedAt", "07:5"):
        assert volatile not in text
    assert not re.search(r"\bAGE\b", text)
    assert json.loads(json.dumps(view.to_json()))["profiles"][0]["worst"][0] == "UndeclaredOption"


def test_ages_timestamps_and_counters_do_not_change_the_view_and_what_a_person_reads_does():
    before = _objects()
    later = copy.deepcopy(before)
    profile = later["storageprofiles"][0]
    profile["metadata"]["resourceVersion"] = "97"
    profile["status"]["compliance"]["checkedAt"] = "2026-12-02T08:10:00Z"
    profile["status"]["credits"]["checkedAt"] = "2026-12-02T08:10:00Z"
    later["nodemountreports"][0]["spec"]["scanTime"] = "2026-12-02T08:10:00Z"
    later["nodemountreports"][0]["spec"]["volumes"][0]["operations"]["WRITE"]["ops"] = 5000
    later["events"][0].update(count=7, lastTimestamp="2026-12-02T08:09:00Z")
    later["policyreports"][0]["metadata"]["resourceVersion"] = "120"
    for result in later["policyreports"][0]["results"]:
        result["timestamp"] = {"seconds": result["timestamp"]["seconds"] + 600, "nanos": 0}
    assert later != before and view_of(later) == view_of(before)

    fixed = copy.deepcopy(later)
    fixed["storageprofiles"][0]["status"]["conditions"][1].update(
        status="True", reason="Compliant", message="1 of 1 pod volumes compliant, 0 drifted, 0 unknown")
    fixed["storageprofiles"][0]["status"]["compliance"]["worstOffenders"] = []
    assert view_of(fixed) != view_of(later)
    assert view_of(fixed).profiles[0].worst == ()
    assert list(changes([view_of(before), view_of(later), view_of(fixed), view_of(fixed), view_of(before)])) == \
        [view_of(before), view_of(fixed), view_of(before)]


def test_drawn_in_place_each_row_and_message_keeps_to_one_line():
    view = view_of(_objects())
    full, compact = _text(view, width=100), _text(view, width=100, compact=True)
    [worst] = [line for line in compact.splitlines() if "worst:" in line]
    assert worst.startswith("    worst: UndeclaredOption (web/uploads): web/uploads on lab-node-0: sync is in effect")
    assert worst.rstrip().endswith("…") and len(worst.rstrip()) == 100
    # The Event's long message: one line here, several when appended to a log.
    assert len([line for line in compact.splitlines() if line.strip()]) < \
        len([line for line in full.splitlines() if line.strip()]) - 10


def _run_watch(console: Console, views: list) -> int:
    remaining = list(views)
    looks = []

    def fetch():
        looks.append(1)
        return remaining.pop(0)

    shown = watch(fetch, console, interval=3.0, keep_going=lambda: bool(remaining), sleep=lambda _: None,
                  now=lambda: datetime(2026, 12, 2, 8, 0, 0))
    assert len(looks) == len(views)
    return shown


def test_piped_output_is_one_block_per_change():
    same, changed = view_of(_objects()), view_of({**_objects(), "events": []})
    out = io.StringIO()
    console = Console(file=out, width=200, force_terminal=False)
    assert _run_watch(console, [same, same, same, changed, changed]) == 2
    text = out.getvalue()
    assert text.count("08:00:00") == 2 and text.count("StorageProfiles (a consumer pattern each)") == 2
    assert text.count("MountPolicyDrift") == 1  # the second block has no Events


def test_on_a_terminal_the_view_is_redrawn_in_place():
    same, changed = view_of(_objects()), view_of({**_objects(), "events": []})
    out = io.StringIO()
    console = Console(file=out, width=200, force_terminal=True, height=80)
    assert _run_watch(console, [same, same, changed]) == 2
    text = out.getvalue()
    # Live moves the cursor up over the last drawing instead of printing below it (ESC [ n A).
    assert "\x1b[2K" in text and "\x1b[1A" in text
    assert "changed at 08:00:00" in text


def test_what_cannot_be_read_is_part_of_the_view():
    objects = _objects()

    def get(kind: str) -> tuple[bool, str]:
        if kind == "policyreports":
            return False, 'error: the server doesn\'t have a resource type "policyreports"\n'
        return True, json.dumps({"items": objects[kind]})

    view = fetch_objects(get)
    assert view.profiles == view_of(objects).profiles
    assert view.problems == ('policyreports: error: the server doesn\'t have a resource type "policyreports"',)
    assert 'could not read policyreports' in _text(view)
