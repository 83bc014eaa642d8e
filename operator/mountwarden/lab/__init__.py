"""The kernel lab: a real Linux NFS client and server in a QEMU VM (`mountwarden lab`).

`build_image()` builds (or finds cached) a Debian 12 kernel and a minimal root from Debian
packages; `LabVM(image)` boots it with no network device, and runs commands inside through
a virtio-serial channel; `nfs_server()` starts a kernel NFS server in the VM that the VM's
own NFS client mounts over loopback. Every claim mountwarden makes about the kernel is
tested against it (tests/kernel).
"""
