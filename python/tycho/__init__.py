"""tycho: ptychographic reconstruction from Python, over libtycho's C API.

    import tycho
    with tycho.Session("examples/mos2.toml") as s:   # a TOML path, TOML text or a dict
        s.run(10)                                     # a tqdm bar when tqdm is installed
        obj = s.object                                # (slices, H, W) complex64, numpy, no copy
        s.save("result.zip", overwrite=True)
    tycho.evaluate("result.zip", "examples/data/mos2_ground_truth.npz")["pearson"]

libtycho.so is found through TYCHO_LIBRARY, the package's own (a wheel: ``pip install .`` from the
repository), the repository's build tree, or an installed prefix (:mod:`tycho._library`).
:mod:`tycho.view` (matplotlib) draws a live view of a run in a notebook. Errors raise :class:`TychoError` with tycho's status and message.
"""
from ._dlpack import Tensor
from ._library import loaded_path as library_path
from .evaluate import evaluate
from .errors import (AbiMismatchError, BadDataError, CancelledError, InternalError, InvalidArgumentError,
                     NotFoundError, OutOfMemoryError, TychoError, TychoIOError, UnsupportedError)
from .session import ProgressInfo, Session, abi_version, reconstruct, version

__version__ = "0.1.0"
__all__ = [
    "Session", "ProgressInfo", "Tensor", "reconstruct", "evaluate", "version", "abi_version", "library_path",
    "TychoError", "InvalidArgumentError", "NotFoundError", "TychoIOError", "BadDataError", "AbiMismatchError",
    "OutOfMemoryError", "UnsupportedError", "CancelledError", "InternalError",
]
