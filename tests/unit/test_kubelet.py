"""Kubelet paths to pod volumes: the layouts the kubelet really uses, and nothing else."""

import hashlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mountwarden.core.node.kubelet import KubeletPlugin, KubeletVolume, is_subpath_mount, parse_volume_path

ROOT = "/var/lib/kubelet"
UID = "0f3c2a4e-7d51-4b6a-9a55-3c1e8f2b9d10"
HANDLE_HASH = hashlib.sha256(b"fs-0123456789abcdef0::fsap-0123456789abcdef0").hexdigest()


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        (f"{ROOT}/pods/{UID}/volumes/kubernetes.io~csi/pvc-42/mount",
         KubeletVolume(KubeletPlugin.CSI, "pvc-42", UID, None, ROOT)),
        (f"{ROOT}/pods/{UID}/volumes/kubernetes.io~nfs/shared-data",
         KubeletVolume(KubeletPlugin.NFS, "shared-data", UID, None, ROOT)),
        (f"{ROOT}/plugins/kubernetes.io/csi/efs.csi.aws.com/{HANDLE_HASH}/globalmount",
         KubeletVolume(KubeletPlugin.CSI_STAGING, HANDLE_HASH, None, "efs.csi.aws.com", ROOT)),
        # Older kubelets staged under a literal "pv" directory named after the PV.
        (f"{ROOT}/plugins/kubernetes.io/csi/pv/pvc-42/globalmount",
         KubeletVolume(KubeletPlugin.CSI_STAGING, "pvc-42", None, None, ROOT)),
        # A driver really named "pv" in the newer layout: the hash gives it away.
        (f"{ROOT}/plugins/kubernetes.io/csi/pv/{HANDLE_HASH}/globalmount",
         KubeletVolume(KubeletPlugin.CSI_STAGING, HANDLE_HASH, None, "pv", ROOT)),
        # Static pods have a 32-hex-digit UID, not a UUID.
        (f"{ROOT}/pods/6b9e0a53c1d2e4f5a6b7c8d9e0f1a2b3/volumes/kubernetes.io~nfs/logs",
         KubeletVolume(KubeletPlugin.NFS, "logs", "6b9e0a53c1d2e4f5a6b7c8d9e0f1a2b3", None, ROOT)),
    ],
)
def test_kubelet_layouts(path, expected):
    assert parse_volume_path(path, [ROOT]) == expected


@pytest.mark.parametrize(
    "path",
    [
        f"{ROOT}/pods/{UID}/volumes/kubernetes.io~csi/pvc-42",  # the directory holding vol_data.json
        f"{ROOT}/pods/{UID}/volumes/kubernetes.io~csi/pvc-42/mount/nested",  # something mounted inside a volume
        f"{ROOT}/pods/{UID}/volumes/kubernetes.io~empty-dir/cache",
        f"{ROOT}/pods/{UID}/volume-subpaths/pvc-42/app/0",  # a subPath bind, not the volume
        f"{ROOT}/plugins/kubernetes.io/csi/efs.csi.aws.com/{HANDLE_HASH}",
        "/mnt/efs",
        f"{ROOT}/pods//volumes/kubernetes.io~nfs/data",  # no pod UID
    ],
)
def test_other_paths_are_not_volumes(path):
    assert parse_volume_path(path, [ROOT]) is None


def test_only_the_given_roots_count():
    path = f"/data/kubelet/pods/{UID}/volumes/kubernetes.io~csi/pvc-42/mount"

    assert parse_volume_path(path, [ROOT]) is None
    # /var/lib/kubelet -> /data/kubelet: the kernel prints the target, so both are passed.
    assert parse_volume_path(path, [ROOT, "/data/kubelet/"]).kubelet_root == "/data/kubelet"


def test_without_roots_any_root_is_accepted_for_naming_mounts():
    volume = parse_volume_path(f"/opt/k8s/kubelet/pods/{UID}/volumes/kubernetes.io~nfs/data")

    assert (volume.kubelet_root, volume.pod_uid, volume.volume_name) == ("/opt/k8s/kubelet", UID, "data")


def test_subpath_bind_mounts():
    path = f"{ROOT}/pods/{UID}/volume-subpaths/pvc-42/app/3"

    assert is_subpath_mount(path, [ROOT])
    assert is_subpath_mount(path)
    assert not is_subpath_mount(path, ["/data/kubelet"])
    assert not is_subpath_mount(f"{ROOT}/pods/{UID}/volumes/kubernetes.io~csi/pvc-42/mount", [ROOT])


_segment = st.text(alphabet=st.characters(blacklist_characters="/", blacklist_categories=("Cs",)), min_size=1)


@given(root=st.sampled_from([ROOT, "/data/kubelet", "/var/lib/k0s/kubelet"]), uid=_segment, volume=_segment)
def test_any_pod_and_volume_name_round_trips(root, uid, volume):
    csi = parse_volume_path(f"{root}/pods/{uid}/volumes/kubernetes.io~csi/{volume}/mount", [root])
    nfs = parse_volume_path(f"{root}/pods/{uid}/volumes/kubernetes.io~nfs/{volume}", [root])

    assert (csi.plugin, csi.pod_uid, csi.volume_name) == (KubeletPlugin.CSI, uid, volume)
    assert (nfs.plugin, nfs.pod_uid, nfs.volume_name) == (KubeletPlugin.NFS, uid, volume)
