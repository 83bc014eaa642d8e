"""Each preset's promise next to what the kernel lab measured: `options presets` and docs/reference/presets.md."""

from dataclasses import asdict, dataclass

from mountwarden.core.options.kernelfacts import (
    PresetMeasurement,
    kernel_release,
    preset_measurement,
)
from mountwarden.core.options.presets import (
    DEPRECATED,
    EFS_PROVISIONER,
    LOCAL_STORAGE_NOTE,
    PRESETS,
    Deprecation,
    Preset,
)
from mountwarden.core.policy import resolve_policy


def efs_mount_options(cache_policy: str | None, overrides: tuple[str, ...] = ()) -> str:
    """What a profile on EFS mounts with this preset: the AWS baseline under the preset (and overrides)."""
    policy = resolve_policy(provisioner=EFS_PROVISIONER, cache_policy=cache_policy, mount_options=overrides)
    return ",".join(policy.mount_options)


@dataclass(frozen=True)
class PresetSheet:
    preset: Preset
    #: What a profile on EFS mounts with it (what the lab measured).
    efs_options: str
    #: None when kernel_facts.json has no measurement of exactly these options.
    measured: PresetMeasurement | None

    def to_dict(self) -> dict:
        promise = self.preset.promise
        return {
            "name": str(self.preset.name), "options": list(self.preset.options), "efsMountOptions": self.efs_options,
            "useFor": self.preset.use_for, "notFor": self.preset.not_for,
            "promise": {"statByPath": promise.stat_by_path, "openAfterClose": promise.open_after_close,
                        "newFiles": promise.new_files, "writes": promise.writes, "cost": promise.cost},
            "measured": asdict(self.measured) if self.measured else None,
        }


@dataclass(frozen=True)
class DeprecatedSheet:
    deprecation: Deprecation
    former_efs_options: str
    #: The former options as the lab measured them: the evidence for the change.
    measured_before: PresetMeasurement | None

    def to_dict(self) -> dict:
        return {
            "name": str(self.deprecation.name), "replacedBy": str(self.deprecation.replaced_by),
            "formerOptions": list(self.deprecation.former_options), "formerEfsMountOptions": self.former_efs_options,
            "warning": self.deprecation.warning(),
            "measuredBefore": asdict(self.measured_before) if self.measured_before else None,
        }


def preset_sheets() -> list[PresetSheet]:
    sheets = []
    for name, preset in PRESETS.items():
        options = efs_mount_options(str(name))
        sheets.append(PresetSheet(preset, options, preset_measurement(str(name), options)))
    return sheets


def deprecated_sheets() -> list[DeprecatedSheet]:
    sheets = []
    for name, deprecation in DEPRECATED.items():
        options = efs_mount_options(None, deprecation.former_options)
        sheets.append(DeprecatedSheet(deprecation, options, preset_measurement(str(name), options, former=True)))
    return sheets


def to_dict() -> dict:
    return {"kernel": kernel_release(), "presets": [sheet.to_dict() for sheet in preset_sheets()],
            "deprecated": [sheet.to_dict() for sheet in deprecated_sheets()], "sqliteAndSmallFiles": LOCAL_STORAGE_NOTE}


REFERENCE_HEADER = ("<!-- Generated from mountwarden.core.options.presets and kernel_facts.json by `mountwarden docs` "
                    "(make docs). Do not edit. -->\n\n")


def reference() -> str:
    """docs/reference/presets.md."""
    lines = [
        REFERENCE_HEADER + "# Cache-policy presets", "",
        "Each preset is a promise in the terms your code depends on. The measured figures are those of a real "
        f"Linux {kernel_release()} NFS client in the kernel lab (`make kernel-facts`, "
        "[kernel behaviour](kernel-behaviour.md)), mounting each preset as a profile on EFS does (the AWS baseline "
        "under the preset) against a server that grants no delegations, as EFS grants none.", "",
        f"**SQLite and trees of many small files.** {LOCAL_STORAGE_NOTE}", "",
    ]
    for sheet in preset_sheets():
        preset, promise = sheet.preset, sheet.preset.promise
        lines += [
            f"## `{preset.name}`", "",
            f"Options: `{','.join(preset.options)}`; on EFS: `{sheet.efs_options}`.", "",
            f"- **Use for**: {preset.use_for}",
            f"- **Not for**: {preset.not_for}",
            f"- **stat() by path**: {promise.stat_by_path}",
            f"- **open() after another client's close()**: {promise.open_after_close}",
            f"- **A file another client creates**: {promise.new_files}",
            f"- **Writes**: {promise.writes}",
            f"- **Cost**: {promise.cost}",
            f"- **Measured**: {_measured(sheet.measured)}", "",
        ]
    for sheet in deprecated_sheets():
        lines += [f"## `{sheet.deprecation.name}` (deprecated)", "", sheet.deprecation.warning(), "",
                  f"As it was, on EFS: `{sheet.former_efs_options}`. Measured: {_measured(sheet.measured_before)}", ""]
    return "\n".join(lines)


def _measured(measured: PresetMeasurement | None) -> str:
    if measured is None:
        return "not measured with these options: run `make kernel-facts`."
    return f"{measured.describe_staleness()}. {measured.describe_cost()}."
