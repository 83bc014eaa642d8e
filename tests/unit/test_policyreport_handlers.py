"""The PolicyReports' handlers: registered only with --policy-reports, and keeping the reports an earlier run
left until every profile has been checked again (the intervals come from OperatorConfig)."""

from datetime import timedelta

import kopf

from mountwarden.handlers.config import OperatorConfig
from mountwarden.handlers.policyreports import grace
from mountwarden.handlers.runner import register_handlers


def handler_names(registry: kopf.OperatorRegistry) -> set[str]:
    return {handler.fn.__name__ for handlers in (registry._activities, registry._watching)
            for handler in handlers.get_all_handlers()}


def test_the_report_handlers_are_registered_only_with_policy_reports():
    without = handler_names(register_handlers(OperatorConfig()))
    with_reports = handler_names(register_handlers(OperatorConfig(policy_reports=True)))
    assert with_reports - without == {"start_policy_reports", "follow_profile"}


def test_an_earlier_runs_reports_wait_two_of_the_longest_check_intervals():
    assert grace(OperatorConfig(compliance_interval=30, credit_interval=300)) == timedelta(minutes=10)
    assert grace(OperatorConfig(compliance_interval=900, credit_interval=60)) == timedelta(minutes=30)
