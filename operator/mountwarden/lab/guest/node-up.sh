#!/bin/sh
# Make the lab VM a Kubernetes node: network, containerd and runc (Debian), the CNI plugins
# (Debian), images made from the VM's own files, and the kubelet (built from the same source as
# the control plane, shared in at /mnt/lab-bin). The host writes the configuration files into
# /mnt/lab-io/node/ first. Usage: node-up.sh NODE_NAME NODE_IP GATEWAY SERVICE_IP API_SERVER(host:port) DNS_IP
set -eu
name=$1; ip=$2; gateway=$3; service_ip=$4; api_server=$5; dns_ip=$6
config=/mnt/lab-io/node
say() { echo "node-up: $*"; }

# The only network device is QEMU's user network, restricted: nothing leaves the VM except the
# forwarded connections to the host's API server (10.0.2.100), and nothing enters it except the API
# server's own connections to the cluster (webhooks, kubelet logs) through the proxy below.
ip link set eth0 up
ip addr add "$ip/24" dev eth0
ip route add default via "$gateway"
hostname "$name"
echo "$ip $name" >> /etc/hosts
: > /etc/resolv.conf

# No kube-proxy runs here: the one Service the pods need, `kubernetes` (the API server, for the chart's
# operator and agent), is its ClusterIP on this node's loopback, forwarded to the API server by socat. The
# cluster's DNS (the kubelet's clusterDNS) knows that Service's names and answers every other name "no such".
ip addr add "$service_ip/32" dev lo
socat "TCP-LISTEN:443,bind=$service_ip,fork,reuseaddr" "TCP:$api_server" > /var/log/socat-kubernetes.log 2>&1 &
ip addr add "$dns_ip/32" dev lo
dnsmasq --conf-file=/dev/null --no-resolv --no-hosts --no-poll --user=root --bind-interfaces --listen-address="$dns_ip" \
  --address=/#/ --address=/kubernetes.default.svc/"$service_ip" --address=/kubernetes.default.svc.cluster.local/"$service_ip" \
  --log-facility=/var/log/dnsmasq.log
# The API server's way into the cluster network (its egress selector's `cluster` connection: HTTP CONNECT over
# mutual TLS): QEMU forwards the host's loopback port to this TLS end, in front of the proxy that reaches pod IPs
# and the kubelet from here. Only the API server's client certificate (the cluster's CA) gets through.
if [ -f "$config/proxy.crt" ]; then
  tinyproxy -c "$config/tinyproxy.conf"
  socat "OPENSSL-LISTEN:3128,bind=$ip,fork,reuseaddr,cert=$config/proxy.crt,key=$config/proxy.key,cafile=$config/proxy-ca.crt,verify=1" \
    TCP:127.0.0.1:3129 > /var/log/socat-egress.log 2>&1 &
fi

# containerd's and the kubelet's state on tmpfs of their own (overlayfs wants a real upper dir).
for dir in /var/lib/containerd /var/lib/kubelet /run/containerd /var/log/pods /var/log/containers \
           /etc/containerd /etc/kubernetes /etc/cni/net.d /opt/cni; do
  mkdir -p "$dir"
done
mount -t tmpfs -o mode=0711 tmpfs /var/lib/containerd
mount -t tmpfs -o mode=0750 tmpfs /var/lib/kubelet
# Shared, as systemd makes every mount at boot (mount_namespaces(7)) on the nodes users run: a container's
# HostToContainer mount (the chart's agent.root=false) needs its source on a shared or slave mount, and
# containerd refuses to create it otherwise.
mount --make-rshared /var/lib/kubelet
# The kubelet's cgroupfs driver needs the controllers handed down from the root.
for controller in cpuset cpu io memory pids hugetlb; do
  echo "+$controller" > /sys/fs/cgroup/cgroup.subtree_control 2>/dev/null || say "no $controller controller"
done
sysctl -qw net.ipv4.ip_forward=1
sysctl -qw kernel.panic=10 kernel.panic_on_oops=1 vm.overcommit_memory=1

cp "$config/containerd.toml" /etc/containerd/config.toml
cp "$config/cni.conflist" /etc/cni/net.d/10-lab.conflist
cp "$config/kubelet.yaml" /etc/kubernetes/kubelet.yaml
cp "$config/kubelet.kubeconfig" /etc/kubernetes/kubelet.conf
cp "$config/ca.crt" /etc/kubernetes/ca.crt

containerd --config /etc/containerd/config.toml > /var/log/containerd.log 2>&1 &
for _ in $(seq 1 300); do [ -S /run/containerd/containerd.sock ] && break; sleep 0.2; done
[ -S /run/containerd/containerd.sock ] || { say "containerd did not start"; tail -20 /var/log/containerd.log; exit 1; }

# The pause image (made on the host from hack/nodebin's pause) and the tools image (made from this
# root when the image was built): no registry, no network.
ctr -n k8s.io images import "$config/pause.tar" > /dev/null
ctr -n k8s.io images import /opt/mountwarden-lab/tools.tar > /dev/null

/mnt/lab-bin/kubelet --config=/etc/kubernetes/kubelet.yaml --kubeconfig=/etc/kubernetes/kubelet.conf \
  --hostname-override="$name" --node-ip="$ip" --v=2 > /var/log/kubelet.log 2>&1 &
echo $! > /run/kubelet.pid
say "containerd and the kubelet started on $name ($ip)"
