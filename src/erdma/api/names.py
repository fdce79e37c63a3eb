"""Names and limits shared by every program, with no dependencies.

The resource names, the SMC-R annotation contract and kubelet's fixed names and limits are
what users, kubelet and the webhooks agree on. They are defined here once, below every other
layer, so the webhook can speak the agent's contract without importing the agent.
"""

from __future__ import annotations

#: the extended resource for eRDMA devices (the reference's name, which ACK users request)
ERDMA_RESOURCE = "aliyun/erdma"
#: the default extended resource for shared RDMA HCAs (Lingjun)
SHARED_RESOURCE = "rdma/hca"

#: the pod annotation that asks for SMC-R inside the pod
SMCR_ANNOTATION = "network.alibabacloud.com/erdma-smcr"

#: kubelet's registration socket in its device-plugins directory
KUBELET_SOCKET = "kubelet.sock"
#: kubelet's pod-resources socket, relative to the kubelet root directory
POD_RESOURCES_SOCKET = "pod-resources/kubelet.sock"
#: kubelet's limit on Device.ID ("Max length of this field is 63 characters")
MAX_DEVICE_ID_LENGTH = 63
