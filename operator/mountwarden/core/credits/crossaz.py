"""CrossAZMount: a pod volume whose EFS mount target is in another availability zone than its node.

A Regional EFS file system has a mount target per zone (at most one each); the file system's DNS
name answers each client with the mount target of the client's own zone, when there is one (EFS
User Guide, "Managing mount targets", https://docs.aws.amazon.com/efs/latest/ug/accessing-fs.html).
A mount made through another zone's target (no target in the node's zone, a PV naming another
zone's IP address or zonal DNS name, a One Zone file system used from elsewhere) pays for every
byte crossing zones and a longer round trip on every request: "You can avoid data transfer charges
between Availability Zones and achieve better performance by accessing an EFS file system using an
Amazon EC2 compute instance that is located in the same Availability Zone as that of the file
system's mount target" (EFS User Guide, "Mounting One Zone file systems",
https://docs.aws.amazon.com/efs/latest/ug/mounting-one-zone.html).

Which mount target a mount talks to: the ``addr=`` the kernel shows for it (mountstats and
mountinfo), unless that is a local TLS tunnel (efs-utils mounts 127.0.0.1), in which case it is the
address the tunnel process is connected to on port 2049, when the agent could read it. Which zone
each target is in comes from DescribeMountTargets; the node's zone from its
``topology.kubernetes.io/zone`` label.

The cost: regional data transfer between zones is billed $0.01 per GB in each direction (Amazon
EC2 On-Demand pricing, "Data Transfer within the same AWS Region",
https://aws.amazon.com/ec2/pricing/on-demand/, read 2026-12-01), so every byte read or written
through the other zone's target is billed at least once at that rate: the node's side. Whether the
mount target's side is billed again is not stated on the EFS pricing page, so the figure is a
lower bound. The bytes are those the agent measured (the mount's READ and WRITE payloads since it
was made), scaled to a month at their average rate.
"""

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from mountwarden.core.credits.consumers import ReportedVolume, VolumeOwners
from mountwarden.core.credits.pricing import SECONDS_PER_MONTH, round_cents
from mountwarden.core.credits.series import MountTarget
from mountwarden.core.credits.units import GIB, format_bytes
from mountwarden.core.findings import Finding, Reason, Severity, Subject
from mountwarden.core.node.kinds import ZONE_LABEL

#: $ per GB crossing zones, each direction (EC2 On-Demand pricing page, read 2026-12-01; GB as 1024^3 bytes,
#: as the rest of the price table).
CROSS_AZ_USD_PER_GIB = 0.01
CROSS_AZ_PRICE_SOURCE = "https://aws.amazon.com/ec2/pricing/on-demand/ (Data Transfer within the same AWS Region)"


@dataclass(frozen=True)
class CrossAzMount:
    node: str
    node_zone: str
    pod: str  # namespace/name
    pod_uid: str
    volume: str
    profile: str
    target: MountTarget
    #: The mount target in the node's own zone, when the file system has one.
    local_target: MountTarget | None
    #: READ and WRITE payload bytes per second since the mount was made; None when the report had no mount age.
    bytes_per_second: float | None

    @property
    def monthly_usd(self) -> float | None:
        if self.bytes_per_second is None:
            return None
        return round_cents(self.bytes_per_second * SECONDS_PER_MONTH / GIB * CROSS_AZ_USD_PER_GIB)

    @property
    def message(self) -> str:
        cost = ("" if self.monthly_usd is None else
                f"; at the {format_bytes(self.bytes_per_second or 0)}/s it has moved since it was mounted, "
                f"about ${self.monthly_usd:,.2f} a month of cross-zone transfer (at ${CROSS_AZ_USD_PER_GIB}/GB, "
                "a lower bound)")
        return (f"volume {self.volume} of pod {self.pod} on node {self.node} (zone {self.node_zone}) talks to EFS "
                f"mount target {self.target.mount_target_id} at {self.target.ip_address} in zone {self.target.zone}: "
                f"every request crosses zones, with a longer round trip{cost}.")

    @property
    def remedy(self) -> str:
        if self.local_target is None:
            return (f"Create a mount target in zone {self.node_zone} (one per zone: aws efs create-mount-target with a "
                    f"subnet of that zone), then restart the pod so that it mounts through it; or keep the pod in "
                    f"zone {self.target.zone} (a node affinity on {ZONE_LABEL}).")
        return (f"The file system has mount target {self.local_target.mount_target_id} ({self.local_target.ip_address}) "
                f"in zone {self.node_zone}: mount by the file system's DNS name (the EFS CSI driver's default), which "
                f"answers with the target of the client's zone, not by another zone's IP address or zonal name, "
                "then restart the pod.")

    def finding(self) -> Finding:
        namespace, _, name = self.pod.partition("/")
        evidence = {"node": self.node, "volume": self.volume, "nodeZone": self.node_zone,
                    "mountTarget": self.target.mount_target_id, "mountTargetZone": self.target.zone,
                    "address": self.target.ip_address}
        if self.monthly_usd is not None:
            evidence["monthlyCostUsd"] = f"{self.monthly_usd:.2f}"
        return Finding(Reason.CROSS_AZ_MOUNT, Severity.WARNING, self.message, self.remedy,
                       subject=Subject("Pod", name, namespace, uid=self.pod_uid), profile=self.profile,
                       evidence=evidence)

    def to_json(self) -> dict[str, object]:
        """The status's form (camelCase); unknown figures left out."""
        document = {"pod": self.pod, "node": self.node, "nodeZone": self.node_zone, "volume": self.volume,
                "profile": self.profile, "mountTargetId": self.target.mount_target_id,
                "mountTargetZone": self.target.zone, "address": self.target.ip_address,
                "localMountTargetId": self.local_target.mount_target_id if self.local_target else None,
                "bytesPerSecond": self.bytes_per_second, "monthlyCostUsd": self.monthly_usd}
        return {key: value for key, value in document.items() if value is not None}


