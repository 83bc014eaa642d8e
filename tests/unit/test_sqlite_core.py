"""The pure SQLite-on-NFS detector: lock lines, open files and mappings in, findings out.

The lock lines below are the shapes real SQLite 3.40 processes left in /proc/locks on
this kernel (see tests/integration/test_sqlite_real.py, which takes them for real).
"""

import pytest

from mountwarden.api.nodemountreport import SqliteDatabase
from mountwarden.core.procfs import MountinfoEntry, PodCgroup, parse_locks, parse_maps
from mountwarden.core.sqlite import (
    REMEDY,
    WAL_REMEDY,
    FileId,
    JournalMode,
    NetworkMount,
    OpenFile,
    PodVolume,
    ProcessFiles,
    Severity,
    SqliteLock,
    find_sqlite_databases,
    is_sqlite_header,
    is_sqlite_lock,
    kubelet_pod_volume,
    network_mounts,
    parse_network_fstypes,
    sqlite_lock_holders,
    sqlite_lock_level,
)

POD = "3d1b6e2d-0d6c-4b5e-9a3f-1c2d3e4f5a6b"
OTHER_POD = "aaaaaaaa-0d6c-4b5e-9a3f-1c2d3e4f5a6b"
CONTAINER = "ab" * 32
KUBELET_MOUNT = f"/var/lib/kubelet/pods/{POD}/volumes/kubernetes.io~csi/pvc-42/mount"
EFS = NetworkMount(0, 53, KUBELET_MOUNT, "nfs4", POD, "pvc-42")  # locks print the device as 00:35
DB = FileId(0, 53, 1001)
SHM = FileId(0, 53, 1002)
WAL = FileId(0, 53, 1003)
JOURNAL = FileId(0, 53, 1004)


def locks(text: str):
    result = parse_locks(text)
    assert not result.skipped_line_numbers
    return result.locks


def maps(text: str):
    return parse_maps(text).mappings


def process(pid: int, *files: tuple[str, FileId], mapped: str = "", pod: str | None = POD) -> ProcessFiles:
    return ProcessFiles(
        pid=pid,
        pod=PodCgroup(pod, "burstable", "cgroupfs", "containerd", CONTAINER) if pod else None,
        open_files=tuple(
            OpenFile(fd=fd, path=path, file_id=file_id) for fd, (path, file_id) in enumerate(files, start=3)
        ),
        mappings=maps(mapped),
    )


def only(findings):
    assert len(findings) == 1, findings
    return findings[0]


@pytest.mark.parametrize(
    ("lines", "level"),
    [
        # An open read transaction.
        ("1: POSIX  ADVISORY  READ 7 00:35:1001 1073741826 1073742335", SqliteLock.SHARED),
        # BEGIN IMMEDIATE: RESERVED beside SHARED.
        (
            "1: POSIX  ADVISORY  WRITE 7 00:35:1001 1073741825 1073741825\n"
            "2: POSIX  ADVISORY  READ 7 00:35:1001 1073741826 1073742335",
            SqliteLock.RESERVED,
        ),
        # A writer waiting for readers: PENDING and RESERVED merged into one range.
        (
            "1: POSIX  ADVISORY  WRITE 7 00:35:1001 1073741824 1073741825\n"
            "2: POSIX  ADVISORY  READ 7 00:35:1001 1073741826 1073742335",
            SqliteLock.PENDING,
        ),
        # BEGIN EXCLUSIVE: the three merged into one WRITE range.
        ("1: POSIX  ADVISORY  WRITE 7 00:35:1001 1073741824 1073742335", SqliteLock.EXCLUSIVE),
        # WAL with locking_mode=EXCLUSIVE: no RESERVED byte, so two lines.
        (
            "1: POSIX  ADVISORY  WRITE 7 00:35:1001 1073741826 1073742335\n"
            "2: POSIX  ADVISORY  WRITE 7 00:35:1001 1073741824 1073741824",
            SqliteLock.EXCLUSIVE,
        ),
        # The pending byte READ for the instant it takes to get SHARED.
        ("1: POSIX  ADVISORY  READ 7 00:35:1001 1073741824 1073741824", SqliteLock.SHARED),
        # Not SQLite: a whole-file lock, a flock, an OFD lock, a range past the shared bytes.
        ("1: POSIX  ADVISORY  WRITE 7 00:35:1001 0 EOF", None),
        ("1: FLOCK  ADVISORY  WRITE 7 00:35:1001 1073741824 1073742335", None),
        ("1: OFDLCK ADVISORY  WRITE -1 00:35:1001 1073741824 1073742335", None),
        ("1: POSIX  ADVISORY  READ 7 00:35:1001 1073741826 1073742336", None),
        ("1: POSIX  ADVISORY  READ 7 00:35:1001 1073741826 EOF", None),
        # A waiter is a request, not a lock held.
        ("1: -> POSIX  ADVISORY  WRITE 7 00:35:1001 1073741824 1073742335", None),
    ],
)
def test_lock_level_from_lines(lines, level):
    assert sqlite_lock_level(locks(lines)) == level
    assert any(is_sqlite_lock(lock) for lock in locks(lines)) == (level is not None)


