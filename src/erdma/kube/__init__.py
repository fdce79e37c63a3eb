"""Kubernetes plumbing shared by the agent and the controller.

The API client factory, the ``ERdmaDevice`` codec, the Event recorder and leader election live
here, below both programs, so the agent never loads the controller (kopf, the ECS SDK) and the
controller never loads the agent's host code (netns, CRI, SMC netlink).
"""
