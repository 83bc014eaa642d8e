"""The operator's shared credit fetch: one fetch per region and interval, backing off on account problems."""

import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta

from mountwarden.adapters.aws import CreditWatchError
from mountwarden.core.credits import CreditSeries, CreditWatchProblem, ProblemReason, ThroughputMode
from mountwarden.handlers.credits import CreditFetcher, CreditWatchTarget, watched_file_system

INTERVAL = timedelta(minutes=5)
T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def target(fs_id, region="us-east-1"):
    return CreditWatchTarget(fs_id, region, timedelta(hours=24))


def series(fs_id):
    return CreditSeries(fs_id, ThroughputMode.BURSTING, 20 * 1024**3, None, 300, {})


class ScriptedFetch:
    """Answers each fetch with what `answer(fs_id)` says, and records which ids each fetch asked for."""

    def __init__(self, answer):
        self.answer = answer
        self.asked: list[list[str]] = []

    def __call__(self, clients, ids, window, now):
        self.asked.append(list(ids))
        return {fs_id: self.answer(fs_id) for fs_id in ids}


def fetcher(answer):
    fetch = ScriptedFetch(answer)
    return CreditFetcher(INTERVAL, clients_for=lambda region: object(), fetch=fetch), fetch


def test_one_fetch_serves_every_profile_of_a_region_in_an_interval():
    credits, fetch = fetcher(series)
    targets = [target("fs-aaaaaaaa"), target("fs-bbbbbbbb")]
    assert isinstance(credits.result(targets[0], targets, T0), CreditSeries)
    assert isinstance(credits.result(targets[1], targets, T0 + timedelta(seconds=5)), CreditSeries)
    assert fetch.asked == [["fs-aaaaaaaa", "fs-bbbbbbbb"]]
    credits.result(targets[0], targets, T0 + INTERVAL)
    assert len(fetch.asked) == 2  # the next interval fetches again


def test_regions_are_fetched_apart():
    credits, fetch = fetcher(series)
    east, west = target("fs-aaaaaaaa"), target("fs-bbbbbbbb", "us-west-2")
    credits.result(east, [east, west], T0)
    credits.result(west, [east, west], T0)
    assert fetch.asked == [["fs-aaaaaaaa"], ["fs-bbbbbbbb"]]


def denied(fs_id):
    return CreditWatchProblem(fs_id, ProblemReason.ACCESS_DENIED, "AccessDenied: allow cloudwatch:GetMetricData")


def test_account_problems_back_off_exponentially_and_keep_the_message():
    credits, fetch = fetcher(denied)
    watched = target("fs-aaaaaaaa")
    first = credits.result(watched, [watched], T0)
    assert first.reason == ProblemReason.ACCESS_DENIED
    # Backing off: the next intervals answer from the last result without calling AWS.
    for minutes in (5, 9):
        assert credits.result(watched, [watched], T0 + timedelta(minutes=minutes)).reason == "AccessDenied"
    assert len(fetch.asked) == 1
    credits.result(watched, [watched], T0 + timedelta(minutes=10))  # 2 x 5 min after the first failure
    assert len(fetch.asked) == 2
    credits.result(watched, [watched], T0 + timedelta(minutes=29))  # now 4 x 5 min: not before 30
    assert len(fetch.asked) == 2
    credits.result(watched, [watched], T0 + timedelta(minutes=31))
    assert len(fetch.asked) == 3


def test_backoff_is_capped_at_an_hour_and_ends_on_success():
    answers = {"fs-aaaaaaaa": denied}
    credits, fetch = fetcher(lambda fs_id: answers["fs-aaaaaaaa"](fs_id))
    watched = target("fs-aaaaaaaa")
    now = T0
    for _ in range(12):  # long enough for the doubling to pass an hour
        credits.result(watched, [watched], now)
        now += timedelta(hours=1, seconds=1)
    assert len(fetch.asked) == 12
    answers["fs-aaaaaaaa"] = series
    assert isinstance(credits.result(watched, [watched], now), CreditSeries)
    assert isinstance(credits.result(watched, [watched], now + INTERVAL), CreditSeries)
    assert len(fetch.asked) == 14  # back to one fetch per interval


