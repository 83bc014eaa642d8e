"""The inventory and the baseline: every volume on network storage, governed or not, from the moment the operator starts.

One loop for the cluster (not one per object): it takes the inventory (mountwarden.core.inventory) from the
indexes whenever something it shows changes (a node report, a StorageClass, a profile, a PersistentVolume)
and every ``--compliance-interval`` anyway, then

- writes one NetworkFileSystem object per file system (``kubectl get netfs``), rewriting one only when what
  it says changed (or to refresh its checkedAt every ``HEARTBEAT_SECONDS``), deleting those of file
  systems gone;
- hands the baseline's findings (volumes no profile governs: mountwarden.core.baseline) to
  mountwarden.handlers.findings like every other finding: a Warning Event on the pod (once), the
  PolicyReports under the policy ``mountwarden-baseline``, the ``mountwarden_findings`` gauge; with
  ``--no-baseline`` there are none;
- sets ``mountwarden_network_volumes``.

It waits for kopf's first event of a watched resource before the first pass: kopf delivers none before
its indexes are whole, so no volume of a profile is ever judged as ungoverned for want of its class. With
several replicas only the active one (kopf peering) takes the inventory.
"""

import asyncio
import contextlib
import hashlib
import json
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import kopf

from mountwarden.adapters.kube import TransientApiError
from mountwarden.adapters.networkfilesystems import NetworkFileSystems
from mountwarden.adapters.watches import Entries
from mountwarden.api.base import GROUP, VERSION
from mountwarden.api.networkfilesystem import network_file_system
from mountwarden.api.nodemountreport import PLURAL as REPORTS
from mountwarden.api.storageprofile import PLURAL as PROFILES
from mountwarden.core.baseline import BASELINE_POLICY, BASELINE_SOURCE
from mountwarden.core.findings import Reason
from mountwarden.core.inventory import ClusterFacts, Inventory, take_inventory
from mountwarden.core.networkstorage import NetworkVolume
from mountwarden.core.node.report import of_own_pods
from mountwarden.handlers import findings, metrics
from mountwarden.handlers.collector import during_burst
from mountwarden.handlers.config import OperatorConfig
from mountwarden.handlers.context import OperatorContext
from mountwarden.handlers.errors import backoff
from mountwarden.handlers.indexes import STORAGE_CLASSES, one, snapshot

log = logging.getLogger(__name__)
#: kopf's indexes the inventory reads (mountwarden.handlers.indexes), copied on kopf's event loop before each pass.
KOPF_INDEXES = ("contracts", "reports_by_node", "classes_by_name", "adopters")
#: An unchanged NetworkFileSystem is rewritten (its checkedAt) at most this often.
HEARTBEAT_SECONDS = 300.0
#: Changes that arrive together are taken in one pass.
SETTLE_SECONDS = 0.5


@dataclass
class InventoryLoop:
    """The loop's state: what wakes it and what it wrote. Not the last inventory: nothing reads it between passes,
    and at 20,000 pods it is 20,000 pod volumes, each with its sentence."""

    loop: asyncio.AbstractEventLoop
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    #: Set by kopf's first event of a watched resource: its indexes are whole.
    indexed: asyncio.Event = field(default_factory=asyncio.Event)
    #: Object name -> (the digest of its spec without checkedAt, when written); b"" for one found, not written.
    written: dict[str, tuple[bytes, float]] = field(default_factory=dict)
    task: asyncio.Task | None = None

    def poke(self) -> None:
        self.wake.set()

    def poke_threadsafe(self) -> None:
        self.loop.call_soon_threadsafe(self.wake.set)


