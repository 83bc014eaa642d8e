"""The docs stay true: generated references match the code, and the runbook covers every reason."""

import re
from pathlib import Path

from mountwarden.api.storageprofile import RolloutWorkload
from mountwarden.cli.docs import rendered
from mountwarden.core.compliance import ComplianceReason, VerdictReason
from mountwarden.core.credits import CreditState, ProblemReason
from mountwarden.core.rollout import Phase
from mountwarden.core.volumecheck import VolumeFindingReason

ROOT = Path(__file__).resolve().parents[2]
RUNBOOK = (ROOT / "docs" / "runbook.md").read_text()
HEADINGS = {name for heading in re.findall(r"^### (.+)$", RUNBOOK, re.MULTILINE)
            for name in re.findall(r"[A-Z][A-Za-z]+", heading.split("(")[0])}

#: Reasons written as literals by the handlers (conditions and Events).
HANDLER_REASONS = {"Reconciled", "InvalidSpec", "VersionCreated", "OptionWarning", "MountPolicyDrift"}


def test_generated_references_match_the_code():
    for name, text in rendered().items():
        page = ROOT / "docs" / "reference" / name
        assert page.exists() and page.read_text() == text, f"{page} is out of date: run `make docs`"


def rollout_reasons() -> set[str]:
    """The workload reasons the API documents (RolloutWorkload.reason lists them)."""
    description = RolloutWorkload.model_fields["reason"].description
    return set(re.findall(r"[A-Z][A-Za-z]+", description.split(":", 1)[1]))


def test_the_runbook_has_an_entry_for_every_reason():
    enums = (VolumeFindingReason, VerdictReason, ComplianceReason, CreditState, ProblemReason, Phase)
    reasons = {str(r) for enum in enums for r in enum} | HANDLER_REASONS | rollout_reasons()
    missing = sorted(reasons - HEADINGS)
    assert not missing, f"docs/runbook.md has no '### <reason>' entry for {missing}"


def test_the_rollout_tables_give_every_documented_reason_and_no_other():
    from mountwarden.core.rollout.machine import AWAITING_APPROVAL, TURNS, WORKLOAD_TRANSITIONS

    in_tables = {reason for row in WORKLOAD_TRANSITIONS for reason in row.reasons}
    in_tables |= {turn.reason for turn in (AWAITING_APPROVAL, *TURNS)}
    assert in_tables == rollout_reasons()


def test_every_entry_says_what_to_do():
    entries = re.split(r"^### ", RUNBOOK, flags=re.MULTILINE)[1:]
    for entry in entries:
        title, _, body = entry.partition("\n")
        assert len(body.split()) >= 8, f"the runbook entry {title} is too thin to act on"


def test_every_test_the_threat_model_names_exists():
    """docs/security.md backs each line with tests, by path::name: they must be there."""
    security = (ROOT / "docs" / "security.md").read_text()
    named = set(re.findall(r"`((?:tests|e2e)/[\w/]+\.py)::(\w+)`", security))
    assert len(named) >= 30
    missing = [f"{path}::{test}" for path, test in sorted(named)
               if not re.search(rf"^def {test}\(", (ROOT / path).read_text(), re.MULTILINE)]
    assert not missing, f"docs/security.md names tests that do not exist: {missing}"
