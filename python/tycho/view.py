"""A live view of a reconstruction for notebooks: object phase, probe and loss curve, drawn with
matplotlib as the PNG previews of ``tycho reconstruct`` draw them (host/src/previews/):

* the object's phase (all slices together) in viridis, over the 1st to 99th percentile of the
  values inside the scanned field of view (outlined, dashed), with a colour bar in rad;
* the probe with amplitude as brightness and phase as hue (0 rad red, 2π/3 green, −2π/3 blue),
  its modes side by side with their share of the power;
* a scale bar of a round length (1, 2 or 5 × 10^k Å, at most 30 % of the image's width);
* the loss per iteration, on a log axis when it spans more than a factor 3.

Needs matplotlib (``pip install ".[notebook]"``). In a notebook (IPython) the view is one image
redrawn in place; elsewhere :meth:`LiveView.update` only redraws the figure (save it with
``view.figure.savefig``)::

    with tycho.Session("examples/mos2.toml", overrides=["reconstruct.iterations=30"]) as s:
        view = tycho.view.run(s, 30, every=5)   # runs 5 at a time, redrawing after each
        view.figure.savefig("mos2.png")
"""
from __future__ import annotations

import io
import math
from typing import Any, Optional, Tuple

import numpy as np
from matplotlib import colors
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle
from mpl_toolkits.axes_grid1.anchored_artists import AnchoredSizeBar

__all__ = ["LiveView", "run", "object_phase", "colour_range", "probe_rgb", "scale_bar_A", "object_pixel_A"]


def object_phase(obj: np.ndarray) -> np.ndarray:
    """(H, W) float: the phase of all slices together (the product of their transmissions), rad."""
    return np.angle(np.prod(np.asarray(obj), axis=0))


def scanned_field(positions_px: np.ndarray) -> Tuple[float, float, float, float]:
    """(row0, row1, col0, col1): the bounding box of the probe centres, object pixels."""
    p = np.asarray(positions_px, dtype=np.float64)
    return float(p[:, 0].min()), float(p[:, 0].max()), float(p[:, 1].min()), float(p[:, 1].max())


def colour_range(image: np.ndarray, positions_px: np.ndarray) -> Tuple[float, float]:
    """The previews' colour range: the 1st and 99th percentile of the finite values inside the
    scanned field of view (all of the image when none lie inside), so the unscanned border does
    not wash the object out."""
    r0, r1, c0, c1 = scanned_field(positions_px)
    h, w = image.shape
    inside = image[max(0, math.ceil(r0)):min(h - 1, int(r1)) + 1, max(0, math.ceil(c0)):min(w - 1, int(c1)) + 1]
    values = inside[np.isfinite(inside)]
    if values.size == 0:
        values = image[np.isfinite(image)]
    if values.size == 0:
        return 0.0, 1.0
    # The previews' quantile: the k-th smallest, k = floor(p (n - 1)).
    ordered = np.sort(values.ravel())
    lo, hi = (float(ordered[int(p * (ordered.size - 1))]) for p in (0.01, 0.99))
    return lo, (hi if hi > lo else lo + 1.0)


def probe_rgb(probe: np.ndarray, gap: int = 2) -> np.ndarray:
    """(N0, modes·N1 + (modes−1)·gap, 3) floats in [0, 1]: each mode with hue = phase and
    brightness = amplitude over the strongest mode's peak (full saturation), black between them."""
    p = np.asarray(probe)
    modes, n0, n1 = p.shape
    amp = np.abs(p)
    peak = float(np.nanmax(amp)) if np.isfinite(amp).any() else 0.0
    hue = np.mod(np.angle(p) / (2 * np.pi) + 1.0, 1.0)
    value = np.clip(amp / peak, 0.0, 1.0) if peak > 0 else np.zeros_like(amp)
    rgb = colors.hsv_to_rgb(np.stack([hue, np.ones_like(hue), value], axis=-1))
    rgb[~np.isfinite(amp)] = 0.0
    out = np.zeros((n0, modes * n1 + (modes - 1) * gap, 3))
    for m in range(modes):
        out[:, m * (n1 + gap):m * (n1 + gap) + n1] = rgb[m]
    return out


