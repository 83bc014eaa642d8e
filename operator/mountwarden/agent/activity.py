"""Each pod volume's recent activity and the states of the processes using it, over the agent's window.

Every scan adds one sample of each mount's counters (mountstats) and a few rounds of samples of the
state of every process of a pod with a volume on NFS (/proc/<pid>/stat, which never waits on a file
system). What the numbers mean is decided by the pure mountwarden.core.node.activity.

Which processes use which volume: a pod with one volume on NFS uses it with all its processes; in a
pod with several, a process uses those it has files open on (fdinfo's mnt_id, through the process's
own mountinfo, to the superblock), and all of them when it has none open (a process blocked in a
stat() holds no file).
"""

import time
from collections import defaultdict, deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from mountwarden.adapters.procreader import ProcRoot
from mountwarden.core.node.activity import (
    Activity,
    MountSample,
    ProcessSamples,
    StuckProcess,
    activity,
    merge_samples,
    process_state,
    sample_of,
)
from mountwarden.core.node.scan import NodeScan, NodeVolume

#: A volume's identity between scans, as on /metrics: a remount gets a new superblock, so new counters.
VolumeKey = tuple[str, str, str, str]

DEFAULT_WINDOW_SECONDS = 300.0
DEFAULT_PROCESS_ROUNDS = 5
ROUND_PAUSE_SECONDS = 0.2


def volume_key(volume: NodeVolume) -> VolumeKey:
    return (volume.pod_uid or "", volume.volume_name, volume.mount_point, volume.superblock)


@dataclass(frozen=True, slots=True)
class VolumeActivity:
    activity: Activity | None
    processes: ProcessSamples | None
    #: The processes in uninterruptible sleep (D) at the last round of samples, with where they wait.
    stuck: tuple[StuckProcess, ...] = ()


def stat_command(text: str) -> str:
    """The comm of /proc/<pid>/stat: between the first '(' and the last ')' (it may hold both)."""
    return text[text.find("(") + 1:text.rfind(")")]


def stat_fields(text: str | None) -> tuple[str | None, str | None]:
    """(state, starttime) of /proc/<pid>/stat; starttime tells a reused pid from the process that had it."""
    if not text:
        return None, None
    rest = text[text.rfind(")") + 1:].split()
    return process_state(text), rest[19] if len(rest) > 19 else None


