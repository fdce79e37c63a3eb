"""erdma-k8s: Elastic RDMA and RDMA NICs for Kubernetes and Docker."""

__version__ = "0.1.0"
