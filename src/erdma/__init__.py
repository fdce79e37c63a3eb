"""erdma-k8s: Elastic RDMA and RDMA NICs for Kubernetes and Docker.

gRPC's C core logs through absl at INFO by default (since grpcio 1.6x), so a connection closed
at shutdown printed lines such as ``I1206 ... chttp2_transport.cc:1403] ...: Got goaway`` on the
programs' stderr, between their JSON log lines and into `erdma sim`'s output. Its errors are
kept; set ``GRPC_VERBOSITY`` (DEBUG, INFO) to see more. This runs before anything imports grpc.
"""

import os

os.environ.setdefault("GRPC_VERBOSITY", "ERROR")
os.environ.setdefault("GLOG_minloglevel", "2")

__version__ = "0.1.0"
