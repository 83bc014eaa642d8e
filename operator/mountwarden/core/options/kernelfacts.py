"""What the real kernel did, as the kernel lab measured it (kernel_facts.json, from `make kernel-facts`).

The file is written by `mountwarden lab measure` on a Debian 12 kernel in QEMU (see
mountwarden.lab) and read here, so that `options presets` and the docs quote measured
figures rather than expectations. A preset whose options changed since the measurement has
no figures until the file is measured again (a unit test fails until then).
"""

import json
from dataclasses import dataclass
from functools import cache
from importlib import resources

FACTS_FILE = "kernel_facts.json"


@dataclass(frozen=True, slots=True)
class PresetMeasurement:
    options: str
    #: Worst age of the size a stat() by path returned while another client appended (seconds).
    stat_staleness_seconds: float
    #: The same for open()+fstat() (close-to-open).
    open_staleness_seconds: float
    #: How long the writer ran: a staleness this long means "for as long as we looked".
    observed_seconds: float
    #: RPCs per call of each paced workload, by operation.
    rpcs_per_stat: float
    rpcs_per_open: float
    #: RPCs of `ls -l` on a directory of 50 files.
    rpcs_for_ls_l_of_50: int
    paced_calls: int
    #: RPCs per stat() of a name that does not exist (None: not measured by this facts file).
    rpcs_per_missing_stat: float | None = None
    #: After another client creates a file, how long a reader whose earlier lookup failed still fails,
    #: by stat() and by open() of the path (None: not found within ``observed_seconds``).
    new_file_by_stat_seconds: float | None = None
    new_file_by_open_seconds: float | None = None
    negative_lookups_measured: bool = False

    def _age(self, seconds: float) -> str:
        if seconds >= self.observed_seconds * 0.9:
            return f"stale for the whole {self.observed_seconds:.0f} s observed"
        return f"at most {seconds:.1f} s old" if seconds else "never stale (0 s)"

    def _found(self, seconds: float | None) -> str:
        if seconds is None:
            return f"still missing after the {self.observed_seconds:.0f} s observed"
        return f"found after {seconds:.2f} s"

    def describe_staleness(self) -> str:
        text = (f"stat() by path: {self._age(self.stat_staleness_seconds)}; "
                f"open()+fstat(): {self._age(self.open_staleness_seconds)}")
        if self.negative_lookups_measured:
            text += (f"; a file another client creates after a failed lookup: by stat() "
                     f"{self._found(self.new_file_by_stat_seconds)}, by open() {self._found(self.new_file_by_open_seconds)}")
        return text

    def describe_cost(self) -> str:
        text = (f"{self.rpcs_per_stat:.1f} RPCs per stat(), {self.rpcs_per_open:.1f} per open()+close(), "
                f"{self.rpcs_for_ls_l_of_50} for ls -l of 50 files")
        if self.rpcs_per_missing_stat is not None:
            text += f", {self.rpcs_per_missing_stat:.1f} per stat() of a missing name"
        return text


@cache
def facts() -> dict:
    return json.loads(resources.files("mountwarden.core.options").joinpath(FACTS_FILE).read_text())


def kernel_release() -> str:
    return facts()["kernel"]


def preset_measurement(name: str, options: str, *, former: bool = False) -> PresetMeasurement | None:
    """The measurement of a preset, if it was measured with exactly these mount options.

    ``former``: a deprecated preset's options before it was redefined (facts' ``former_presets``).
    """
    measured = facts().get("former_presets" if former else "presets", {}).get(name)
    if measured is None or measured["options"] != options:
        return None
    cost, coherence = measured["cost"], measured["coherence"]
    calls = cost["paced_calls"]
    negative = measured.get("negative_lookups")
    missing = cost.get("missing_stat_loop")
    return PresetMeasurement(
        options=options,
        stat_staleness_seconds=coherence["stat_by_path"]["worst_seconds"],
        open_staleness_seconds=coherence["open_fstat"]["worst_seconds"],
        observed_seconds=coherence["seconds"],
        rpcs_per_stat=cost["stat_loop"]["total"] / calls,
        rpcs_per_open=cost["open_close_loop"]["total"] / calls,
        rpcs_for_ls_l_of_50=cost["ls_l"]["total"],
        paced_calls=calls,
        rpcs_per_missing_stat=missing["total"] / calls if missing is not None else None,
        new_file_by_stat_seconds=negative["stat_by_path"]["found_after_seconds"] if negative else None,
        new_file_by_open_seconds=negative["open_by_path"]["found_after_seconds"] if negative else None,
        negative_lookups_measured=negative is not None,
    )
