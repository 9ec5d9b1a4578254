"""tycho.evaluate: the C API's tycho_evaluate, the same figures as `tycho evaluate`."""
import json
import subprocess

import pytest

import tycho


@pytest.fixture(scope="module")
def truth(examples):
    return examples / "data" / "mos2_ground_truth.npz"


def test_the_commands_figures(cli, cli_result, truth):
    printed = subprocess.run([cli, "evaluate", str(cli_result), "--truth", str(truth)], check=True,
                             capture_output=True, text=True).stdout
    figures = tycho.evaluate(cli_result, truth)
    assert figures == json.loads(printed)
    # 3 iterations of the main job: the local-phase Pearson is well under the 100-iteration 0.93.
    assert 0.3 < figures["pearson"] < 0.9 and figures["iterations"] == 3 and figures["sigma_A"] == 2.0


def test_options(cli, cli_result, truth):
    printed = subprocess.run([cli, "evaluate", str(cli_result), "--truth", str(truth), "--sigma-A", "1.5",
                              "--fov-fraction", "0.6"], check=True, capture_output=True, text=True).stdout
    assert tycho.evaluate(cli_result, truth, sigma_A=1.5, fov_fraction=0.6) == json.loads(printed)


def test_errors_name_what_is_wrong(cli_result, truth, tmp_path):
    with pytest.raises(tycho.InvalidArgumentError, match="options->fov_fraction"):
        tycho.evaluate(cli_result, truth, fov_fraction=2.0)
    with pytest.raises(tycho.TychoError, match="no-truth.npz"):
        tycho.evaluate(cli_result, tmp_path / "no-truth.npz")
