#!/usr/bin/env python3
"""The walk of docs/plugin-guide.md, run as written: from an empty folder to a loaded plugin,
against an installed tycho only.

1. The file listings of the page (fences "```<lang> file=<name>", with "example=<folder>" for
   an example other than huber_loss) are byte for byte the files of sdk/examples/<folder>/, so
   the examples CI builds are the ones the page shows.
2. The shell steps of the page (fences "```sh walk"), joined in order with the listings written
   where they stand, run in one bash (set -euo pipefail) in an empty folder, with
   TYCHO_SOURCE, TYCHO_BUILD (this build tree) and TYCHO_PREFIX (a fresh temporary prefix) set:
   they install tycho into the prefix, build the plugin against it with CMake
   (CMAKE_PREFIX_PATH only), load it through TYCHO_PLUGIN_PATH and run the MoS2 example with it.
3. The effect is checked with numbers: the huber run's loss history is finite and lies below the
   amplitude loss's run (Huber's loss is at most the squared residual, and less wherever a
   residual exceeds δ), and with δ = 1e30 (no residual beyond it) the huber loss is the
   amplitude loss: the same history to 1e-5 relative (only the order of the float sums differs).
4. The constraint of the walk's second plugin (sdk/examples/phase_reference) had its effect: the
   phase of the object's mean is 0 (within 1e-8 rad) in its run and not (> 1e-4 rad) in the run without it.
5. The installed package is self-contained: the plugin's CMake found tychoConfig.cmake in the
   prefix, and tycho.pc builds and links a C program against the installed libtycho.
"""
import argparse
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile

import numpy as np

FENCE = re.compile(r"^```(\S*)([^\n]*)\n(.*?)^```\s*$", re.M | re.S)
EXAMPLES = ("huber_loss", "phase_reference")  # folders of sdk/examples


def fail(message):
    print("FAIL: " + message, file=sys.stderr)
    sys.exit(1)


def walk_script(page, examples_dir):
    """The bash script of the page's walk; checks the listings against the examples' files."""
    lines = ["set -euo pipefail", "set -x"]
    listed = {example: set() for example in EXAMPLES}
    for lang, info, body in FENCE.findall(page):
        words = info.split()
        file_words = [w for w in words if w.startswith("file=")]
        if file_words:
            name = file_words[0][len("file="):]
            example_words = [w for w in words if w.startswith("example=")]
            example = example_words[0][len("example="):] if example_words else EXAMPLES[0]
            if example not in listed:
                fail(f"docs/plugin-guide.md lists a file of an unknown example '{example}'")
            on_disk = (examples_dir / example / name).read_text()
            if body != on_disk:
                fail(f"the listing of {name} in docs/plugin-guide.md differs from sdk/examples/{example}/{name}")
            listed[example].add(name)
            lines.append(f"cat > {name} <<'TYCHO_WALK_EOF'\n{body}TYCHO_WALK_EOF")
        elif lang == "sh" and "walk" in words:
            lines.append(body)
    for example, names in listed.items():
        expected = {p.name for p in (examples_dir / example).iterdir() if p.is_file()}
        if names != expected:
            fail(f"docs/plugin-guide.md lists {sorted(names)}, sdk/examples/{example} holds {sorted(expected)}")
    return "\n".join(lines) + "\n"


