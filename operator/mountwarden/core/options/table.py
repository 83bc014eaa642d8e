"""The NFS client's option table, with the meaning, cost and kernel default of each option.

Mirrors the Linux NFS client's own parameter table (fs/nfs/fs_context.c), the
generic VFS flags users pass next to it, and the options of amazon-efs-utils'
``mount.efs`` helper, which never reach the kernel. The texts here are the ones
``mountwarden options explain`` prints and that findings quote.
"""

from dataclasses import dataclass
from enum import StrEnum

from mountwarden.core.findings import OptionValue

__all__ = ["OptionValue"]  # defined with the findings, at the bottom of the core, and used by every option module


class Kind(StrEnum):
    FLAG = "flag"  # a word with no value: hard, tls
    SWITCH = "switch"  # a word with a negated spelling: cto/nocto, ro/rw
    NUMBER = "number"  # an unsigned integer: timeo=600
    CHOICE = "choice"  # one of a fixed set: lookupcache=all|none|positive
    TEXT = "text"  # free text: addr=10.0.0.1, context="a,b"


class Origin(StrEnum):
    NFS = "nfs"  # parsed by the kernel NFS client
    VFS = "vfs"  # generic superblock/mount flags
    MOUNT_HELPER = "mount.nfs"  # consumed by mount.nfs in user space, never in the mount table
    EFS_UTILS = "efs-utils"  # consumed by mount.efs (amazon-efs-utils), never in the mount table
    SECURITY = "security"  # LSM options such as SELinux contexts


class Concern(StrEnum):
    """What a difference in this option puts at risk; it sets a finding's severity."""

    CONSISTENCY = "consistency"  # what other clients' changes you see, and when: drift is an error
    DURABILITY = "durability"  # what survives a crash or timeout: drift is an error
    PERFORMANCE = "performance"  # speed and cost: drift is a warning
    IDENTITY = "identity"  # addresses, ports, names: informational


@dataclass(frozen=True, slots=True)
class OptionSpec:
    name: str
    kind: Kind
    origin: Origin
    concern: Concern
    meaning: str
    consequence: str = ""
    #: For a SWITCH: the spelling that means False (nocto for cto, rw for ro).
    negation: str | None = None
    choices: tuple[str, ...] = ()
    minimum: int | None = None
    maximum: int | None = None
    #: What the kernel uses when the option is absent (None: negotiated or unset).
    default: OptionValue | None = None
    #: Other spellings accepted for the same option (nfsvers for vers).
    aliases: tuple[str, ...] = ()
    deprecated: str = ""

    @property
    def visible_in_mount_table(self) -> bool:
        """Whether /proc/mounts and mountstats can show this option at all."""
        return self.origin not in (Origin.MOUNT_HELPER, Origin.EFS_UTILS)


#: Sets of flags of which exactly one holds; the first is the kernel default.
EXCLUSIVE_FLAGS: dict[str, tuple[str, ...]] = {
    "recovery": ("hard", "soft", "softerr"),
    "atime": ("relatime", "noatime", "strictatime"),
}

_U32 = 2**32 - 1
#: What one TCP flow carries between EC2 instances outside a cluster placement group (EC2 User Guide, "Amazon
#: EC2 instance network bandwidth"): the cap that nconnect spreads load past.
DEFAULT_PER_FLOW_CAP_GBPS = 5.0


def _spec(name: str, kind: Kind, origin: Origin, concern: Concern, meaning: str, consequence: str = "", **kw) -> OptionSpec:
    return OptionSpec(name, kind, origin, concern, meaning, consequence, **kw)


# Short names keep the table one option per line or two.
NFS, VFS, HELPER, EFS, LSM = Origin.NFS, Origin.VFS, Origin.MOUNT_HELPER, Origin.EFS_UTILS, Origin.SECURITY
CONSISTENCY, DURABILITY, PERFORMANCE, IDENTITY = (
    Concern.CONSISTENCY, Concern.DURABILITY, Concern.PERFORMANCE, Concern.IDENTITY
)