@dataclass(frozen=True)
class CrossAzCheck:
    """What the check found on one file system, and what it could not judge."""

    mounts: tuple[CrossAzMount, ...]
    #: Volumes on the file system that were judged (their target and their node's zone known).
    judged: int
    #: Why some volumes were not judged, said once each.
    notes: tuple[str, ...] = ()

    def to_json(self) -> dict[str, object]:
        costs = [mount.monthly_usd for mount in self.mounts if mount.monthly_usd is not None]
        document = {"judged": self.judged, "volumes": [mount.to_json() for mount in self.mounts],
                    "monthlyCostUsd": round_cents(sum(costs)) if costs else None, "notes": list(self.notes)}
        return {key: value for key, value in document.items() if value is not None}


def payload_bytes_per_second(volume: ReportedVolume) -> float | None:
    """READ and WRITE payload bytes a second since the mount was made (None without a mount age)."""
    if not volume.age_seconds:
        return None
    payload = sum((totals.bytes_received or 0) if name == "READ" else (totals.bytes_sent or 0)
                  for name, totals in volume.operations.items() if name in ("READ", "WRITE"))
    return payload / volume.age_seconds


def cross_az_mounts(volumes: Iterable[ReportedVolume], owners: VolumeOwners, file_system_id: str,
                    targets: Sequence[MountTarget], node_zones: Mapping[str, str]) -> CrossAzCheck:
    """The pod volumes on ``file_system_id`` that talk to a mount target of another zone than their node's."""
    by_address = {target.ip_address: target for target in targets}
    by_zone = {target.zone: target for target in targets}
    found: list[CrossAzMount] = []
    judged = 0
    unknown_zone: set[str] = set()
    tunnels = unknown_target = 0
    for volume in volumes:
        owner = owners.owner_of(volume)
        if owner is None or owner.file_system_id != file_system_id:
            continue
        address = volume.mount_target_address
        if address is None:
            tunnels += volume.through_tunnel
            unknown_target += not volume.through_tunnel
            continue
        target = by_address.get(address)
        zone = node_zones.get(volume.node)
        if target is None:
            unknown_target += 1
            continue
        if not zone:
            unknown_zone.add(volume.node)
            continue
        judged += 1
        if target.zone != zone:
            found.append(CrossAzMount(volume.node, zone, owner.pod, volume.pod_uid or "", volume.volume_name,
                                      owner.profile, target, by_zone.get(zone), payload_bytes_per_second(volume)))
    notes = []
    if tunnels:
        notes.append(f"{tunnels} volume(s) mount through a local TLS tunnel whose connection the agent could not read "
                     "(it reads the tunnel's socket with the agent's process scan on): their zone is not judged")
    if unknown_target:
        notes.append(f"{unknown_target} volume(s) talk to an address that is none of the file system's mount targets "
                     "(DescribeMountTargets): not judged")
    if unknown_zone:
        notes.append(f"node(s) {', '.join(sorted(unknown_zone))} have no {ZONE_LABEL} label: their volumes are not "
                     "judged")
    found.sort(key=lambda mount: (-(mount.bytes_per_second or 0), mount.pod, mount.volume))
    return CrossAzCheck(tuple(found), judged, tuple(notes))