def test_several_lines_of_one_connection_are_one_finding():
    found = find_sqlite_databases(
        locks(
            "1: POSIX  ADVISORY  WRITE 7 00:35:1001 1073741825 1073741825\n"
            "2: POSIX  ADVISORY  READ 7 00:35:1001 1073741826 1073742335\n"
            "3: POSIX  ADVISORY  READ 8 00:35:1001 1073741826 1073742335\n"
        ),
        [EFS],
    )
    assert [(finding.pid, finding.lock) for finding in found] == [
        (7, SqliteLock.RESERVED),
        (8, SqliteLock.SHARED),
    ]


def test_databases_off_network_mounts_are_not_findings():
    lines = locks("1: POSIX  ADVISORY  READ 7 fd:02:1001 1073741826 1073742335")
    assert find_sqlite_databases(lines, [EFS]) == ()
    assert sqlite_lock_holders(lines, {EFS.device}) == ()
    assert sqlite_lock_holders(lines, {(253, 2)}) == (7,)


def test_waiters_are_contention_on_the_holders_finding_not_databases():
    finding = only(
        find_sqlite_databases(
            locks(
                "6: POSIX  ADVISORY  WRITE 1280 00:35:1001 1073741824 1073742335\n"
                "6: -> POSIX  ADVISORY  READ 1281 00:35:1001 1073741826 1073742335\n"
                "6: -> POSIX  ADVISORY  READ 1279 00:35:1001 1073741826 1073742335\n"
            ),
            [EFS],
        )
    )
    assert (finding.pid, finding.lock, finding.waiting_pids) == (1280, SqliteLock.EXCLUSIVE, (1279, 1281))
    assert "Contention: pid(s) 1279, 1281 wait" in finding.message


def test_a_holder_outside_the_pid_namespace_is_reported_without_a_pid():
    finding = only(
        find_sqlite_databases(locks("1: POSIX  ADVISORY  READ 0 00:35:1001 1073741826 1073742335"), [EFS])
    )
    assert (finding.pid, finding.mode, finding.severity) == (None, JournalMode.UNKNOWN, Severity.WARNING)
    assert "outside this pid namespace" in finding.message


WAL_READER_LOCKS = (
    "1: POSIX  ADVISORY  READ 7 00:35:1002 123 123\n"
    "2: POSIX  ADVISORY  READ 7 00:35:1002 128 128\n"
    "3: POSIX  ADVISORY  READ 7 00:35:1001 1073741826 1073742335\n"
)
SHM_MAPPED = "7f6632e85000-7f6632e8d000 rw-s 00000000 00:35 1002                       /data/app.db-shm"


