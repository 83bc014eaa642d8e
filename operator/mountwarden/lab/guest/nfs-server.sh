#!/bin/sh
# Start the kernel NFS server inside the lab VM, exporting a tmpfs.
# Usage: nfs-server.sh MAX_BLOCK_SIZE DELEGATIONS EXPORT_DIR [EXPORT_DIR...]
# Grace and lease times are cut before nfsd starts, otherwise the first locks and opens
# block for up to 90 s (kernel-lab-notes.md). max_block_size caps the rsize/wsize the
# server offers; knfsd scales its default with the VM's memory (128 KiB at 512 MiB-1 GiB),
# while EFS offers 1 MiB. DELEGATIONS=0 makes the server behave as EFS does (no NFSv4
# delegations: "client delegation or callbacks of any type" are unsupported, AWS EFS docs,
# "Unsupported NFSv4.0 and 4.1 features"): without them, no recall keeps another client's cache fresh.
# knfsd hands out delegations only while file leases are enabled.
set -eu
max_block=$1; delegations=$2; shift 2
echo "$delegations" > /proc/sys/fs/leases-enable
: > /etc/exports
fsid=1
for dir in "$@"; do
  mkdir -p "$dir"
  mount -t tmpfs -o size=256m "tmpfs-export-$fsid" "$dir"
  chmod 1777 "$dir"
  # A tmpfs has no UUID for nfsd to name it by: an explicit fsid is required.
  echo "$dir *(rw,sync,no_subtree_check,no_root_squash,insecure,fsid=$fsid)" >> /etc/exports
  fsid=$((fsid + 1))
done
mountpoint -q /proc/fs/nfsd || mount -t nfsd nfsd /proc/fs/nfsd
echo 10 > /proc/fs/nfsd/nfsv4gracetime
echo 10 > /proc/fs/nfsd/nfsv4leasetime
echo 10 > /proc/sys/fs/nfs/nlm_grace_period
echo "$max_block" > /proc/fs/nfsd/max_block_size
mkdir -p /run/rpcbind /var/lib/nfs/rpc_pipefs /var/lib/nfs/v4recovery
mountpoint -q /var/lib/nfs/rpc_pipefs || mount -t rpc_pipefs sunrpc /var/lib/nfs/rpc_pipefs
rpcbind -w
rpc.statd --no-notify
exportfs -ra
rpc.mountd
rpc.nfsd 8
echo "nfs server up: max_block_size=$(cat /proc/fs/nfsd/max_block_size) delegations=$delegations versions=$(cat /proc/fs/nfsd/versions)"
