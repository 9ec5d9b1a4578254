"""Accuracy of a saved result against a ground truth: ``tycho evaluate`` (``tycho_evaluate``)."""
from __future__ import annotations

import ctypes
import json
import os
from typing import Any, Dict, Optional, Union

from . import _library
from .session import _check

PathLike = Union[str, "os.PathLike[str]"]


def evaluate(result: PathLike, truth: PathLike, *, sigma_A: Optional[float] = None,
             fov_fraction: Optional[float] = None, slice_thickness_A: Optional[float] = None) -> Dict[str, Any]:
    """The accuracy of ``result`` (a file written by :meth:`Session.save` or ``tycho reconstruct``)
    against the ground truth ``truth`` (an .npz with ``phase`` or ``phase_total``, ``pixel_size_A``
    and ``scan_origin_A``; optionally ``phase_slices``, ``phase_top``/``phase_bottom`` with
    ``layer_depths_A``, ``positions_true_A``): the dict of the JSON ``tycho evaluate`` prints, e.g.
    ``pearson`` and ``rms_rad`` (the local-phase metric of the data READMEs, in the inner
    ``fov_fraction`` of the scanned field of view after integer registration), per-depth figures
    for a multislice result, ``positions_rms_A`` when the truth has the true positions.

    Args:
        sigma_A: σ of the local-phase Gaussian, Å (default 2).
        fov_fraction: inner fraction of the scanned field of view compared, in (0, 1] (default 0.8).
        slice_thickness_A: depth of each slice of a multislice result, Å (default: the result's own).

    Raises :class:`TychoError` (NotFoundError, TychoIOError, BadDataError, InvalidArgumentError)
    naming the file, array or option that cannot be used.
    """
    lib = _library.load()
    options = _library.EvaluateOptions(struct_size=ctypes.sizeof(_library.EvaluateOptions),
                                       sigma_A=float(sigma_A or 0.0), fov_fraction=float(fov_fraction or 0.0),
                                       slice_thickness_A=float(slice_thickness_A or 0.0))
    text = ctypes.c_void_p()
    _check(lib.tycho_evaluate(os.fsencode(result), os.fsencode(truth), ctypes.byref(options), ctypes.byref(text)))
    try:
        return json.loads(ctypes.string_at(text.value).decode("utf-8"))
    finally:
        lib.tycho_free_string(text)
