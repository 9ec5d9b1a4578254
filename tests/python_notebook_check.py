"""The first-contact notebook (examples/mos2.ipynb) runs headless, and a notebook's kernel
survives errors and interrupts of a run.

1. nbclient runs every cell of the notebook in a fresh kernel, in a temporary folder, with fewer
   iterations (TYCHO_NOTEBOOK_ITERATIONS); checked: the live view's figure is among the cell's
   outputs (PNG), with the progress bar, the images and the result were written, the printed accuracy, the error
   cell's message, and the result's object equals `tycho reconstruct --iterations N`'s bit for
   bit although the notebook ran it 5 iterations at a time.
2. In a kernel driven by jupyter_client: an interrupt during tycho.view.run and one during a
   run without progress report each end in KeyboardInterrupt after an iteration; the kernel
   answers afterwards, the session kept what was done, and run() continues from there.

usage: python3 python_notebook_check.py NOTEBOOK TYCHO_COMMAND WORK_DIR
(the environment gives PYTHONPATH, TYCHO_LIBRARY and TYCHO_EXAMPLES to the kernels)
"""
import os
import pathlib
import shutil
import subprocess
import sys
import time

import nbformat
import numpy as np
from jupyter_client.manager import start_new_kernel
from nbclient import NotebookClient

notebook, cli, work = pathlib.Path(sys.argv[1]), sys.argv[2], pathlib.Path(sys.argv[3])
ITERATIONS = 10
examples = pathlib.Path(os.environ["TYCHO_EXAMPLES"])
shutil.rmtree(work, ignore_errors=True)
work.mkdir(parents=True)
os.environ["TYCHO_NOTEBOOK_ITERATIONS"] = str(ITERATIONS)
os.environ["MPLBACKEND"] = "Agg"
os.environ["PYDEVD_DISABLE_FILE_VALIDATION"] = "1"  # ipykernel's debugger: no warning per kernel

# ---- 1. the notebook, every cell
nb = nbformat.read(notebook, as_version=4)
started = time.monotonic()
NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(work)}}).execute()
print(f"notebook ran in {time.monotonic() - started:.1f} s")


def cell_with(text):
    cells = [c for c in nb.cells if c.cell_type == "code" and text in c.source]
    assert len(cells) == 1, f"one code cell with {text!r} expected, found {len(cells)}"
    return cells[0]


def printed(cell):
    return "".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream" and o.name == "stdout")


view_cell = cell_with("tycho.view.run(")
pngs = [o for o in view_cell.outputs if o.output_type == "display_data" and "image/png" in o.data]
assert len(pngs) == 1, f"the live view: one image shown (updated in place), found {view_cell.outputs}"
bars = "".join(o.get("text", "") for o in view_cell.outputs if o.output_type == "stream" and o.name == "stderr")
assert "tycho: 100%" in bars and "IProgress" not in bars, bars  # tqdm's text bar, without ipywidgets' warning
import base64
png = base64.b64decode(pngs[0].data["image/png"])
assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 20000, len(png)
for name in ("mos2-notebook.png", "mos2-notebook-phase.png"):
    data = (work / name).read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", name
import matplotlib.image
phase_png = matplotlib.image.imread(work / "mos2-notebook-phase.png")
assert phase_png.shape[:2] == (220, 197), phase_png.shape  # the object's pixels, one to one
assert phase_png[..., :3].std() > 0.05  # not a flat image

evaluated = printed(cell_with("tycho.evaluate("))
assert evaluated.startswith(f"after {ITERATIONS} iterations: Pearson "), evaluated
pearson = float(evaluated.split("Pearson ")[1].split(",")[0])
assert pearson > 0.78, evaluated  # 10 iterations of the example: 0.810 (0.929 after 100)
error_text = printed(cell_with("batchsize"))
assert "TYCHO_ERR_INVALID_ARGUMENT" in error_text and "did you mean 'batch_size'?" in error_text, error_text

