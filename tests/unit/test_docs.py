"""The docs stay true: generated references match the code, and the runbook covers every reason."""

import re
from pathlib import Path

import yaml

from mountwarden.api.storageprofile import RolloutWorkload
from mountwarden.cli.docs import rendered
from mountwarden.core.adoption import AdoptionPhase
from mountwarden.core.compliance import ComplianceReason, VerdictReason
from mountwarden.core.credits import CreditState, ProblemReason
from mountwarden.core.findings import Reason
from mountwarden.core.rollout import Phase
from mountwarden.core.sqlite import LOCAL_VOLUME_YAML, REMEDY, WAL_REMEDY

ROOT = Path(__file__).resolve().parents[2]
RUNBOOK = (ROOT / "docs" / "runbook.md").read_text()
HEADINGS = {name for heading in re.findall(r"^### (.+)$", RUNBOOK, re.MULTILINE)
            for name in re.findall(r"[A-Z][A-Za-z]+", heading.split("(")[0])}

#: Reasons written as literals by the handlers (conditions and Events).
HANDLER_REASONS = {"Reconciled", "InvalidSpec", "VersionCreated", "OptionWarning", "MountPolicyDrift"}


def test_generated_references_match_the_code():
    assert "kernel-behaviour.md" in rendered()
    for name, text in rendered().items():
        page = ROOT / "docs" / "reference" / name
        assert page.exists() and page.read_text() == text, f"{page} is out of date: run `make docs`"


def rollout_reasons() -> set[str]:
    """The workload reasons the API documents (RolloutWorkload.reason lists them)."""
    description = RolloutWorkload.model_fields["reason"].description
    return set(re.findall(r"[A-Z][A-Za-z]+", description.split(":", 1)[1]))


def test_the_runbook_has_an_entry_for_every_reason():
    enums = (Reason, VerdictReason, ComplianceReason, CreditState, ProblemReason, Phase, AdoptionPhase)
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
    assert len(entries) >= 20, len(entries)
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


def paragraphs_naming(word: str) -> list[tuple[str, str]]:
    """(file, paragraph) of the prose in README.md and docs/ that names ``word``; table rows are figures, not advice."""
    found = []
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        for paragraph in re.split(r"\n\s*\n", page.read_text()):
            prose = " ".join(line for line in paragraph.splitlines() if not line.lstrip().startswith("|"))
            if word in prose:
                found.append((str(page.relative_to(ROOT)), prose))
    return found


def test_wherever_nosharecache_is_suggested_nfs5s_data_risk_comes_with_it():
    suggested = paragraphs_naming("nosharecache")
    assert suggested, "the docs no longer mention nosharecache: drop this test with the suggestion"
    for page, prose in suggested:
        assert "data risk" in prose and "out of sync" in prose, f"{page}: nosharecache without nfs(5)'s warning: {prose}"


def test_the_runbook_and_the_sqlite_finding_give_the_same_local_volume_yaml():
    entry = RUNBOOK.split("### SQLiteOnNFS", 1)[1].split("\n### ", 1)[0]
    empty_dir, ephemeral = re.findall(r"```yaml\n(.*?)```", entry, re.DOTALL)
    assert yaml.safe_load(empty_dir) == yaml.safe_load(LOCAL_VOLUME_YAML)
    # The finding carries the generic ephemeral volume commented out, so that its YAML applies as it is.
    assert "\n".join("#" + line for line in ephemeral.splitlines()) in LOCAL_VOLUME_YAML
    assert LOCAL_VOLUME_YAML in REMEDY and WAL_REMEDY.startswith(REMEDY)


def test_the_code_map_states_the_layers_import_linter_enforces():
    """docs/concepts.md's table of directories, top to bottom, is the layers contract of pyproject.toml."""
    import tomllib

    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    (layers,) = [c["layers"] for c in contracts if c["type"] == "layers" and "mountwarden.cli" in c["layers"]]
    enforced = [{name.strip().removeprefix("mountwarden.") for name in layer.split("|")} for layer in layers]
    concepts = (ROOT / "docs" / "concepts.md").read_text()
    table = concepts.split("## Where the code lives", 1)[1].split("\n\n")[2]
    stated = [set(re.findall(r"`(\w+)/`", row.split("|")[1])) for row in table.splitlines()[2:]]
    assert stated == enforced, f"docs/concepts.md states {stated}, import-linter enforces {enforced}"