def facts_of(memo: OperatorContext, kopf_indexes: Mapping[str, dict]) -> ClusterFacts:
    """What the inventory reads, from the indexes (each node's report believed only about its own pods)."""
    watches = memo.watches.indexes
    claims = watches["claims_by_volume"]

    def reported_volume(name: str) -> NetworkVolume | None:
        entry = one(claims, name)
        if entry is None:
            return None
        return NetworkVolume(name, entry.get("storageClass") or "", tuple(entry.get("mountOptions") or ()),
                             tuple(entry["claim"]), source="reported", adopted_by=entry.get("adoptedBy"))

    network = watches["network_volumes"]
    return ClusterFacts(
        classes=list(kopf_indexes["classes_by_name"].values()),
        volumes=[one(network, name) for name in list(network)],
        pods_of_claim=memo.pods.of_claim,
        pod_of_uid=memo.pods.get,
        reports={node: of_own_pods(report, memo.pods.node_of)[0]
                 for node, entry in kopf_indexes["reports_by_node"].items() if (report := entry.read()) is not None},
        contracts=dict(kopf_indexes["contracts"]),
        adopters=list(kopf_indexes["adopters"].values()),
        reported_volume=reported_volume,
        network_provisioners=memo.config.network_provisioners,
    )


def take_and_publish(memo: OperatorContext, state: InventoryLoop, kopf_indexes: Mapping[str, dict],
                     writer: NetworkFileSystems) -> Inventory:
    """One pass: take the inventory, write the NetworkFileSystem objects, hand the baseline's findings out."""
    now = datetime.now(UTC)
    inventory = _take_and_hand_out(memo, kopf_indexes, now)
    _write(inventory, state, writer, now)
    return inventory


@during_burst  # an object or more per pod volume, every pass (mountwarden.handlers.collector); nothing here blocks
def _take_and_hand_out(memo: OperatorContext, kopf_indexes: Mapping[str, dict], now: datetime) -> Inventory:
    config = memo.config
    inventory = take_inventory(facts_of(memo, kopf_indexes), now=now,
                               stale_after=timedelta(seconds=config.report_stale_after), baseline=config.baseline)
    baseline = inventory.baseline_findings
    for finding in baseline:
        # Every pod's SQLite on NFS is posted from its node's report already (mountwarden.handlers.reports).
        if finding.reason is not Reason.SQLITE_ON_NFS:
            findings.post_once(memo.posted_findings, finding)
    findings.publish(memo, BASELINE_POLICY, BASELINE_SOURCE, baseline)
    metrics.record_inventory(inventory)
    return inventory


def _digest(spec: Mapping) -> bytes:
    """What a NetworkFileSystem's spec says but its checkedAt, as a digest: the spec itself is up to 1 MB of JSON (one
    of 0.81 MB is 3.6 MiB of objects), which the loop held for each file system between passes to compare the next one
    with. Each volume and finding is encoded alone, so that no single C call holds the GIL through the whole spec
    (api/networkfilesystem.py says why that matters)."""
    digest = hashlib.blake2b(digest_size=16)
    for key, value in sorted(spec.items()):
        if key == "checkedAt":
            continue
        digest.update(key.encode() + (b"[" if isinstance(value, list) else b"="))
        for piece in value if isinstance(value, list) else (value,):
            digest.update(json.dumps(piece, sort_keys=True, separators=(",", ":")).encode() + b"\n")
    return digest.digest()


def _write(inventory: Inventory, state: InventoryLoop, writer: NetworkFileSystems, now: datetime) -> None:
    checked_at = now.strftime("%Y-%m-%dT%H:%M:%SZ")
    wanted = {}
    for fs in inventory.file_systems:
        # The volumes made one at a time, and again only those that fit: never all of them as dicts at once.
        body = network_file_system(fs.head_dict(), checked_at, fs.volume_dicts)
        wanted[body["metadata"]["name"]] = body
    clock = time.monotonic()
    for name, body in wanted.items():
        content = _digest(body["spec"])
        before = state.written.get(name)
        if before is not None and before[0] == content and clock - before[1] < HEARTBEAT_SECONDS:
            continue
        writer.write(body)
        state.written[name] = (content, clock)
        if before is None or before[0] != content:
            summary = body["spec"]["summary"]
            log.info("NetworkFileSystem %s: %d classes, %d volumes (%d ungoverned), %d pods, %d findings", name,
                     summary["classes"], summary["volumes"], summary["ungoverned"], summary["pods"],
                     summary["findings"])
    for name in sorted(set(state.written) - set(wanted)):
        writer.delete(name)
        del state.written[name]
        log.info("NetworkFileSystem %s: deleted (no class or volume on it any more)", name)