_ATTR_CACHE = (
    "Attribute cache lifetime. stat() answers from the cache for up to this many seconds, "
    "so another client's change to size or mtime can stay invisible that long"
)

#: The table, in the canonical order used when options are printed.
OPTIONS: tuple[OptionSpec, ...] = (
    _spec("ro", Kind.SWITCH, VFS, CONSISTENCY, "Mount read-only (rw: read-write).",
          "Nothing can be written; with nocto and a long actimeo, the cheapest way to serve static data.",
          negation="rw", default=False),
    _spec("vers", Kind.CHOICE, NFS, CONSISTENCY, "NFS protocol version (v2/v3/v4/v4.x and nfsvers= are the same option).",
          "4.1 is the EFS baseline (sessions, exactly-once semantics); plain 4 negotiates the highest 4.x.",
          choices=("2", "3", "4", "4.0", "4.1", "4.2"), aliases=("nfsvers",)),
    _spec("proto", Kind.CHOICE, NFS, PERFORMANCE, "Transport for NFS traffic (tcp/udp/rdma are shorthands).",
          "UDP loses data under load and is refused by NFSv4; use tcp.",
          choices=("tcp", "tcp6", "udp", "udp6", "rdma", "rdma6"), default="tcp"),
    _spec("port", Kind.NUMBER, NFS, IDENTITY, "Server port for NFS (0: ask rpcbind; EFS over TLS shows the local stunnel port).",
          minimum=0, maximum=65535),
    _spec("nconnect", Kind.NUMBER, NFS, PERFORMANCE, "TCP connections to the server for this client.",
          "Spreads load past the 5 Gbit/s cap of one flow between EC2 instances outside a cluster placement "
          "group (EC2 User Guide, 'Amazon EC2 instance network bandwidth'): size it as ceil(min(instance "
          "bandwidth, file-system limit) / 5 Gbit/s) + 1. Fixed per client: a later mount of the same server "
          "(same version, transport and address) shares the first mount's connections and its own value is "
          "ignored (kernel lab). Linux 5.3 or later (nfs(5)).",
          minimum=1, maximum=16, default=1),
    _spec("max_connect", Kind.NUMBER, NFS, PERFORMANCE, "Upper bound on transports added by session trunking.",
          "Fixed per client, like nconnect: a later mount of the same server runs with the first one's "
          "(kernel lab).", minimum=1, maximum=16, default=1),
    _spec("rsize", Kind.NUMBER, NFS, PERFORMANCE, "Largest READ payload in bytes (negotiated down to the server's maximum).",
          "Small values multiply round trips; EFS accepts up to 1 MiB.", minimum=1, maximum=_U32),
    _spec("wsize", Kind.NUMBER, NFS, PERFORMANCE, "Largest WRITE payload in bytes (negotiated down to the server's maximum).",
          "Small values multiply round trips; EFS accepts up to 1 MiB.", minimum=1, maximum=_U32),
    _spec("hard", Kind.FLAG, NFS, DURABILITY, "Retry a timed-out request forever (the default).",
          "Applications hang while the server is away, but no write is silently lost."),
    _spec("soft", Kind.FLAG, NFS, DURABILITY, "Fail a request with EIO after retrans retries.",
          "Timeouts become I/O errors that applications rarely handle: silent data corruption risk."),
    _spec("softerr", Kind.FLAG, NFS, DURABILITY, "Like soft, but fail with ETIMEDOUT.",
          "As soft: timeouts become errors."),
    _spec("timeo", Kind.NUMBER, NFS, DURABILITY, "Time before the first retransmission, in tenths of a second (600 = 60 s on TCP).",
          "Lower values retransmit into a congested server; EFS recommends 600. Not compared when mounts share a "
          "superblock: a later mount that differs only in timeo runs with the first one's (kernel lab).",
          minimum=1, maximum=_U32, default=600),
    _spec("retrans", Kind.NUMBER, NFS, DURABILITY, "Retransmissions before a major timeout (and, with soft, an error).",
          "Not compared when mounts share a superblock: a later mount that differs only in retrans runs with "
          "the first one's (kernel lab).", minimum=0, maximum=_U32, default=2),
    _spec("resvport", Kind.SWITCH, NFS, PERFORMANCE, "Use a privileged source port (noresvport: any port).",
          "noresvport lets the client reconnect on a new port after a network blip; EFS recommends it. "
          "Not compared when mounts share a superblock: a later mount runs with the first one's (kernel lab).",
          negation="noresvport", default=True),
    _spec("acregmin", Kind.NUMBER, NFS, CONSISTENCY, _ATTR_CACHE + " (lower bound, regular files).",
          "0 makes every stat a GETATTR round trip (metered as 4 KiB each on EFS).", minimum=0, maximum=_U32, default=3),
    _spec("acregmax", Kind.NUMBER, NFS, CONSISTENCY, _ATTR_CACHE + " (upper bound, regular files).",
          "Bounds how stale a file's size and mtime can be for a reader on another client.",
          minimum=0, maximum=_U32, default=60),
    _spec("acdirmin", Kind.NUMBER, NFS, CONSISTENCY, _ATTR_CACHE + " (lower bound, directories).",
          minimum=0, maximum=_U32, default=30),
    _spec("acdirmax", Kind.NUMBER, NFS, CONSISTENCY, _ATTR_CACHE + " (upper bound, directories).",
          "Bounds how long a new or removed file can go unnoticed in a directory listing.",
          minimum=0, maximum=_U32, default=60),
    _spec("actimeo", Kind.NUMBER, NFS, CONSISTENCY, "Sets acregmin, acregmax, acdirmin and acdirmax to one value.",
          "actimeo=0 disables attribute caching: every stat is a round trip; the mount table never shows actimeo.",
          minimum=0, maximum=_U32),
    _spec("ac", Kind.SWITCH, NFS, CONSISTENCY, "Attribute caching (noac: actimeo=0 plus synchronous writes).",
          "noac also makes every write synchronous: far slower than actimeo=0, and it does not refresh "
          "other clients' caches either.", negation="noac", default=True),
    _spec("lookupcache", Kind.CHOICE, NFS, CONSISTENCY, "Which directory-entry lookups are cached: all, positive (pos) or none.",
          "none revalidates every path component on every open (a LOOKUP round trip each); positive "
          "keeps hits but sees newly created files at once.", choices=("all", "none", "positive"), default="all"),
    _spec("cto", Kind.SWITCH, NFS, CONSISTENCY, "Close-to-open consistency (nocto: skip the revalidation on open).",
          "With cto, a file opened after another client closed it shows that client's writes. On NFSv4 without "
          "a delegation (EFS grants none) every open() is an OPEN round trip that returns fresh attributes, so "
          "nocto saves no round trip and open()+fstat() stays fresh; stat() by path is unaffected either way "
          "(kernel lab).", negation="nocto", default=True),
    _spec("sync", Kind.SWITCH, VFS, DURABILITY, "Write synchronously: every write() waits for the server (async: the default).",
          "Multiplies write latency by the round trip. It does not refresh another client's cache: readers "
          "still see what their attribute cache allows.", negation="async", default=False),
    _spec("lock", Kind.SWITCH, NFS, CONSISTENCY, "Send POSIX locks to the server (nolock: keep them local to this client).",
          "On NFSv3, nolock lets two clients hold the same lock: corrupts SQLite and anything that relies on "
          "locks. On NFSv4 the kernel ignores nolock: locks always reach the server (kernel lab).",
          negation="nolock", default=True),
    _spec("local_lock", Kind.CHOICE, NFS, CONSISTENCY, "Which lock types stay local: none, flock, posix or all.",
          "On NFSv3, all or posix means other clients do not see this client's locks. On NFSv4 the kernel "
          "ignores it and shows local_lock=none (kernel lab).",
          choices=("none", "flock", "posix", "all"), default="none"),
    _spec("acl", Kind.SWITCH, NFS, IDENTITY, "Use the NFSACL side protocol (NFSv3).", negation="noacl", default=True),
    _spec("sharecache", Kind.SWITCH, NFS, CONSISTENCY, "Share one superblock and cache between mounts of the same export.",
          "With sharecache (the default) a later mount of the same file system (any path of it) through the same "
          "client shares the first mount's superblock when they differ only in timeo, retrans, resvport, "
          "nconnect, max_connect, fsc, bsize or mountproto, and silently runs with the first one's values (or in "
          "options the kernel ignores, or in the mount's own flags such as noatime and nosuid); a difference in "
          "vers, ro, sync, rsize/wsize, the ac* times, lookupcache, cto, hard/soft/softerr, rdirplus, write, "
          "posix or trunkdiscovery (on NFSv3 also lock, local_lock, acl and port) gives it a superblock of its "
          "own (kernel lab). nosharecache always does, "
          "and nfs(5) calls that a data risk: multiple cached copies of the same file on one client can "
          "become out of sync after a local update of one of them.",
          negation="nosharecache", default=True),
    _spec("rdirplus", Kind.SWITCH, NFS, PERFORMANCE, "Use READDIRPLUS to fetch attributes with directory listings.",
          negation="nordirplus", default=True),
    _spec("fsc", Kind.SWITCH, NFS, PERFORMANCE, "Use the local FS-Cache (cachefilesd) for file data.",
          "Not compared when mounts share a superblock: a later mount runs with the first one's (kernel lab).",
          negation="nofsc", default=False),
    _spec("write", Kind.CHOICE, NFS, DURABILITY, "When cached writes are sent: lazy (default), eager or wait.",
          "eager/wait trade throughput for earlier error reporting.", choices=("lazy", "eager", "wait"), default="lazy"),
    _spec("softreval", Kind.SWITCH, NFS, CONSISTENCY, "With soft, serve stale cached attributes when the server is down.",
          negation="nosoftreval", default=False),
    _spec("sec", Kind.TEXT, NFS, IDENTITY, "Security flavours, colon-separated: sys, krb5, krb5i, krb5p, none.", default="sys"),
    _spec("xprtsec", Kind.CHOICE, NFS, IDENTITY, "Transport security: none, tls or mtls (RPC-with-TLS).",
          choices=("none", "tls", "mtls"), default="none"),
    _spec("minorversion", Kind.NUMBER, NFS, CONSISTENCY, "NFSv4 minor version (old spelling of vers=4.N).", minimum=0, maximum=2),
    _spec("intr", Kind.SWITCH, NFS, IDENTITY, "Allow signals to interrupt NFS calls.", negation="nointr",
          deprecated="ignored by the kernel since 2.6.25; fatal signals always interrupt"),
    _spec("posix", Kind.SWITCH, NFS, IDENTITY, "Request POSIX pathname semantics (NFSv2/v3 only).", negation="noposix"),
    _spec("migration", Kind.SWITCH, NFS, IDENTITY, "Support NFSv4 transparent state migration.", negation="nomigration",
          default=False),
    _spec("trunkdiscovery", Kind.SWITCH, NFS, PERFORMANCE, "Discover session trunking (NFSv4.1+).", negation="notrunkdiscovery"),
    _spec("bsize", Kind.NUMBER, NFS, PERFORMANCE, "Block size reported to applications.",
          "Not compared when mounts share a superblock: a later mount runs with the first one's (kernel lab).",
          minimum=0, maximum=_U32),
    _spec("namlen", Kind.NUMBER, NFS, IDENTITY, "Longest file name the server allows (reported, rarely set).",
          minimum=0, maximum=_U32),
    _spec("addr", Kind.TEXT, NFS, IDENTITY, "Server address the kernel talks to."),
    _spec("clientaddr", Kind.TEXT, NFS, IDENTITY, "Address the server uses for NFSv4 callbacks."),
    _spec("mountaddr", Kind.TEXT, NFS, IDENTITY, "Address of the NFSv2/v3 mountd."),
    _spec("mounthost", Kind.TEXT, HELPER, IDENTITY, "Host name of the NFSv2/v3 mountd."),
    _spec("mountport", Kind.NUMBER, NFS, IDENTITY, "Port of the NFSv2/v3 mountd.", minimum=0, maximum=65535),
    _spec("mountproto", Kind.CHOICE, NFS, IDENTITY, "Transport for the NFSv2/v3 MOUNT protocol.",
          "Not compared when mounts share a superblock: a later mount runs with the first one's (kernel lab).",
          choices=("tcp", "tcp6", "udp", "udp6")),
    _spec("mountvers", Kind.NUMBER, NFS, IDENTITY, "Version of the NFSv2/v3 MOUNT protocol.", minimum=1, maximum=3),
    _spec("rdma", Kind.FLAG, NFS, PERFORMANCE, "Use the RDMA transport (proto=rdma)."),
    _spec("tcp", Kind.FLAG, NFS, PERFORMANCE, "Use TCP (proto=tcp)."),
    _spec("udp", Kind.FLAG, NFS, PERFORMANCE, "Use UDP (proto=udp)."),
    _spec("sloppy", Kind.FLAG, HELPER, IDENTITY, "Let mount.nfs ignore options it does not know.",
          "Hides typos: an unknown option is dropped instead of failing the mount."),
    _spec("bg", Kind.FLAG, HELPER, IDENTITY, "Retry a failed mount in the background."),
    _spec("fg", Kind.FLAG, HELPER, IDENTITY, "Retry a failed mount in the foreground (the default)."),
    _spec("retry", Kind.NUMBER, HELPER, IDENTITY, "Minutes mount.nfs keeps retrying the mount.", minimum=0, maximum=_U32),
    _spec("suid", Kind.SWITCH, VFS, IDENTITY, "Honour set-user-ID bits (nosuid: ignore them).", negation="nosuid", default=True),
    _spec("dev", Kind.SWITCH, VFS, IDENTITY, "Honour device files (nodev: ignore them).", negation="nodev", default=True),
    _spec("exec", Kind.SWITCH, VFS, IDENTITY, "Allow executing programs (noexec: forbid).", negation="noexec", default=True),
    _spec("relatime", Kind.FLAG, VFS, PERFORMANCE, "Update access times only when older than mtime (the default)."),
    _spec("noatime", Kind.FLAG, VFS, PERFORMANCE, "Never update access times.", "Saves a SETATTR-like update on reads."),
    _spec("strictatime", Kind.FLAG, VFS, PERFORMANCE, "Update access times on every read."),
    _spec("nodiratime", Kind.FLAG, VFS, PERFORMANCE, "Never update directory access times."),
    _spec("lazytime", Kind.FLAG, VFS, PERFORMANCE, "Keep timestamp updates in memory only."),
    _spec("dirsync", Kind.FLAG, VFS, DURABILITY, "Make directory changes synchronous."),
    _spec("_netdev", Kind.FLAG, HELPER, IDENTITY, "Mark the file system as needing the network (for init systems)."),
    _spec("seclabel", Kind.FLAG, LSM, IDENTITY, "The file system carries security labels (shown by the kernel)."),
    _spec("context", Kind.TEXT, LSM, IDENTITY, "SELinux context for every file of the mount."),
    _spec("fscontext", Kind.TEXT, LSM, IDENTITY, "SELinux context of the file system itself."),
    _spec("defcontext", Kind.TEXT, LSM, IDENTITY, "SELinux context of unlabelled files."),
    _spec("rootcontext", Kind.TEXT, LSM, IDENTITY, "SELinux context of the mount's root inode."),
    _spec("tls", Kind.FLAG, EFS, IDENTITY, "Encrypt in transit through efs-utils' local stunnel/efs-proxy.",
          "The kernel then mounts 127.0.0.1:/ on a local port; the mount table shows that, not the file system."),
    _spec("notls", Kind.FLAG, EFS, IDENTITY, "Do not encrypt in transit (efs-utils)."),
    _spec("iam", Kind.FLAG, EFS, IDENTITY, "Authorise with IAM (efs-utils); requires tls."),
    _spec("accesspoint", Kind.TEXT, EFS, IDENTITY, "EFS access point to mount through (fsap-...); requires tls."),
    _spec("awsprofile", Kind.TEXT, EFS, IDENTITY, "AWS profile efs-utils takes IAM credentials from."),
    _spec("awscredsuri", Kind.TEXT, EFS, IDENTITY, "Credentials URI efs-utils takes IAM credentials from (ECS)."),
    _spec("ocsp", Kind.SWITCH, EFS, IDENTITY, "Check the certificate's revocation by OCSP (efs-utils).", negation="noocsp"),
    _spec("az", Kind.TEXT, EFS, IDENTITY, "Availability Zone whose mount target to use (One Zone file systems)."),
    _spec("crossaccount", Kind.FLAG, EFS, IDENTITY, "Resolve the mount target across AWS accounts (efs-utils)."),
    _spec("netns", Kind.TEXT, EFS, IDENTITY, "Network namespace efs-utils mounts in."),
)