@pytest.mark.parametrize(
    ("lock_lines", "files", "mapped", "mode", "severity", "seen"),
    [
        pytest.param(
            WAL_READER_LOCKS,
            [("/data/app.db", DB), ("/data/app.db-wal", WAL), ("/data/app.db-shm", SHM)],
            SHM_MAPPED,
            JournalMode.WAL,
            Severity.CRITICAL,
            "(-shm mapped, -wal open, WAL-index locks READ0, DMS)",
            id="wal-shm-mapped",
        ),
        pytest.param(
            WAL_READER_LOCKS,
            [("/data/app.db", DB), ("/data/app.db-shm", SHM)],
            "",
            JournalMode.WAL,
            Severity.CRITICAL,
            "(-shm open, WAL-index locks READ0, DMS)",
            id="wal-shm-open-not-yet-mapped",
        ),
        pytest.param(
            "1: POSIX  ADVISORY  WRITE 7 00:35:1001 1073741826 1073742335\n"
            "2: POSIX  ADVISORY  WRITE 7 00:35:1001 1073741824 1073741824\n",
            [("/data/app.db", DB), ("/data/app.db-wal", WAL)],
            "",
            JournalMode.WAL,
            Severity.WARNING,
            "(-wal open, no -shm)",
            id="wal-locking-mode-exclusive-heap-index",
        ),
        pytest.param(
            "1: POSIX  ADVISORY  WRITE 7 00:35:1001 1073741825 1073741825\n"
            "2: POSIX  ADVISORY  READ 7 00:35:1001 1073741826 1073742335\n",
            [("/data/app.db", DB), ("/data/app.db-journal", JOURNAL)],
            "",
            JournalMode.ROLLBACK,
            Severity.WARNING,
            "(-journal open)",
            id="rollback-journal-open",
        ),
        pytest.param(
            "1: POSIX  ADVISORY  READ 7 00:35:1001 1073741826 1073742335\n",
            [("/data/app.db", DB)],
            "",
            JournalMode.ROLLBACK,
            Severity.WARNING,
            "(no -wal or -shm open)",
            id="rollback-reader",
        ),
        pytest.param(
            WAL_READER_LOCKS,
            [],
            "",
            JournalMode.WAL,
            Severity.CRITICAL,
            "(WAL-index locks READ0, DMS on a -shm beside it)",
            id="wal-from-locks-alone",
        ),
        pytest.param(
            "1: POSIX  ADVISORY  READ 7 00:35:1001 1073741826 1073742335\n",
            [("/data/other.db", FileId(0, 53, 9))],
            "",
            JournalMode.UNKNOWN,
            Severity.WARNING,
            "pid 7 holds SHARED. Its journal mode is not visible",
            id="holder-no-longer-shows-the-file",
        ),
    ],
)
def test_journal_mode_from_open_files_mappings_and_locks(lock_lines, files, mapped, mode, severity, seen):
    finding = only(find_sqlite_databases(locks(lock_lines), [EFS], {7: process(7, *files, mapped=mapped)}))
    assert (finding.mode, finding.severity) == (mode, severity)
    assert seen in finding.message
    assert finding.remedy == (WAL_REMEDY if mode is JournalMode.WAL else REMEDY)


def test_a_mapped_database_gives_its_path_but_not_its_mode_without_descriptors():
    # PRAGMA mmap_size maps the database itself; with no descriptors to look at,
    # the absence of a -wal or -shm proves nothing.
    mapped = "7f0000000000-7f0000100000 r--s 00000000 00:35 1001                       /data/app.db"
    finding = only(
        find_sqlite_databases(
            locks("1: POSIX  ADVISORY  READ 7 00:35:1001 1073741826 1073742335"),
            [EFS],
            {7: process(7, mapped=mapped)},
        )
    )
    assert (finding.path, finding.mode, finding.severity) == (
        "/data/app.db",
        JournalMode.UNKNOWN,
        Severity.WARNING,
    )


def test_finding_names_the_process_pod_volume_and_path():
    finding = only(
        find_sqlite_databases(
            locks(WAL_READER_LOCKS),
            [EFS],
            {7: process(7, ("/data/app.db", DB), ("/data/app.db-shm", SHM), mapped=SHM_MAPPED)},
        )
    )
    assert finding.to_dict() == {
        "severity": "critical",
        "mode": "wal",
        "pid": 7,
        "pod_uid": POD,
        "container_id": CONTAINER,
        "device": "0:53",
        "inode": 1001,
        "path": "/data/app.db",
        "mount_point": KUBELET_MOUNT,
        "volume_name": "pvc-42",
        "lock": "SHARED",
        "message": finding.message,
        "remedy": WAL_REMEDY,
    }
    assert finding.message.startswith(
        f"SQLite database /data/app.db in WAL mode on nfs4 {KUBELET_MOUNT}: pid 7"
    )
    # The agent's conversion: the dict is exactly the report's field set.
    assert SqliteDatabase.model_validate(finding.to_dict()).to_wire()["podUid"] == POD


