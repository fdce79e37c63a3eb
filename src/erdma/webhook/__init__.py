"""Admission webhooks served over HTTPS: a router by path to small handlers.

`review` speaks AdmissionReview v1, `server` routes each path to a handler and serves TLS,
and each handler module (`smcr`: inject the SMC-R init container) decides one thing.
"""
