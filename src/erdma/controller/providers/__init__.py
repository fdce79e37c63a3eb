"""Cloud providers: one package each, implementing ``erdma.controller.cloud.CloudApi``.

A provider's package owns everything about its cloud (SDK calls, error-code mapping to
``ErrorKind``, credentials, settings) and imports nothing of the reconciler; it is found by
name through ``erdma.controller.registry``.
"""
