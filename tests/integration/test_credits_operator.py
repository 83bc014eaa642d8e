"""The operator's credit watch: moto's CloudWatch series become profile status, conditions and Events."""

import urllib.request

import pytest
from tests.integration.moto_server import aligned_now, seed
from tests.support import profile_body, wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.aws]


def credits_of(kube, name):
    return ((kube.profile(name) or {}).get("status") or {}).get("credits")


def watched(name, file_system_id):
    return profile_body(name, "cached", creditWatch={"fileSystemId": file_system_id, "windowHours": 3})


def test_forecasts_reach_status_conditions_events_and_metrics(kube, operator, moto_server, unique):
    ids = seed(moto_server, aligned_now())
    names = {state: f"credits-{state}-{unique}" for state in ("draining", "trap", "healthy")}
    for state, name in names.items():
        kube.apply_profile(watched(name, ids[state]))

    draining = wait_for(lambda: (c := credits_of(kube, names["draining"])) and c["state"] == "Draining" and c,
                        timeout=90, what="a Draining forecast")
    assert draining["fileSystemId"] == ids["draining"] and draining["throughputMode"] == "bursting"
    assert draining["sizeGib"] == pytest.approx(20)
    assert draining["slopeBytesPerSecond"] == pytest.approx(-96 * 1024**2, rel=0.02)
    assert 0 < draining["timeToEmptySeconds"] < 4 * 3600
    assert draining["message"].startswith("balance 1.2 TiB falling 96 MiB/s: empty in")
    condition = wait_for(lambda: kube.condition(names["draining"], "CreditsDraining"), what="CreditsDraining")
    assert (condition["status"], condition["reason"]) == ("True", "Draining")

    trap = wait_for(lambda: (c := credits_of(kube, names["trap"])) and c["state"] == "Trap" and c,
                    timeout=90, what="a Trap forecast")
    assert trap["opsBudgetPerSecond"]["writesOrMetadata"] == pytest.approx(256)
    healthy = wait_for(lambda: (c := credits_of(kube, names["healthy"])) and c["state"] == "Healthy" and c,
                       timeout=90, what="a Healthy forecast")
    assert "timeToEmptySeconds" not in healthy  # not draining: no time to empty
    assert kube.condition(names["healthy"], "CreditsDraining")["status"] == "False"

    events = wait_for(lambda: [e for e in kube.core.list_event_for_all_namespaces(
        field_selector=f"involvedObject.name={names['trap']}").items if e.reason == "CreditsTrap"],
        what="a CreditsTrap event")
    assert ids["trap"] in events[0].message and events[0].type == "Warning"

    body = urllib.request.urlopen(f"http://127.0.0.1:{operator.metrics_port}/metrics", timeout=10).read().decode()
    assert f'mountwarden_credit_balance_bytes{{file_system_id="{ids["healthy"]}",profile="{names["healthy"]}"}}' in body
    assert f'mountwarden_credit_slope_bytes_per_second{{file_system_id="{ids["draining"]}"' in body


def test_unknown_file_system_says_so_and_nothing_crashes(kube, operator, moto_server, unique):
    name = f"credits-unknown-{unique}"
    kube.apply_profile(watched(name, "fs-0000000000000dead"))
    condition = wait_for(lambda: (c := kube.condition(name, "CreditsDraining")) and c["status"] == "Unknown" and c,
                         timeout=90, what="an Unknown credit condition")
    assert condition["reason"] == "Unknown" and "FileSystemNotFound" in condition["message"]
    assert "fs-0000000000000dead" in credits_of(kube, name)["message"]
    operator.assert_running()