cli_zip = work / "cli.zip"
subprocess.run([cli, "reconstruct", str(examples / "mos2.toml"), "--iterations", str(ITERATIONS), "--output",
                str(cli_zip), "-q", "--set", "output.previews=false"], check=True)
ours, theirs = np.load(work / "mos2-notebook.zip"), np.load(cli_zip)
for name in ("object", "probe", "loss_history"):
    assert ours[name].tobytes() == theirs[name].tobytes(), f"{name} differs from the tycho command's"
print(f"notebook: the view's image, the two PNGs, Pearson {pearson}, the error message; object, probe and loss "
      "equal the tycho command's bit for bit")

# ---- 2. interrupts and errors in a live kernel
km, kc = start_new_kernel(kernel_name="python3", cwd=str(work))


def execute(code, interrupt_after=None, timeout=300):
    """Runs code in the kernel; interrupts it once a stdout line starting with interrupt_after
    was printed. Returns (status, ename, stdout)."""
    out, interrupted = [""], [False]

    def on_output(msg):
        if msg["msg_type"] == "stream" and msg["content"]["name"] == "stdout":
            out[0] += msg["content"]["text"]
        if interrupt_after and not interrupted[0] and any(l.startswith(interrupt_after) for l in out[0].splitlines()):
            km.interrupt_kernel()
            interrupted[0] = True

    # stop_on_error=False: each request is a separate action, as a user running one cell after
    # another; with True, ipykernel aborts requests that come in shortly after an error reply.
    reply = kc.execute_interactive(code, output_hook=on_output, timeout=timeout, stop_on_error=False)["content"]
    return reply["status"], reply.get("ename"), out[0]


try:
    status, ename, out = execute(
        "import tycho, tycho.view\n"
        "s = tycho.Session(tycho_config := __import__('os').environ['TYCHO_EXAMPLES'] + '/mos2.toml',\n"
        "                  overrides=['reconstruct.iterations=60'])\n"
        "print('ready', flush=True)")
    assert status == "ok", (status, ename, out)

    # The view's run: interrupted once the first group of 2 was drawn (it prints nothing itself:
    # the progress report does).
    status, ename, out = execute(
        "view = tycho.view.LiveView()\n"
        "tycho.view.run(s, 40, every=2, view=view,\n"
        "               progress=lambda p: print('iteration', p.iteration, flush=True))",
        interrupt_after="iteration 3")
    assert (status, ename) == ("error", "KeyboardInterrupt"), (status, ename, out)
    status, _, out = execute("print(s.iterations_done, view.updates, flush=True)")
    done, updates = (int(x) for x in out.split())
    assert status == "ok" and 3 <= done < 40 and updates >= 2, out  # redrawn once more when interrupted
    printed_then = execute("s.run(1, progress=lambda p: print('iteration', p.iteration, flush=True))")[2]
    assert f"iteration {done + 1}\n" in printed_then, printed_then

    # A run with no progress report is interrupted after an iteration too.
    status, ename, out = execute(
        "print('start', flush=True)\ns.run(40, progress=False)", interrupt_after="start")
    assert (status, ename) == ("error", "KeyboardInterrupt"), (status, ename, out)
    status, _, out = execute("print(s.iterations_done, flush=True)")
    assert status == "ok" and done + 1 <= int(out) < done + 1 + 40, out

    # An error leaves the kernel and the session as they were.
    status, ename, out = execute("tycho.Session('[reconstruct]\\nbatchsize = 3\\n')")
    assert (status, ename) == ("error", "InvalidArgumentError"), (status, ename)
    status, ename, out2 = execute(
        "n = s.iterations_done; s.run(1, progress=False); print(n, s.iterations_done, flush=True)")
    assert status == "ok", (status, ename, out2)
    before, after = (int(x) for x in out2.split())
    assert status == "ok" and after == before + 1, out2
    print(f"kernel: interrupted twice (after {done} and {before} iterations in all), an error, and it runs on")
finally:
    kc.stop_channels()
    km.shutdown_kernel(now=True)
    del kc, km  # now, not in the interpreter's shutdown (where jupyter_client's __del__ cannot log)
print("notebook check passed")