async def run_inventory(memo: OperatorContext, state: InventoryLoop, kopf_indexes: Mapping[str, kopf.Index],
                        is_active, logger: logging.Logger) -> None:
    writer = NetworkFileSystems(memo.kube_client)
    await state.indexed.wait()
    failures = 0
    adopted_existing = False
    while True:
        await asyncio.sleep(SETTLE_SECONDS)
        state.wake.clear()
        try:
            if await asyncio.to_thread(is_active):
                if not adopted_existing:
                    # Objects an earlier run wrote: deleted once they stand for no file system.
                    existing = await asyncio.to_thread(writer.existing)
                    state.written.update({name: (b"", 0.0) for name in existing if name not in state.written})
                    adopted_existing = True
                copied = {name: snapshot(index) for name, index in kopf_indexes.items()}
                await memo.event_context.run(take_and_publish, memo, state, copied, writer)  # ready with ``indexed``
            else:
                state.written.clear()  # a standby writes nothing; once active it writes everything again
                adopted_existing = False
            failures = 0
        except TransientApiError as error:
            failures += 1
            logger.warning(f"inventory pass failed ({error}); trying again in {backoff(failures):.0f} s")
            await asyncio.sleep(backoff(failures))
            continue
        except Exception:  # a bug must not end the loop: the next change or interval retries
            failures += 1
            logger.exception("inventory pass failed")
            await asyncio.sleep(backoff(failures))
            continue
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(state.wake.wait(), timeout=memo.config.compliance_interval)


async def start_inventory(memo: OperatorContext, logger: logging.Logger, **kwargs) -> None:
    """Start the loop; it holds kopf's indexes (handed to start-up handlers too) and reads them on each pass."""
    state = memo.inventory = InventoryLoop(asyncio.get_running_loop())
    memo.watches.volumes.listeners.append(volume_changed(state))
    state.task = asyncio.create_task(run_inventory(memo, state, {name: kwargs[name] for name in KOPF_INDEXES},
                                                   memo.replica_active, logger))
    logger.info("inventory on: one NetworkFileSystem per file system (kubectl get netfs); the baseline is "
                + ("on: findings on volumes no StorageProfile governs, under the policy " + BASELINE_POLICY
                   if memo.config.baseline else "off (--no-baseline)"))


async def stop_inventory(memo: OperatorContext, **_) -> None:
    state: InventoryLoop | None = memo.inventory
    if state is not None and state.task is not None:
        state.task.cancel()


def volume_changed(state: InventoryLoop):
    """A PersistentVolume came, went or changed (told by the PVs' watch, in its thread)."""
    def listener(uid: str, before: Entries, after: Entries) -> None:
        if "network_volumes" in before or "network_volumes" in after:
            state.poke_threadsafe()
    return listener


async def wake_inventory(memo: OperatorContext, **_) -> None:
    """kopf delivers no event before its indexes are whole: the first one lets the loop start."""
    state: InventoryLoop | None = memo.inventory
    if state is not None:
        memo.event_context.capture()
        state.indexed.set()
        state.poke()


def register(registry: kopf.OperatorRegistry, config: OperatorConfig) -> None:
    kopf.on.startup(registry=registry)(start_inventory)
    kopf.on.cleanup(registry=registry)(stop_inventory)
    for resource in ((GROUP, VERSION, REPORTS), (GROUP, VERSION, PROFILES), STORAGE_CLASSES):
        kopf.on.event(*resource, registry=registry)(wake_inventory)