def test_an_unknown_file_system_does_not_back_off_the_others():
    def answer(fs_id):
        if fs_id == "fs-deadbeef":
            return CreditWatchProblem(fs_id, ProblemReason.FILE_SYSTEM_NOT_FOUND, "no such file system")
        return series(fs_id)

    credits, fetch = fetcher(answer)
    unknown, known = target("fs-deadbeef"), target("fs-aaaaaaaa")
    assert credits.result(unknown, [unknown], T0).reason == ProblemReason.FILE_SYSTEM_NOT_FOUND
    assert isinstance(credits.result(known, [unknown, known], T0 + timedelta(seconds=1)), CreditSeries)
    credits.result(unknown, [unknown, known], T0 + INTERVAL)
    assert len(fetch.asked) == 3  # a new target is fetched at once; no backoff


def test_a_new_profile_is_fetched_at_once_even_during_backoff():
    credits, fetch = fetcher(denied)
    first, second = target("fs-aaaaaaaa"), target("fs-bbbbbbbb")
    credits.result(first, [first], T0)
    assert credits.result(second, [first, second], T0 + timedelta(minutes=1)).reason == "AccessDenied"
    assert fetch.asked == [["fs-aaaaaaaa"], ["fs-aaaaaaaa", "fs-bbbbbbbb"]]


def test_no_region_at_all_is_a_problem_for_everyone_not_a_crash():
    def refuse(region):
        raise CreditWatchError(CreditWatchProblem(None, ProblemReason.UNAVAILABLE, "no AWS region: set AWS_REGION"))

    credits = CreditFetcher(INTERVAL, clients_for=refuse, fetch=ScriptedFetch(series))
    watched = target("fs-aaaaaaaa", "")
    problem = credits.result(watched, [watched], T0)
    assert problem.reason == ProblemReason.UNAVAILABLE and "AWS_REGION" in problem.message


def test_which_profiles_are_watched():
    efs = {"backend": {"provisioner": "efs.csi.aws.com", "parameters": {"fileSystemId": "fs-aaaaaaaa"}}}
    # Without windowHours (a spec the API server did not default, e.g. from an older CRD): two whole days.
    assert watched_file_system(efs) == CreditWatchTarget("fs-aaaaaaaa", "", timedelta(hours=48))
    other = {"backend": {"provisioner": "nfs.csi.k8s.io"}, "creditWatch": {"fileSystemId": "fs-bbbbbbbb",
                                                                          "region": "eu-west-1", "windowHours": 6}}
    assert watched_file_system(other) == CreditWatchTarget("fs-bbbbbbbb", "eu-west-1", timedelta(hours=6))
    assert watched_file_system({"backend": {"provisioner": "nfs.csi.k8s.io"}}) is None


def test_the_operator_loads_boto3_only_once_a_profile_watches_credits():
    probe = (
        "import sys\n"
        "from datetime import UTC, datetime, timedelta\n"
        "from mountwarden.handlers.config import OperatorConfig\n"
        "from mountwarden.handlers.credits import CreditFetcher, CreditWatchTarget\n"
        "from mountwarden.handlers.runner import register_handlers\n"
        "register_handlers(OperatorConfig())\n"
        "fetcher = CreditFetcher(timedelta(minutes=5))\n"
        "print('boto3' in sys.modules, 'botocore' in sys.modules)\n"
        "target = CreditWatchTarget('fs-0123456789abcdef0', 'us-east-1', timedelta(hours=48))\n"
        "found = fetcher.result(target, [target], datetime.now(UTC))\n"
        "print('boto3' in sys.modules, type(found).__name__)\n"
    )
    # No credentials and no endpoint: the fetch fails, by name, and only after loading boto3.
    env = {"PATH": os.environ["PATH"], "AWS_CONFIG_FILE": "/dev/null", "AWS_SHARED_CREDENTIALS_FILE": "/dev/null",
           "AWS_EC2_METADATA_DISABLED": "true"}
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split("\n")[:2] == ["False False", "True CreditWatchProblem"], done.stdout
