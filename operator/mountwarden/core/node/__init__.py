"""What a node has mounted and how its mounts are doing, from the kernel's own tables.

- ``kubelet``: the kubelet's volume paths, mapped to pods and volumes;
- ``scan``: one scan of a node's mountinfo and mountstats, the pod volumes on network storage in it;
- ``activity``: throughput, transport health and stuck processes, and the nconnect advice;
- ``report``: a NodeMountReport as the operator reads it;
- ``check``: one pod volume against its contract.
"""
