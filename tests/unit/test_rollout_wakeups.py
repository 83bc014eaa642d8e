"""What wakes a profile's rollout daemon when no event will: a PodDisruptionBudget that refused an eviction."""

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
