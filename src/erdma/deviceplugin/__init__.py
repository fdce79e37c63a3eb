"""Kubelet device-plugin framework: sockets, registration, streams, kubelet restarts.

It knows nothing about eRDMA: resource policy lives in `ResourcePlugin` subclasses.
"""