def run(cmd, env, cwd):
    r = subprocess.run(cmd, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if r.returncode != 0:
        fail(f"{' '.join(map(str, cmd))} exited with {r.returncode}:\n{r.stdout}")
    return r.stdout


def loss_history(path):
    with np.load(path) as z:
        return np.asarray(z["loss_history"], dtype=np.float64)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--source", required=True)
    ap.add_argument("--build", required=True)
    ap.add_argument("--keep", action="store_true", help="keep the temporary folder")
    args = ap.parse_args()
    source = pathlib.Path(args.source).resolve()
    build = pathlib.Path(args.build).resolve()
    page = (source / "docs/plugin-guide.md").read_text()
    script = walk_script(page, source / "sdk/examples")

    tmp = pathlib.Path(tempfile.mkdtemp(prefix="tycho_plugin_walk_"))
    try:
        prefix = tmp / "prefix"
        work = tmp / "work"
        work.mkdir()
        env = dict(os.environ)
        for var in ("TYCHO_PLUGIN_PATH", "CMAKE_PREFIX_PATH", "PKG_CONFIG_PATH", "LD_LIBRARY_PATH"):
            env.pop(var, None)
        env.update(TYCHO_SOURCE=str(source), TYCHO_BUILD=str(build), TYCHO_PREFIX=str(prefix))
        (tmp / "walk.sh").write_text(script)
        print(run(["bash", str(tmp / "walk.sh")], env, work))

        # The walk's plugin folder and result (named on the page).
        plugin_dir = work / "huber-loss"
        cache = (plugin_dir / "build/CMakeCache.txt").read_text()
        found = re.search(r"^tycho_DIR:PATH=(.*)$", cache, re.M)
        if not found or not pathlib.Path(found.group(1)).resolve().is_relative_to(prefix.resolve()):
            fail(f"the plugin's CMake found tycho at {found.group(1) if found else '(nowhere)'}, not in {prefix}")

        tycho = prefix / "bin/tycho"
        env["TYCHO_PLUGIN_PATH"] = str(plugin_dir / "build")
        mos2 = source / "examples/mos2.toml"
        common = ["reconstruct", str(mos2), "-q", "--iterations", "3", "--set", "output.previews=false"]
        run([tycho, *common, "-o", tmp / "amplitude.zip"], env, tmp)
        run([tycho, *common, "--set", "reconstruct.loss=huber", "--set", "reconstruct.huber_delta=1e30",
             "-o", tmp / "huber_wide.zip"], env, tmp)

        huber = loss_history(plugin_dir / "huber.zip")
        amplitude = loss_history(tmp / "amplitude.zip")
        wide = loss_history(tmp / "huber_wide.zip")
        print("amplitude loss history:        ", amplitude.tolist())
        print("huber (δ = 2e-3) loss history: ", huber.tolist())
        print("huber (δ = 1e30) loss history: ", wide.tolist())
        if huber.shape != (3,) or amplitude.shape != (3,) or wide.shape != (3,):
            fail(f"expected 3 iterations, got {huber.shape}, {amplitude.shape}, {wide.shape}")
        if not np.all(np.isfinite(huber)) or not np.all(huber > 0):
            fail(f"the huber run's loss history is not finite and positive: {huber}")
        if not huber[0] < 0.999 * amplitude[0]:
            fail(f"the huber loss of the first iteration ({huber[0]}) is not below the amplitude loss's "
                 f"({amplitude[0]}): the plugin's loss was not the one used")
        rel = np.abs(wide - amplitude) / amplitude
        if not np.all(rel < 1e-5):
            fail(f"huber with δ = 1e30 differs from the amplitude loss by {rel.max():.3g} relative "
                 f"({wide} vs {amplitude})")

        # The constraint: the phase of the object's mean is held at 0 (the run without it drifts).
        def mean_phase(path):
            with np.load(path) as z:
                return float(np.angle(np.asarray(z["object"], dtype=np.complex128).sum()))
        referenced = mean_phase(work / "phase-reference/phase.zip")
        free = mean_phase(tmp / "amplitude.zip")
        print(f"phase of the object's mean: {referenced:.3g} rad with phase_reference, {free:.3g} rad without")
        if not abs(referenced) < 1e-8:
            fail(f"with the phase_reference constraint the object's mean has phase {referenced} rad, not 0")
        if not abs(free) > 1e-4:
            fail(f"without the constraint the object's mean has phase {free} rad: the check cannot tell the two apart")

        # What the built-in plugins link from core is installed too: a project against the prefix
        # links tycho::memory_models and tycho::constraint_kernels and calls both.
        models = tmp / "models"
        models.mkdir()
        (models / "CMakeLists.txt").write_text(
            "cmake_minimum_required(VERSION 3.20)\nproject(models CXX)\nset(CMAKE_CXX_STANDARD 20)\n"
            "find_package(tycho REQUIRED)\nadd_executable(models main.cpp)\n"
            "target_link_libraries(models PRIVATE tycho::memory_models tycho::constraint_kernels)\n")
        (models / "main.cpp").write_text(
            "#include <tycho/core/fft_size.hpp>\n#include <tycho/core/multislice.hpp>\n#include <complex>\n"
            "#include <cstdio>\n#include <vector>\nint main() {\n"
            "  std::vector<std::complex<double>> p = {{3, 0}, {4, 0}};\n"
            "  tycho::orthogonalize_probe_modes(p.data(), 1, 2);\n"
            "  std::printf(\"%lld %.3f\\n\", (long long)tycho::next_fast_fft_size(97), std::abs(p[0]));\n}\n")
        run(["cmake", "-S", str(models), "-B", str(models / "build"), f"-DCMAKE_PREFIX_PATH={prefix}"], env, tmp)
        run(["cmake", "--build", str(models / "build")], env, tmp)
        got = run([str(models / "build/models")], env, tmp).strip()
        words = got.split()
        if len(words) != 2 or words[0] != "98" or not np.isfinite(float(words[1])) or float(words[1]) <= 0:
            fail(f"the installed tycho::memory_models / tycho::constraint_kernels gave '{got}', expected '98 <|mode|>'")

        # pkg-config: a C program against the installed libtycho only.
        pc_env = dict(env, PKG_CONFIG_PATH=str(prefix / "lib/pkgconfig"))
        flags = run(["pkg-config", "--cflags", "--libs", "tycho"], pc_env, tmp).split()
        plugindir = run(["pkg-config", "--variable=plugindir", "tycho"], pc_env, tmp).strip()
        if pathlib.Path(plugindir).resolve() != (prefix / "lib/tycho/plugins").resolve():
            fail(f"tycho.pc's plugindir is {plugindir}, expected {prefix}/lib/tycho/plugins")
        (tmp / "version.c").write_text(
            '#include <stdio.h>\n#include <tycho/tycho.h>\n'
            'int main(void) { printf("%s %u\\n", tycho_version(), tycho_abi_version() >> 16); return 0; }\n')
        run(["cc", str(tmp / "version.c"), "-o", str(tmp / "version"), *flags], pc_env, tmp)
        out = run([str(tmp / "version")], dict(pc_env, LD_LIBRARY_PATH=str(prefix / "lib")), tmp).strip()
        version = re.search(r"^project\(tycho VERSION (\S+)", (source / "CMakeLists.txt").read_text(), re.M).group(1)
        if out != f"{version} 1":
            fail(f"the C program linked through tycho.pc printed '{out}', expected '{version} 1'")
        print("OK: walk, huber effect, δ = 1e30 equals amplitude, phase_reference effect, tycho.pc")
    finally:
        if args.keep:
            print(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
