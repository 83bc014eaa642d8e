"""The PolicyReports' handlers: registered only with --policy-reports, keeping the reports an earlier run left
until every profile has been checked again (the intervals come from OperatorConfig), and --report-format, which
chooses the groups and means nothing without --policy-reports."""

from datetime import timedelta

import kopf
import pytest
from typer.testing import CliRunner

from mountwarden.cli import app
from mountwarden.core.policyreport import ReportFormat
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


@pytest.fixture
def operator_config(monkeypatch):
    """Runs `mountwarden operator` up to the config it would run with (the config, or None when it refused)."""
    ran = {}
    monkeypatch.setattr("mountwarden.handlers.runner.run", lambda config, **_: ran.update(config=config))
    monkeypatch.setattr(kopf, "configure", lambda **_: None)  # it would reconfigure this process's root logger
    for name in ("MOUNTWARDEN_POLICY_REPORTS", "MOUNTWARDEN_REPORT_FORMAT", "MOUNTWARDEN_AGENT_SERVICE_ACCOUNT",
                 "MOUNTWARDEN_WEBHOOK_SERVICE", "MOUNTWARDEN_ENFORCE_CONFIGURATION", "MOUNTWARDEN_ACTIVE_LABEL"):
        monkeypatch.delenv(name, raising=False)

    def invoke(*args: str, env: dict[str, str] | None = None):
        result = CliRunner().invoke(app, ["operator", "--standalone", "--metrics-port", "0", *args], env=env)
        return result, ran.pop("config", None)
    return invoke


def test_the_report_format_is_auto_unless_a_flag_or_its_variable_names_one(operator_config):
    result, config = operator_config("--policy-reports")
    assert result.exit_code == 0, result.output
    assert config.report_format == ReportFormat.AUTO
    result, config = operator_config("--policy-reports", "--report-format", "openreports")
    assert config.report_format == ReportFormat.OPENREPORTS, result.output
    result, config = operator_config(env={"MOUNTWARDEN_POLICY_REPORTS": "true", "MOUNTWARDEN_REPORT_FORMAT": "both"})
    assert config.report_format == ReportFormat.BOTH and config.policy_reports, result.output


def test_a_report_format_without_policy_reports_is_refused_naming_the_fix(operator_config):
    result, config = operator_config("--report-format", "openreports")
    assert result.exit_code != 0 and config is None
    assert "add --policy-reports" in " ".join(result.output.split())  # rich wraps it
    result, _ = operator_config("--policy-reports", "--report-format", "kyverno")
    assert result.exit_code != 0 and "wgpolicyk8s" in result.output  # the choices
