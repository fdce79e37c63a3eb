"""ECS error codes in the controller's terms: each SDK exception becomes a ``CloudError`` with
the ``ErrorKind`` the reconciler switches on, the ECS code and action for people, and a hint.

Only this module knows ECS's codes. The mapping keeps what a retry can do exactly as ECS means
it: throttling, 5xx, timeouts and network errors can succeed later; a 4xx cannot.
"""

from __future__ import annotations

from erdma.controller.cloud import CloudError, ErrorKind

RETRYABLE_CODES = frozenset(
    {
        "ServiceUnavailable",
        "InternalError",
        "UnknownError",
        "LastTokenProcessing",
        "Timeout",
        "NetworkError",
    }
)
#: code prefixes per kind, for the 4xx answers that are not simply refused
KIND_PREFIXES = (
    (ErrorKind.NOT_FOUND, ("InvalidEniId.NotFound", "InvalidInstanceType.NotFound")),
    (ErrorKind.QUOTA, ("QuotaExceed",)),
    (
        ErrorKind.CONFLICT,
        ("InvalidOperation.InvalidEniState", "IncorrectInstanceStatus", "IncorrectStatus"),
    ),
)
HINTS = {
    "InvalidAccessKeyId": "check accessKeyID in the controller's credential secret",
    "SignatureDoesNotMatch": "check accessKeySecret in the controller's credential secret",
    "InvalidSecurityToken": "the STS token expired or is wrong; check the RAM role setup",
    "Forbidden": "grant ecs:{action} to the controller's RAM user or role (README: RAM policy)",
    "NoPermission": "grant ecs:{action} to the controller's RAM user or role (README: RAM policy)",
    "QuotaExceed": "the instance or account quota is used up; free ENIs or raise the quota",
    "InvalidParameter": "ECS rejected a parameter; check the instance type supports eRDMA",
    "MissingParameter": "ECS rejected the request as incomplete",
    "Throttling": "ECS rate limit reached; lower ecsRateLimit or ask for a higher API quota",
    "Timeout": "ECS did not answer in time; check the endpoint and the network path to it",
    "NetworkError": "could not reach the ECS endpoint; check ecsEndpoint and DNS/network",
    "InvalidRegionId": "check region in the controller config",
    "Credential": "credentials could not be obtained; check credentials.type and its inputs",
}


def hint_for(code: str, action: str) -> str:
    """What a person can do about an ECS error code (empty when nothing useful to say)."""
    for prefix, text in HINTS.items():
        if code.startswith(prefix):
            return text.format(action=action)
    return ""


def kind_of(code: str, http_status: int) -> ErrorKind:
    """The kind of an ECS answer: throttled and server-side failures first, then by code."""
    if code.startswith("Throttling"):
        return ErrorKind.THROTTLED
    if code in RETRYABLE_CODES or http_status >= 500:
        return ErrorKind.TRANSIENT
    for kind, prefixes in KIND_PREFIXES:
        if code.startswith(prefixes):
            return kind
    return ErrorKind.REFUSED


def ecs_error(
    code: str, action: str, message: str, *, request_id: str = "", http_status: int = 0
) -> CloudError:
    """A ``CloudError`` for an ECS code (or one of ours: Timeout, NetworkError, ...), with its
    kind and hint."""
    return CloudError(
        kind_of(code, http_status),
        code,
        action,
        message,
        hint=hint_for(code, action),
        request_id=request_id,
        http_status=http_status,
    )


def classify(exc: BaseException, action: str, timeout: float) -> CloudError:
    """Turn whatever the SDK raised into a ``CloudError`` that says if a retry can help."""
    inner = getattr(exc, "inner_exception", None)
    if isinstance(inner, BaseException) and not getattr(exc, "data", None):
        exc = inner
    code = getattr(exc, "code", None)
    data = getattr(exc, "data", None)
    if isinstance(code, str) and code and isinstance(data, dict) and "statusCode" in data:
        return ecs_error(
            code,
            action,
            str(data.get("Message") or getattr(exc, "message", "")),
            request_id=str(data.get("RequestId") or ""),
            http_status=int(data.get("statusCode") or 0),
        )
    name = type(exc).__name__
    text = str(getattr(exc, "message", "") or exc)
    transport = (
        name == "RetryError" or isinstance(exc, OSError) or "aiohttp" in type(exc).__module__
    )
    if isinstance(exc, TimeoutError) or (transport and "timeout" in f"{name} {text}".lower()):
        return ecs_error("Timeout", action, f"no answer within {timeout:g}s")
    if transport:
        return ecs_error("NetworkError", action, f"{name}: {text}")
    if type(exc).__module__.startswith("alibabacloud_credentials"):
        return ecs_error("CredentialError", action, str(exc))
    return ecs_error("SdkError", action, f"{type(exc).__name__}: {exc}")
