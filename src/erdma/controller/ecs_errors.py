"""ECS SDK exceptions turned into ``CloudError``: the ECS code, the action, and whether a retry
can help (throttling, 5xx, timeouts and network errors can; the rest cannot)."""

from __future__ import annotations

from erdma.controller.cloud import CloudError, hint_for, is_retryable


def classify(exc: BaseException, action: str, timeout: float) -> CloudError:
    """Turn whatever the SDK raised into a ``CloudError`` that says if a retry can help."""
    inner = getattr(exc, "inner_exception", None)
    if isinstance(inner, BaseException) and not getattr(exc, "data", None):
        exc = inner
    code = getattr(exc, "code", None)
    data = getattr(exc, "data", None)
    if isinstance(code, str) and code and isinstance(data, dict) and "statusCode" in data:
        status = int(data.get("statusCode") or 0)
        message = str(data.get("Message") or getattr(exc, "message", ""))
        return CloudError(
            code,
            action,
            message,
            hint=hint_for(code, action),
            request_id=str(data.get("RequestId") or ""),
            http_status=status,
            retryable=is_retryable(code, status),
        )
    name = type(exc).__name__
    text = str(getattr(exc, "message", "") or exc)
    transport = (
        name == "RetryError" or isinstance(exc, OSError) or "aiohttp" in type(exc).__module__
    )
    if isinstance(exc, TimeoutError) or (transport and "timeout" in f"{name} {text}".lower()):
        hint = hint_for("Timeout", action)
        return CloudError(
            "Timeout", action, f"no answer within {timeout:g}s", hint=hint, retryable=True
        )
    if transport:
        hint = hint_for("NetworkError", action)
        return CloudError("NetworkError", action, f"{name}: {text}", hint=hint, retryable=True)
    if type(exc).__module__.startswith("alibabacloud_credentials"):
        return CloudError("CredentialError", action, str(exc), hint=hint_for("Credential", action))
    return CloudError("SdkError", action, f"{type(exc).__name__}: {exc}")
