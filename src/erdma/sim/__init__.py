"""What ``erdma sim`` runs: a fixture host builder, a fake kubelet and a simulated node.

These are product, not test fakes: ``erdma sim`` shows the real agent working on a node that
has no RDMA hardware. Fakes that only tests and benchmarks use live in ``tests/fakes``.
"""