def test_wal_index_locks_pair_with_databases_only_when_the_count_says_so():
    # Two databases, one -shm: one is WAL, the other is not known, so neither is called WAL.
    two_databases_one_shm = locks(
        "1: POSIX  ADVISORY  READ 7 00:35:1002 128 128\n"
        "2: POSIX  ADVISORY  READ 7 00:35:1001 1073741826 1073742335\n"
        "3: POSIX  ADVISORY  READ 7 00:35:2001 1073741826 1073742335\n"
    )
    assert {finding.mode for finding in find_sqlite_databases(two_databases_one_shm, [EFS])} == {
        JournalMode.UNKNOWN
    }
    # Two and two: both are WAL, but which -shm is whose is not known, so no lock names.
    two_and_two = locks(
        "1: POSIX  ADVISORY  READ 7 00:35:1002 128 128\n"
        "2: POSIX  ADVISORY  WRITE 7 00:35:2002 120 120\n"
        "3: POSIX  ADVISORY  READ 7 00:35:1001 1073741826 1073742335\n"
        "4: POSIX  ADVISORY  READ 7 00:35:2001 1073741826 1073742335\n"
    )
    found = find_sqlite_databases(two_and_two, [EFS])
    assert {finding.mode for finding in found} == {JournalMode.WAL}
    assert all("(WAL-index locks on a -shm beside it)" in finding.message for finding in found)
    # Another process's -shm says nothing about this one's database.
    other_process = locks(
        "1: POSIX  ADVISORY  READ 8 00:35:1002 128 128\n"
        "2: POSIX  ADVISORY  READ 7 00:35:1001 1073741826 1073742335\n"
    )
    assert only(find_sqlite_databases(other_process, [EFS])).mode is JournalMode.UNKNOWN


def test_wal_writer_lock_is_named():
    finding = only(
        find_sqlite_databases(
            locks(
                "1: POSIX  ADVISORY  WRITE 7 00:35:1002 120 120\n"
                "2: POSIX  ADVISORY  READ 7 00:35:1002 123 123\n"
                "3: POSIX  ADVISORY  READ 7 00:35:1002 128 128\n"
                "4: POSIX  ADVISORY  READ 7 00:35:1001 1073741826 1073742335\n"
            ),
            [EFS],
        )
    )
    assert "WAL-index locks WRITE, READ0, DMS" in finding.message


def test_a_database_open_without_a_lock_is_info_once_it_is_known_to_be_sqlite():
    lines = locks("1: POSIX  ADVISORY  READ 7 00:35:1001 1073741826 1073742335")
    idle = process(
        9, ("/data/app.db", DB), ("/data/app.db", DB), pod=OTHER_POD
    )  # two descriptors, one finding
    found = find_sqlite_databases(lines, [EFS], {9: idle})
    assert [(finding.pid, finding.severity, finding.mode, finding.lock) for finding in found] == [
        (7, Severity.WARNING, JournalMode.UNKNOWN, SqliteLock.SHARED),
        (9, Severity.INFO, JournalMode.UNKNOWN, None),
    ]
    assert "pid 9 has it open. No lock is held now" in found[1].message
    # Known only from its header: the same.
    found = find_sqlite_databases((), [EFS], {9: idle}, header_databases={DB})
    assert [(finding.pid, finding.severity) for finding in found] == [(9, Severity.INFO)]
    # Not known to be SQLite: nothing.
    assert find_sqlite_databases((), [EFS], {9: idle}) == ()


def test_open_wal_database_without_lock_is_still_critical():
    found = find_sqlite_databases(
        (), [EFS], {9: process(9, ("/data/app.db", DB), ("/data/app.db-shm", SHM))}, header_databases={DB}
    )
    assert [(finding.mode, finding.severity) for finding in found] == [(JournalMode.WAL, Severity.CRITICAL)]


def test_findings_are_ordered_by_severity():
    found = find_sqlite_databases(
        locks(
            "1: POSIX  ADVISORY  READ 7 00:35:3001 1073741826 1073742335\n"
            "2: POSIX  ADVISORY  READ 8 00:35:1002 128 128\n"
            "3: POSIX  ADVISORY  READ 8 00:35:1001 1073741826 1073742335\n"
        ),
        [EFS],
        {9: process(9, ("/data/idle.db", FileId(0, 53, 5)))},
        header_databases={FileId(0, 53, 5)},
    )
    assert [finding.severity for finding in found] == [Severity.CRITICAL, Severity.WARNING, Severity.INFO]


def test_mount_of_a_shared_superblock_is_the_process_pods_own():
    # Two pods on one node mount the same export: one superblock, one device, two volumes.
    other = NetworkMount(0, 53, KUBELET_MOUNT.replace(POD, OTHER_POD), "nfs4", OTHER_POD, "pvc-43")
    staging = NetworkMount(
        0, 53, "/var/lib/kubelet/plugins/kubernetes.io/csi/efs.csi.aws.com/x/globalmount", "nfs4"
    )
    lines = locks("1: POSIX  ADVISORY  READ 7 00:35:1001 1073741826 1073742335")
    mounts = [staging, EFS, other]

    in_pod = only(find_sqlite_databases(lines, mounts, {7: process(7, pod=OTHER_POD)}))
    assert (in_pod.mount_point, in_pod.volume_name, in_pod.pod_uid) == (
        other.mount_point,
        "pvc-43",
        OTHER_POD,
    )
    unknown_pod = only(find_sqlite_databases(lines, mounts))
    assert (unknown_pod.mount_point, unknown_pod.volume_name) == (staging.mount_point, None)
    one_volume = only(find_sqlite_databases(lines, [staging, EFS]))
    assert (one_volume.mount_point, one_volume.volume_name) == (EFS.mount_point, "pvc-42")


