"""mountwarden's own scan of a live /proc, for mounts made by hand (run inside the lab VM).

`python3 -m mountwarden.lab.livescan` reads a JSON object on stdin mapping each mount
point to the options it was asked with, scans the live /proc exactly as the node agent
does (mountinfo, mountstats, the kubelet's volume layout), checks each mount against
what it asked for, and prints one JSON object: per mount point its effective options,
mountinfo's options, superblock, transports and findings.
"""

import json
import sys
from pathlib import Path

from mountwarden.adapters.procreader import ProcRoot
from mountwarden.agent.scan import scan_proc_root
from mountwarden.core.node.check import check_volume
from mountwarden.core.node.scan import DEFAULT_NETWORK_FSTYPES
from mountwarden.core.options.normalize import normalize

#: Where `lab try` mounts: the kubelet's in-tree NFS layout, so the agent's scan sees pod volumes.
KUBELET_ROOT = "/var/lib/kubelet"
TRY_POD_UID = "0a1b0000-7a11-4000-8000-00000000a001"


def mount_point(index: int) -> str:
    return f"{KUBELET_ROOT}/pods/{TRY_POD_UID}/volumes/kubernetes.io~nfs/mount-{index}"


def scan(asked_by_mount_point: dict[str, str], proc: Path = Path("/proc")) -> dict:
    root = ProcRoot(proc)
    node = scan_proc_root(root, kubelet_root=KUBELET_ROOT, network_fstypes=DEFAULT_NETWORK_FSTYPES)
    mountinfo = {entry.mount_point: entry for entry in root.mountinfo().mounts}
    mounts = {}
    for volume in node.volumes:
        asked = asked_by_mount_point.get(volume.mount_point)
        if asked is None:
            continue
        declared = normalize(asked).options
        entry = mountinfo[volume.mount_point]
        mounts[volume.mount_point] = {
            "effective": list(volume.effective_options),
            "options_source": str(volume.options_source),
            "mountinfo_options": [*_tokens(entry.mount_option_tokens), *_tokens(entry.super_option_tokens)],
            "superblock": volume.superblock,
            "shared_with": list(volume.shared_with),
            "transports": volume.connections,
            "server_mounts": volume.server_mounts,
            "findings": [finding.to_dict() for finding in check_volume(volume, declared).findings],
        }
    return {"mounts": mounts, "skipped_lines": node.skipped_lines}


def _tokens(tokens) -> list[str]:
    return [name if value is None else f"{name}={value}" for name, value in tokens]


if __name__ == "__main__":
    json.dump(scan(json.load(sys.stdin)), sys.stdout, default=str)
    sys.stdout.write("\n")