class ActivityTracker:
    """Remembers each volume's samples for ``window_seconds``; ``observe`` adds this scan's and returns the rates."""

    def __init__(self, proc: ProcRoot, *, window_seconds: float = DEFAULT_WINDOW_SECONDS,
                 process_rounds: int = DEFAULT_PROCESS_ROUNDS, round_pause: float = ROUND_PAUSE_SECONDS,
                 clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep) -> None:
        self.proc = proc
        self.window = window_seconds
        self.rounds = process_rounds
        self.round_pause = round_pause
        self.clock, self.sleep = clock, sleep
        self._mounts: dict[VolumeKey, deque[MountSample]] = defaultdict(deque)
        self._processes: dict[VolumeKey, deque[tuple[float, ProcessSamples]]] = defaultdict(deque)
        self._pod_of: dict[tuple[int, str], str | None] = {}
        #: Seconds the last observe slept between rounds of process samples (waiting, not scanning).
        self.paused = 0.0

    def observe(self, scan: NodeScan, *, rounds: int | None = None) -> dict[VolumeKey, VolumeActivity]:
        """``rounds`` of process samples instead of the usual (1 for a scan that must report at once)."""
        now = self.clock()
        self.paused = 0.0
        stats = {(mount.mount_point, mount.superblock): mount.stats for mount in scan.network_mounts}
        keys = {volume_key(volume): volume for volume in scan.volumes}
        rates: dict[VolumeKey, Activity | None] = {}
        for key, volume in keys.items():
            device = stats.get((volume.mount_point, volume.superblock))
            sample = sample_of(device, now) if device is not None else None
            history = self._mounts[key]
            while history and now - history[0].at > self.window:
                history.popleft()
            rates[key] = activity(history[0] if history else None, sample) if sample is not None else None
            if sample is not None:
                history.append(sample)
        rounds = self.rounds if rounds is None else min(rounds, self.rounds)
        stuck: dict[VolumeKey, list[StuckProcess]] = defaultdict(list)
        processes = self._sample_processes(keys.values(), now, rounds, stuck) if rounds else {}
        for gone in set(self._mounts) - set(keys):
            del self._mounts[gone]
        for gone in set(self._processes) - set(keys):
            del self._processes[gone]
        return {key: VolumeActivity(rates.get(key), processes.get(key), tuple(stuck.get(key, ()))) for key in keys}

    # -- processes ----------------------------------------------------------------------------------

    def _sample_processes(self, volumes: Iterable[NodeVolume], now: float, rounds: int,
                          stuck: dict[VolumeKey, list[StuckProcess]]) -> dict[VolumeKey, ProcessSamples]:
        """``stuck`` gets each volume's processes in D at the last round (their wchan read then)."""
        by_pod: dict[str, list[NodeVolume]] = defaultdict(list)
        for volume in volumes:
            if volume.pod_uid:
                by_pod[volume.pod_uid].append(volume)
        users = self._users(by_pod)  # pid -> the volume keys it uses
        counts: dict[VolumeKey, list[int]] = defaultdict(lambda: [0, 0])
        pids_of: dict[VolumeKey, set[int]] = defaultdict(set)
        for round_number in range(rounds if users else 0):  # no process to sample: no rounds to wait between
            if round_number:
                self.sleep(self.round_pause)
                self.paused += self.round_pause
            last = round_number == rounds - 1
            for pid, keys in users.items():
                text = self.proc.stat(pid)
                state, _ = stat_fields(text)
                if state is None:
                    continue  # exited
                waiting = StuckProcess(pid, stat_command(text or ""), self.proc.wchan(pid)) if last and state == "D" \
                    else None
                for key in keys:
                    counts[key][0] += 1
                    counts[key][1] += state == "D"
                    pids_of[key].add(pid)
                    if waiting is not None:
                        stuck[key].append(waiting)
        merged: dict[VolumeKey, ProcessSamples] = {}
        for key in {volume_key(v) for vs in by_pod.values() for v in vs}:
            history = self._processes[key]
            samples, stuck = counts.get(key, (0, 0))
            history.append((now, ProcessSamples(samples, stuck, len(pids_of.get(key, ())))))
            while history and now - history[0][0] > self.window:
                history.popleft()
            merged[key] = merge_samples([part for _, part in history])
        return merged

    def _users(self, by_pod: dict[str, list[NodeVolume]]) -> dict[int, list[VolumeKey]]:
        users: dict[int, list[VolumeKey]] = {}
        if not by_pod:  # no pod has a volume to sample: no process to look at
            self._pod_of.clear()
            return users
        seen: set[tuple[int, str]] = set()
        for pid, text in self.proc.user_processes():
            _, started = stat_fields(text)
            if started is None:
                continue
            identity = (pid, started)
            seen.add(identity)
            if identity not in self._pod_of:
                cgroup = self.proc.cgroup(pid)
                pod = cgroup.pod if cgroup is not None else None
                self._pod_of[identity] = pod.pod_uid if pod is not None else None
            volumes = by_pod.get(self._pod_of[identity] or "")
            if volumes:
                users[pid] = [volume_key(v) for v in self._volumes_used(pid, volumes)]
        for gone in set(self._pod_of) - seen:
            del self._pod_of[gone]
        return users

    def _volumes_used(self, pid: int, volumes: list[NodeVolume]) -> list[NodeVolume]:
        if len(volumes) == 1:
            return volumes
        mount_ids = {info.get("mnt_id") for fd in self.proc.open_files(pid)
                     if (info := self.proc.fd_info(pid, fd)).get("mnt_id")}
        devices = {entry.major_minor for entry in self.proc.mountinfo(pid, counted=False).mounts
                   if str(entry.mount_id) in mount_ids}
        used = [volume for volume in volumes if volume.superblock in devices]
        return used or volumes
