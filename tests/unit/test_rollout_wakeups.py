"""What wakes a profile's rollout daemon when no event will: a PodDisruptionBudget that refused an eviction, and
an event that arrived while a tick ran, before the tick had routed such events to its profile."""

from mountwarden.handlers.rollouts import EVICTION_RETRY_SECONDS, RolloutWakeups

SAFETY_NET = 3600.0


def rollout(reason: str, phase: str = "Waiting") -> dict:
    return {"phase": phase, "workloads": [{"kind": "Deployment", "namespace": "shop", "name": "app",
                                           "state": "Waiting", "reason": reason}]}


def test_a_refusing_budget_is_tried_again_as_kubectl_drain_does():
    wakeups = RolloutWakeups()
    wakeups.follow("p", rollout("DisruptionBudget"))
    assert wakeups.next_tick_within("p", SAFETY_NET) == EVICTION_RETRY_SECONDS
    assert wakeups.next_tick_within("other", SAFETY_NET) == SAFETY_NET


def test_once_the_budget_allows_only_events_and_the_safety_net_wake_it():
    wakeups = RolloutWakeups()
    wakeups.follow("p", rollout("DisruptionBudget"))
    wakeups.follow("p", rollout("WaitingForReplicas", phase="Progressing"))
    assert wakeups.next_tick_within("p", SAFETY_NET) == SAFETY_NET


def test_an_eviction_refused_since_the_world_was_read_is_tried_again_soon():
    wakeups = RolloutWakeups()
    wakeups.follow("p", rollout("Remounting", phase="Progressing"), evictions_refused=True)
    assert wakeups.next_tick_within("p", SAFETY_NET) == EVICTION_RETRY_SECONDS
    wakeups.forget("p")
    assert wakeups.next_tick_within("p", SAFETY_NET) == SAFETY_NET


def test_a_safety_net_shorter_than_the_retry_is_kept():
    wakeups = RolloutWakeups()
    wakeups.follow("p", rollout("DisruptionBudget"))
    assert wakeups.next_tick_within("p", 1.0) == 1.0


def test_an_autoscaler_event_between_a_ticks_read_and_its_routes_wakes_the_profile_again():
    # The HPA disables itself after the tick listed it and before the tick wrote the line that routes the
    # Deployment's events to the profile (CI caught the rollout stuck at ScaledToZero behind that).
    wakeups = RolloutWakeups()
    wake = wakeups.event("p")
    wakeups.tick_starts("p")
    wakeups.wake_for_workload("Deployment", "shop", "app")
    assert not wake.is_set()  # nothing routes it to p yet
    wakeups.follow("p", rollout("ScaledToZero"))
    wakeups.tick_ended("p")
    assert wake.is_set()


def test_a_tick_with_no_event_for_its_routes_is_not_woken_again():
    wakeups = RolloutWakeups()
    wake = wakeups.event("p")
    wakeups.wake_for_workload("Deployment", "shop", "app")  # before the tick read anything: it sees this one
    wakeups.tick_starts("p")
    wakeups.wake_for_workload("Deployment", "shop", "other")
    wakeups.wake_for_classes_threadsafe({"someone-elses-v1"})
    wakeups.wake_verifying()  # p does not verify replicas while it awaits approval
    wakeups.follow("p", rollout("AwaitingApproval", phase="AwaitingApproval"))
    wakeups.lineage("p", ["p-v1", "p-v2"])
    wakeups.tick_ended("p")
    assert not wake.is_set()


def test_a_volume_or_report_that_came_while_the_tick_ran_wakes_it_again():
    wakeups = RolloutWakeups()
    wake = wakeups.event("p")
    wakeups.tick_starts("p")
    wakeups.wake_for_classes_threadsafe({"p-v2"})
    wakeups.lineage("p", ["p-v1", "p-v2"])
    wakeups.tick_ended("p")
    assert wake.is_set()

    wake.clear()
    wakeups.tick_starts("p")
    wakeups.wake_verifying()
    wakeups.follow("p", rollout("WaitingForReplicas", phase="Progressing"))
    wakeups.tick_ended("p")
    assert wake.is_set()


def test_what_is_remembered_for_ticks_is_forgotten_once_none_runs():
    wakeups = RolloutWakeups()
    wakeups.tick_starts("p")
    wakeups.wake_for_workload("Deployment", "shop", "app")
    wakeups.wake_for_classes_threadsafe({"p-v2"})
    wakeups.tick_ended("p")
    assert not wakeups._recent_workloads and not wakeups._recent_classes
    wakeups.wake_for_workload("Deployment", "shop", "app")  # no tick runs: nothing to remember
    assert not wakeups._recent_workloads