def scale_bar_A(pixel_A: float, width_px: int, max_fraction: float = 0.3) -> float:
    """The previews' scale bar length, Å: the largest 1, 2 or 5 × 10^k Å not above
    ``max_fraction`` of an image ``width_px`` pixels of ``pixel_A`` Å wide."""
    if not (math.isfinite(pixel_A) and pixel_A > 0):
        raise ValueError(f"scale bar: the pixel size ({pixel_A} Å) must be finite and positive")
    max_A = max(width_px * max_fraction, 1.0) * pixel_A * (1 + 1e-9)  # a length at the limit by rounding: kept
    decade = 10.0 ** math.floor(math.log10(max_A))
    return max([decade] + [m * decade for m in (2.0, 5.0) if m * decade <= max_A])


def object_pixel_A(session: Any) -> float:
    """The object's pixel size, Å, from the session's positions (in Å and in object pixels)."""
    a, px = np.asarray(session.positions_A), np.asarray(session.positions_px)
    span_px = np.ptp(px, axis=0)
    axis = int(np.argmax(span_px))
    if span_px[axis] <= 0:
        raise ValueError("one scan position: the object's pixel size cannot be told from the positions")
    return float(np.ptp(a[:, axis]) / span_px[axis])


def _hue_colourmap() -> colors.ListedColormap:
    t = np.linspace(-np.pi, np.pi, 256)
    hsv = np.stack([np.mod(t / (2 * np.pi) + 1.0, 1.0), np.ones(256), np.ones(256)], axis=-1)
    return colors.ListedColormap(colors.hsv_to_rgb(hsv), name="tycho_phase_hue")


def _scale_bar(ax: Any, pixel_A: float, width_px: int) -> None:
    length_A = scale_bar_A(pixel_A, width_px)
    ax.add_artist(AnchoredSizeBar(ax.transData, length_A / pixel_A, f"{length_A:g} Å", "lower left", pad=0.4,
                                  color="white", frameon=False, size_vertical=max(width_px / 80, 1.0)))


