"""Kubelet Dynamic Resource Allocation (resource.k8s.io/v1) driver on the agent's backend.

It sits above ``deviceplugin`` and ``kube`` and below ``agent``: the same host snapshot feeds
both front ends, so the DRA driver and the device plugins never disagree about a device.
"""
