//! The safe crate against the real library: reconstructs the shipped MoS2 example for 3
//! iterations and checks the object and probe equal, bit for bit, what the `tycho` command
//! writes for the same config and iterations; bad input comes back as errors naming the key.
//!
//! Paths: the repository is three folders above this crate; the command is `$TYCHO_CLI`
//! (default `<repo>/build/bin/tycho`); files go to `$TYCHO_TEST_OUT` (default a temp folder).
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::process::Command;

use tycho::{Complex32, DType, EvaluateOptions, SaveMode, Session, Status};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../..")
}

fn out_dir() -> PathBuf {
    let dir = std::env::var_os("TYCHO_TEST_OUT")
        .map(PathBuf::from)
        .unwrap_or_else(|| std::env::temp_dir().join(format!("tycho-rust-{}", std::process::id())));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The data bytes of member `name` (a stored .npy) of a tycho result zip (docs/file-format.md:
/// .npy members are stored uncompressed, sizes in the local headers).
fn npy_member_data(zip: &[u8], name: &str) -> Vec<u8> {
    let u16_at = |at: usize| u16::from_le_bytes([zip[at], zip[at + 1]]) as usize;
    let u32_at = |at: usize| u32::from_le_bytes([zip[at], zip[at + 1], zip[at + 2], zip[at + 3]]) as usize;
    let mut at = 0;
    while u32_at(at) == 0x0403_4b50 {
        let (method, size, name_len, extra_len) = (u16_at(at + 8), u32_at(at + 18), u16_at(at + 26), u16_at(at + 28));
        let data = at + 30 + name_len + extra_len;
        if &zip[at + 30..at + 30 + name_len] == name.as_bytes() {
            assert_eq!(method, 0, "{name} is stored");
            let npy = &zip[data..data + size];
            assert_eq!(&npy[..6], b"\x93NUMPY");
            let start = if npy[6] == 1 { 10 + u16_at(data + 8) } else { 12 + u32_at(data + 8) };
            return npy[start..].to_vec();
        }
        at = data + size;
    }
    panic!("no member {name} in the result zip");
}

fn bytes_of<T>(values: &[T]) -> &[u8] {
    // SAFETY: plain old data (complex floats) viewed as bytes.
    unsafe { std::slice::from_raw_parts(values.as_ptr() as *const u8, std::mem::size_of_val(values)) }
}

#[test]
fn three_iterations_equal_the_command_line_result_bit_for_bit() {
    let config = repo().join("examples/mos2.toml");
    let out = out_dir();
    let cli_result = out.join("rust-cli-result.zip");
    let cli = std::env::var_os("TYCHO_CLI").map(PathBuf::from).unwrap_or_else(|| repo().join("build/bin/tycho"));
    let status = Command::new(&cli)
        .arg("reconstruct").arg(&config)
        .args(["--set", "reconstruct.iterations=3", "--set", "output.previews=false", "-q", "--overwrite", "-o"])
        .arg(&cli_result)
        .status()
        .unwrap_or_else(|e| panic!("running {}: {e}", cli.display()));
    assert!(status.success());

    let mut session = Session::from_file(&config, &["reconstruct.iterations=3"]).unwrap();
    assert_eq!((session.rank(), session.world_size()), (0, 1));
    let mut seen = Vec::new();
    session
        .run_with(0, |p| {
            seen.push(*p);
            ControlFlow::Continue(())
        })
        .unwrap();
    assert_eq!(seen.iter().map(|p| (p.iteration, p.iterations_total)).collect::<Vec<_>>(), [(1, 3), (2, 3), (3, 3)]);
    assert!(seen[2].loss < seen[0].loss, "the loss falls: {:?}", seen);

    let history = session.get("loss_history").unwrap();
    assert_eq!(history.as_slice::<f64>().unwrap(), seen.iter().map(|p| p.loss).collect::<Vec<_>>().as_slice());

    let zip = std::fs::read(&cli_result).unwrap();
    let object = session.get("object").unwrap();
    assert_eq!(object.dtype(), DType::Complex64);
    assert_eq!(object.shape(), [1, 220, 197]);
    let values = object.as_slice::<Complex32>().unwrap();
    assert!(bytes_of(values) == npy_member_data(&zip, "object.npy").as_slice(), "object differs from the CLI's");
    // The view indexes (slice, row, column) in row-major order.
    let view = object.view::<Complex32>().unwrap();
    assert_eq!(view[[0, 110, 100]], values[110 * 197 + 100]);
    assert!(view.get(&[0, 220, 0]).is_none());
    assert_ne!(view[[0, 110, 100]], Complex32 { re: 1.0, im: 0.0 }, "the object changed from its start");

    let probe = session.get("probe").unwrap();
    assert_eq!(probe.shape(), [1, 96, 96]);
    assert!(bytes_of(probe.as_slice::<Complex32>().unwrap()) == npy_member_data(&zip, "probe.npy").as_slice());

    // Reading as the wrong type and an unknown name are errors, not garbage.
    let wrong = object.as_slice::<f64>().unwrap_err();
    assert_eq!(wrong.status(), Status::BadData);
    assert_eq!(wrong.message(), "tensor 'object' is Complex64, not Float64");
    drop((object, probe, history));
    let missing = session.get("nonsense").unwrap_err();
    assert_eq!(missing.status(), Status::NotFound);
    assert!(missing.message().contains("nonsense"), "{missing}");

    // Breaking out of the closure stops after that iteration; the count goes on from 3.
    let stopped = session.run_with(5, |p| if p.iteration == 5 { ControlFlow::Break(()) } else { ControlFlow::Continue(()) });
    assert_eq!(stopped.unwrap_err().status(), Status::Cancelled);
    assert_eq!(session.get("loss_history").unwrap().shape(), [5]);

    let saved = out.join("rust-session-result.zip");
    session.save(&saved, SaveMode::Overwrite).unwrap();
    let again = session.save(&saved, SaveMode::New).unwrap_err();
    assert_eq!(again.status(), Status::Io);

    // The saved result against the ground truth: the text `tycho evaluate` prints.
    let truth = repo().join("examples/data/mos2_ground_truth.npz");
    let printed = Command::new(&cli).arg("evaluate").arg(&cli_result).arg("--truth").arg(&truth).output().unwrap();
    assert!(printed.status.success());
    let figures = tycho::evaluate(&cli_result, &truth, &EvaluateOptions::default()).unwrap();
    assert_eq!(figures, String::from_utf8(printed.stdout).unwrap().trim_end());
    assert!(figures.contains("\"iterations\": 3"), "{figures}");
    let bad = EvaluateOptions { fov_fraction: 2.0, ..EvaluateOptions::default() };
    let err = tycho::evaluate(&cli_result, &truth, &bad).unwrap_err();
    assert_eq!(err.status(), Status::InvalidArgument);
    assert!(err.message().contains("options->fov_fraction"), "{err}");
    let missing = tycho::evaluate(&cli_result, out.join("no-truth.npz"), &EvaluateOptions::default()).unwrap_err();
    assert!(missing.message().contains("no-truth.npz"), "{missing}");
}

#[test]
fn a_bad_config_is_an_error_naming_the_key() {
    let err = Session::new("[reconstruct]\nbatchsize = 3\n", None).unwrap_err();
    assert_eq!(err.status(), Status::InvalidArgument);
    assert!(err.message().contains("unknown key 'batchsize' in [reconstruct]"), "{err}");
    assert!(err.message().contains("did you mean 'batch_size'?"), "{err}");
    assert!(err.to_string().starts_with("TYCHO_ERR_INVALID_ARGUMENT: "), "{err}");

    let missing = Session::from_file(repo().join("examples/no-such.toml"), &[]).unwrap_err();
    assert_eq!(missing.status(), Status::Io);
    assert!(missing.message().contains("no-such.toml"), "{missing}");
}
