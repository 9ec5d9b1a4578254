"""Exceptions carrying tycho's status and message (``tycho_status``, ``tycho_last_error()``)."""
from __future__ import annotations

from typing import Dict, Type

# abi/tycho/tycho_status.h
OK = 0
STATUS_NAMES: Dict[int, str] = {
    0: "TYCHO_OK",
    1: "TYCHO_ERR_INVALID_ARGUMENT",
    2: "TYCHO_ERR_NOT_FOUND",
    3: "TYCHO_ERR_IO",
    4: "TYCHO_ERR_BAD_DATA",
    5: "TYCHO_ERR_ABI_MISMATCH",
    6: "TYCHO_ERR_OUT_OF_MEMORY",
    7: "TYCHO_ERR_UNSUPPORTED",
    8: "TYCHO_ERR_CANCELLED",
    9: "TYCHO_ERR_INTERNAL",
}


class TychoError(Exception):
    """A tycho call failed.

    Attributes:
        status: the ``tycho_status`` value (int).
        status_name: its name, e.g. ``"TYCHO_ERR_NOT_FOUND"``.
        message: tycho's message (``tycho_last_error()``), naming the file, key or array.
    """

    def __init__(self, status: int, message: str, status_name: str = "") -> None:
        self.status = status
        self.status_name = status_name or STATUS_NAMES.get(status, f"TYCHO_ERR_UNKNOWN({status})")
        self.message = message
        super().__init__(f"{self.status_name}: {message}")


class InvalidArgumentError(TychoError, ValueError):
    """TYCHO_ERR_INVALID_ARGUMENT: a bad config key or value, a bad argument."""


class NotFoundError(TychoError, LookupError):
    """TYCHO_ERR_NOT_FOUND: a file, dataset, component or result array that does not exist."""


class TychoIOError(TychoError, OSError):
    """TYCHO_ERR_IO: reading or writing a file failed."""


class BadDataError(TychoError, ValueError):
    """TYCHO_ERR_BAD_DATA: data that is malformed or inconsistent."""


class AbiMismatchError(TychoError):
    """TYCHO_ERR_ABI_MISMATCH: libtycho or a plugin of another ABI version."""


class OutOfMemoryError(TychoError, MemoryError):
    """TYCHO_ERR_OUT_OF_MEMORY: the run does not fit this machine's memory."""


class UnsupportedError(TychoError):
    """TYCHO_ERR_UNSUPPORTED: a combination a component does not support."""


class CancelledError(TychoError):
    """TYCHO_ERR_CANCELLED: the progress callback stopped the run."""


class InternalError(TychoError):
    """TYCHO_ERR_INTERNAL: a bug in tycho or a plugin."""


_BY_STATUS: Dict[int, Type[TychoError]] = {
    1: InvalidArgumentError,
    2: NotFoundError,
    3: TychoIOError,
    4: BadDataError,
    5: AbiMismatchError,
    6: OutOfMemoryError,
    7: UnsupportedError,
    8: CancelledError,
    9: InternalError,
}


def error_for(status: int, message: str, status_name: str = "") -> TychoError:
    """The TychoError subclass for ``status``."""
    return _BY_STATUS.get(status, TychoError)(status, message, status_name)
