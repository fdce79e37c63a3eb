"""Admission webhooks served over HTTPS: a router by path to small handlers.

`review` speaks AdmissionReview v1, `server` routes each path to a handler and serves TLS,
`pod` reads the pod in a review with its types checked, and each handler module (`smcr`: inject
the SMC-R init container, `hostnetwork`: keep `rdma/hca` to hostNetwork pods) decides one thing.
"""
