#!/bin/sh
# A network namespace that is an independent NFS client of the VM's server.
# Usage: netns.sh NAME INDEX   (INDEX 1-250 picks 10.77.INDEX.0/24)
# The server side of the veth pair is 10.77.INDEX.1, the client 10.77.INDEX.2. Mounts are
# made with `nsenter --net=/run/netns/NAME mount ...`: the NFS client (and its caches,
# superblocks and connections) belongs to the network namespace, while the mount itself
# stays in the VM's one mount namespace, where the agent's scan of /proc/1 sees it.
# Each namespace gets its own NFSv4 client identifier, otherwise the server would take two
# namespaces on one host name for one client and expire the state of the first.
set -eu
name=$1; index=$2
ip netns add "$name"
ip link add "vh-$index" type veth peer name "vc-$index"
ip link set "vc-$index" netns "$name"
ip addr add "10.77.$index.1/24" dev "vh-$index"
ip link set "vh-$index" up
ip -n "$name" addr add "10.77.$index.2/24" dev "vc-$index"
ip -n "$name" link set "vc-$index" up
ip -n "$name" link set lo up
ip netns exec "$name" sh -c "echo mountwarden-lab-$name > /sys/fs/nfs/net/nfs_client/identifier"
echo "10.77.$index.1"