class LiveView:
    """One figure (object phase, probe, loss), redrawn by :meth:`update` from a session; in a
    notebook it is shown once and replaced in place at each update."""

    def __init__(self, title: str = "tycho", dpi: int = 80) -> None:
        self.title, self.dpi = title, dpi
        self.figure = Figure(figsize=(15, 4.6), dpi=dpi, layout="constrained")
        self._handle: Optional[Any] = None
        self.updates = 0

    def draw(self, obj: np.ndarray, probe: np.ndarray, positions_px: np.ndarray, loss: np.ndarray,
             pixel_A: float, iterations_done: Optional[int] = None) -> Figure:
        """Draws the three panels from arrays (shapes as :class:`tycho.Session`'s)."""
        fig = self.figure
        fig.clear()
        ax_phase, ax_probe, ax_loss = fig.subplots(1, 3, gridspec_kw={"width_ratios": [1.1, 1, 1]})
        done = f", {iterations_done} iterations" if iterations_done is not None else ""
        fig.suptitle(f"{self.title}{done}")

        phase = object_phase(obj)
        lo, hi = colour_range(phase, positions_px)
        im = ax_phase.imshow(phase, cmap="viridis", vmin=lo, vmax=hi, interpolation="bilinear")
        r0, r1, c0, c1 = scanned_field(positions_px)
        ax_phase.add_patch(Rectangle((c0, r0), c1 - c0, r1 - r0, fill=False, color="white", linestyle="--", lw=1))
        _scale_bar(ax_phase, pixel_A, phase.shape[1])
        slices = np.asarray(obj).shape[0]
        ax_phase.set_title("object phase" + (" (all slices)" if slices > 1 else ""))
        fig.colorbar(im, ax=ax_phase, label="rad", shrink=0.9)

        p = np.asarray(probe)
        power = np.sum(np.abs(p) ** 2, axis=(1, 2))
        ax_probe.imshow(probe_rgb(p), interpolation="bilinear")
        if p.shape[0] > 1:
            ax_probe.set_title("probe modes, power " + " ".join(f"{100 * x / power.sum():.0f}%" for x in power))
        else:
            ax_probe.set_title("probe: amplitude, phase as hue")
        _scale_bar(ax_probe, pixel_A, p.shape[2])
        hue = fig.colorbar(_hue_mappable(), ax=ax_probe, shrink=0.9, ticks=[-np.pi, 0, np.pi])
        hue.ax.set_yticklabels(["−π", "0", "π"])
        hue.set_label("phase")
        for ax in (ax_phase, ax_probe):
            ax.set_xticks([])
            ax.set_yticks([])

        loss = np.asarray(loss, dtype=np.float64)
        ax_loss.plot(np.arange(1, loss.size + 1), loss, color="#3b528b", lw=1.5)
        finite = loss[np.isfinite(loss) & (loss > 0)]
        if finite.size and finite.max() > 3 * finite.min():
            ax_loss.set_yscale("log")
        ax_loss.set_xlabel("iteration")
        ax_loss.set_ylabel("loss per pattern")
        ax_loss.set_title(f"loss: {loss[-1]:.4e}" if loss.size else "loss")
        ax_loss.grid(True, alpha=0.3)
        return fig

    def update(self, session: Any) -> Figure:
        """Redraws from ``session`` (a :class:`tycho.Session`), and in a notebook replaces the
        image shown (the first update shows it)."""
        self.draw(session.object, session.probe, session.positions_px, session.loss_history,
                  object_pixel_A(session), session.iterations_done)
        self.updates += 1
        self._show()
        return self.figure

    def png(self) -> bytes:
        """The figure as PNG."""
        buf = io.BytesIO()
        self.figure.savefig(buf, format="png", dpi=self.dpi)
        return buf.getvalue()

    def _show(self) -> None:
        try:
            from IPython import get_ipython
            from IPython.display import Image, display
        except ImportError:
            return
        if get_ipython() is None:
            return
        image = Image(data=self.png(), format="png")
        if self._handle is None:
            self._handle = display(image, display_id=True)
        else:
            self._handle.update(image)


def _hue_mappable() -> Any:
    """The probe's colour bar: phase −π..π as hue."""
    from matplotlib.cm import ScalarMappable
    return ScalarMappable(norm=colors.Normalize(-np.pi, np.pi), cmap=_hue_colourmap())


def run(session: Any, iterations: int, every: int = 5, view: Optional[LiveView] = None,
        progress: Any = "auto") -> LiveView:
    """Runs ``iterations`` more iterations of ``session``, ``every`` at a time, redrawing
    ``view`` (a new :class:`LiveView` when None) after each group and before returning.

    ``progress`` as :meth:`tycho.Session.run`'s, over each group. Ctrl-C (or a notebook's
    interrupt) stops the run after the iteration under way: the view is redrawn with the state
    reached, and the KeyboardInterrupt goes on; the session keeps every iteration done, so
    calling ``run`` again continues from there."""
    if iterations < 0 or every < 1:
        raise ValueError(f"iterations ({iterations}) must be ≥ 0 and every ({every}) ≥ 1")
    view = view if view is not None else LiveView()
    left = int(iterations)
    try:
        while left > 0:
            n = min(every, left)
            session.run(n, progress=progress)
            left -= n
            if left > 0:
                view.update(session)
    except BaseException:
        try:
            view.update(session)  # the state reached when interrupted (or stopped by an error)
        except Exception:
            pass  # the run's own exception says more
        raise
    view.update(session)
    return view