#: Flag spellings that stand for a value of another option.
VERSION_FLAGS: dict[str, str] = {"v2": "2", "v3": "3", "v4": "4", "v4.0": "4.0", "v4.1": "4.1", "v4.2": "4.2"}
TRANSPORT_FLAGS: dict[str, str] = {"tcp": "tcp", "udp": "udp", "rdma": "rdma"}
LOOKUPCACHE_SPELLINGS: dict[str, str] = {"pos": "positive"}
ATTRIBUTE_CACHE_TIMES: tuple[str, ...] = ("acregmin", "acregmax", "acdirmin", "acdirmax")
SECURITY_FLAVOURS: frozenset[str] = frozenset(
    {"none", "sys", "krb5", "krb5i", "krb5p", "lkey", "lkeyi", "lkeyp", "spkm", "spkmi", "spkmp"}
)

BY_NAME: dict[str, OptionSpec] = {spec.name: spec for spec in OPTIONS}
#: Every spelling a user may write, mapped to its spec: names, aliases and negations.
SPELLINGS: dict[str, OptionSpec] = {
    **{spec.name: spec for spec in OPTIONS},
    **{alias: spec for spec in OPTIONS for alias in spec.aliases},
    **{spec.negation: spec for spec in OPTIONS if spec.negation},
}
for _flag in VERSION_FLAGS:
    SPELLINGS[_flag] = BY_NAME["vers"]
CANONICAL_ORDER: dict[str, int] = {spec.name: index for index, spec in enumerate(OPTIONS)}

#: Kernel defaults over TCP. UDP differs (timeo 11, retrans 3); see default_for().
KERNEL_DEFAULTS: dict[str, OptionValue] = {
    spec.name: spec.default for spec in OPTIONS if spec.default is not None and spec.name != "ac"
}
KERNEL_DEFAULTS.update({"hard": True, "relatime": True})


def default_for(name: str, proto: str = "tcp") -> OptionValue | None:
    """The value the kernel uses when ``name`` is absent from the mount table."""
    if proto.startswith("udp"):
        if name == "timeo":
            return 11
        if name == "retrans":
            return 3
    return KERNEL_DEFAULTS.get(name)


_GROUP_OF: dict[str, tuple[str, ...]] = {member: members for members in EXCLUSIVE_FLAGS.values() for member in members}


def exclusive_group(name: str) -> tuple[str, ...] | None:
    """The set of mutually exclusive flags ``name`` belongs to, if any."""
    return _GROUP_OF.get(name)
