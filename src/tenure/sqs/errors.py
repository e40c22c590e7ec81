"""SQS errors: the shape name (AWS JSON 1.0 ``__type``), the legacy query code (``x-amzn-query-error``
and the query protocol's ``<Code>``), the HTTP status. Every refusal of the API is one of these."""

from __future__ import annotations

_LEGACY = {
    "QueueDoesNotExist": "AWS.SimpleQueueService.NonExistentQueue",
    "QueueDeletedRecently": "AWS.SimpleQueueService.QueueDeletedRecently",
    "QueueNameExists": "QueueAlreadyExists",
    "PurgeQueueInProgress": "AWS.SimpleQueueService.PurgeQueueInProgress",
    "MessageNotInflight": "AWS.SimpleQueueService.MessageNotInflight",
    "BatchEntryIdsNotDistinct": "AWS.SimpleQueueService.BatchEntryIdsNotDistinct",
    "BatchRequestTooLong": "AWS.SimpleQueueService.BatchRequestTooLong",
    "EmptyBatchRequest": "AWS.SimpleQueueService.EmptyBatchRequest",
    "InvalidBatchEntryId": "AWS.SimpleQueueService.InvalidBatchEntryId",
    "TooManyEntriesInBatchRequest": "AWS.SimpleQueueService.TooManyEntriesInBatchRequest",
    "UnsupportedOperation": "AWS.SimpleQueueService.UnsupportedOperation",
    "UnknownOperationException": "InvalidAction",
}
_STATUS = {
    "AccessDenied": 403, "SignatureDoesNotMatch": 403, "InvalidClientTokenId": 403, "MissingAuthenticationToken": 403,
    "IncompleteSignature": 400, "InvalidSecurity": 403, "OverLimit": 403, "ResourceNotFoundException": 404,
    "InternalFailure": 500, "ServiceUnavailable": 503,
}


class SqsError(Exception):
    """One SQS error: ``shape`` (e.g. ``QueueDoesNotExist``) and a one-line message."""

    def __init__(self, shape: str, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.shape = shape
        self.message = message
        self.status = status if status is not None else _STATUS.get(shape, 400)

    @property
    def code(self) -> str:
        """The legacy (query protocol) error code."""
        return _LEGACY.get(self.shape, self.shape)

    @property
    def fault(self) -> str:
        return "Receiver" if self.status >= 500 else "Sender"


def invalid(message: str) -> SqsError:
    return SqsError("InvalidParameterValue", message)


def missing(name: str) -> SqsError:
    return SqsError("MissingParameter", f"The request must contain the parameter {name}.")


def no_queue() -> SqsError:
    return SqsError("QueueDoesNotExist", "The specified queue does not exist.")
