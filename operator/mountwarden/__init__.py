"""mountwarden: per-consumer NFS mount contracts for Kubernetes, proven on the nodes."""

__version__ = "0.1.0"