def test_a_pod_with_two_volumes_on_one_superblock_names_neither_without_the_path():
    # Two PVs of one export in one pod: the kernel shares the superblock, so the device cannot say which.
    second = NetworkMount(0, 53, KUBELET_MOUNT.replace("pvc-42", "pvc-44"), "nfs4", POD, "pvc-44")
    lines = locks("1: POSIX  ADVISORY  READ 7 00:35:1001 1073741826 1073742335")
    unread = only(find_sqlite_databases(lines, [EFS, second], {7: process(7, pod=POD)}))
    assert (unread.pod_uid, unread.volume_name, unread.path) == (POD, None, None)


@pytest.mark.parametrize(
    ("mount_point", "kubelet_root", "expected"),
    [
        (KUBELET_MOUNT, "/var/lib/kubelet", PodVolume(POD, "pvc-42")),
        (
            f"/var/lib/kubelet/pods/{POD}/volumes/kubernetes.io~nfs/shared",
            "/var/lib/kubelet/",
            PodVolume(POD, "shared"),
        ),
        (
            f"/data/kubelet/pods/{POD}/volumes/kubernetes.io~csi/pvc-1/mount",
            "/data/kubelet",
            PodVolume(POD, "pvc-1"),
        ),
        (KUBELET_MOUNT, "/data/kubelet", None),
        (f"/var/lib/kubelet/pods/{POD}/volumes/kubernetes.io~csi/pvc-42", "/var/lib/kubelet", None),
        (f"/var/lib/kubelet/pods/{POD}/volume-subpaths/pvc-42/app/0", "/var/lib/kubelet", None),
        (
            "/var/lib/kubelet/plugins/kubernetes.io/csi/efs.csi.aws.com/abc/globalmount",
            "/var/lib/kubelet",
            None,
        ),
    ],
)
def test_kubelet_pod_volume(mount_point, kubelet_root, expected):
    assert kubelet_pod_volume(mount_point, kubelet_root) == expected


def test_network_mounts_keep_network_types_with_their_volumes():
    def entry(mount_point: str, fstype: str, minor: int) -> MountinfoEntry:
        return MountinfoEntry(1, 0, 0, minor, "/", mount_point, "rw", (), fstype, "src", "rw", 1)

    entries = [entry("/", "ext4", 1), entry(KUBELET_MOUNT, "nfs4", 53), entry("/mnt/nfs3", "nfs", 54)]
    by_function = network_mounts(entries, {"nfs", "nfs4"}, kubelet_pod_volume)
    assert by_function == (EFS, NetworkMount(0, 54, "/mnt/nfs3", "nfs"))
    by_mapping = network_mounts(entries, {"nfs4"}, {KUBELET_MOUNT: (POD, "pvc-42")})
    assert by_mapping == (EFS,)
    assert network_mounts(entries, {"nfs4"}) == (NetworkMount(0, 53, KUBELET_MOUNT, "nfs4"),)


@pytest.mark.parametrize(
    ("text", "expected"),
    [("nfs,nfs4", {"nfs", "nfs4"}), (" tmpfs ", {"tmpfs"}), ("nfs4,,nfs4,", {"nfs4"})],
)
def test_parse_network_fstypes(text, expected):
    assert parse_network_fstypes(text) == expected


@pytest.mark.parametrize("text", ["", ",", " , "])
def test_parse_network_fstypes_refuses_an_empty_list(text):
    with pytest.raises(ValueError, match="names no filesystem type"):
        parse_network_fstypes(text)


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (b"SQLite format 3\x00\x10\x00\x01\x01", True),
        (b"SQLite format 3\x00", True),
        (b"SQLite format 3", False),
        (b"SQLite format 2\x00", False),
        (b"\x37\x7f\x06\x82" + bytes(12), False),  # a -wal file's magic
        (b"", False),
    ],
)
def test_is_sqlite_header(data, expected):
    assert is_sqlite_header(data) is expected
