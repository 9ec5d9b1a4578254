"""tycho.view draws as the PNG previews do (the same scale bars, colour range and phase hues as
host/src/previews, checked against tests/test_previews.cpp's figures), and Ctrl-C stops a run
after an iteration with the session kept, in a terminal as in a notebook
(tests/python_notebook_check.py drives a kernel)."""
import os
import pathlib
import re
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

import tycho

view = pytest.importorskip("tycho.view", reason="tycho.view needs matplotlib (Debian: python3-matplotlib)")


@pytest.mark.parametrize("pixel_A, width_px, length_A", [
    (0.1736, 120, 5.0),       # test_previews.cpp: 300 screen px at 2.5 per pixel -> 5 Å
    (0.2, 100, 5.0),          # 350 px at 3.5: at most 6 Å -> 5 Å
    (1.0, 1000, 200.0),       # at most 300 Å
    (0.01, 100, 0.2),         # at most 0.3 Å
    (1 / 5.76, 96, 5.0),      # the example's probe (0.17361 Å pixels): 5 Å is the limit, kept
])
def test_scale_bar_is_the_previews(pixel_A, width_px, length_A):
    assert view.scale_bar_A(pixel_A, width_px) == pytest.approx(length_A, rel=1e-12)


def test_scale_bar_refuses_a_pixel_size_that_is_not_positive():
    with pytest.raises(ValueError, match="pixel size"):
        view.scale_bar_A(0.0, 100)


def test_phase_hue_as_the_previews():
    # preview_colormap.hpp: 0 rad red, 2π/3 green, −2π/3 blue; brightness = amplitude / peak.
    probe = np.array([[[1.0, np.exp(2j * np.pi / 3), np.exp(-2j * np.pi / 3), 0.5]]], dtype=np.complex64)
    rgb = view.probe_rgb(probe)
    np.testing.assert_allclose(rgb[0], [[1, 0, 0], [0, 1, 0], [0, 0, 1], [0.5, 0, 0]], atol=1e-6)
    two = view.probe_rgb(np.ones((2, 3, 4), dtype=np.complex64))
    assert two.shape == (3, 2 * 4 + 2, 3) and not two[:, 4:6].any()  # 2 black columns between modes


def test_colour_range_is_taken_inside_the_scanned_field():
    image = np.zeros((50, 60))
    image[10:20, 10:30] = np.linspace(0, 1, 200).reshape(10, 20)
    image[0, 0] = 100.0  # outside the field: ignored
    positions = np.array([[10.0, 10.0], [19.0, 29.0]])
    lo, hi = view.colour_range(image, positions)
    ordered = np.sort(image[10:20, 10:30].ravel())
    assert (lo, hi) == (ordered[int(0.01 * 199)], ordered[int(0.99 * 199)])


def test_live_view_draws_a_session(mos2, tmp_path):
    with tycho.Session(mos2, overrides=["reconstruct.iterations=2"]) as s:
        v = view.run(s, 2, every=1, progress=False)
        assert v.updates == 2 and s.iterations_done == 2
        assert view.object_pixel_A(s) == pytest.approx(0.1736111, rel=1e-6)
        png = v.png()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 20000
    titles = [ax.get_title() for ax in v.figure.axes]
    assert "object phase" in titles and "probe: amplitude, phase as hue" in titles
    assert any(t.startswith("loss: ") for t in titles)


INTERRUPTED = """
import sys, tycho
s = tycho.Session(sys.argv[1], overrides=["reconstruct.iterations=50"])
print("start", flush=True)
try:
    s.run(50, progress=False)
except KeyboardInterrupt as e:
    print("interrupted:", e, flush=True)
done = s.iterations_done
s.run(1, progress=False)
print("done", done, s.iterations_done, flush=True)
"""


def test_ctrl_c_stops_after_an_iteration_and_the_session_goes_on(mos2):
    p = subprocess.Popen([sys.executable, "-c", INTERRUPTED, str(mos2)], stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline() == "start\n"
    time.sleep(1.0)  # within the run (50 iterations take a minute)
    p.send_signal(signal.SIGINT)
    out, _ = p.communicate(timeout=120)
    assert p.returncode == 0, out
    lines = out.splitlines()
    assert lines[0].startswith("interrupted: tycho: interrupted after iteration "), out
    _, done, after = lines[1].split()
    assert 1 <= int(done) < 50 and int(after) == int(done) + 1, out


def test_python_m_tycho_reconstruct_saves_when_interrupted(mos2, tmp_path):
    out = tmp_path / "stopped.zip"
    # Many iterations, and the signal only once the progress bar shows two done: a fast machine must not finish
    # before the signal, a slow one must not be signalled while the session is still being made.
    p = subprocess.Popen([sys.executable, "-m", "tycho", "reconstruct", str(mos2), "--iterations", "2000", "--output",
                          str(out)], stderr=subprocess.PIPE, text=True)
    seen = ""
    while not re.search(r"\b([2-9]|\d\d+)/2000\b", seen):
        ch = p.stderr.read(1)
        assert ch, seen  # the run ended before any progress
        seen += ch
    p.send_signal(signal.SIGINT)
    _, rest = p.communicate(timeout=120)
    err = seen + rest
    assert p.returncode == 130, err
    assert "saved the state after iteration " in err and str(out) in err, err
    saved = np.load(out)
    done = saved["loss_history"].shape[0]
    assert 2 <= done < 2000, done
    assert saved["object"].shape == (1, 220, 197)
