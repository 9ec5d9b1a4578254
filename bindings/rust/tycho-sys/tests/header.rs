//! Checks the hand-written declarations of this crate against the C headers, so a change to
//! `abi/tycho/tycho.h` that the Rust side misses fails here:
//! - every `TYCHO_API` function of tycho.h is declared in `src/lib.rs` with the same name,
//!   argument count and argument/return types (C types mapped to their Rust spelling), and no
//!   function is declared that tycho.h lacks;
//! - a C program compiled against the headers (`cc`, or `$CC`) prints the size and the field
//!   offsets of every struct and the value of every constant, and they equal Rust's.
use std::collections::BTreeMap;
use std::mem::{size_of, MaybeUninit};
use std::path::{Path, PathBuf};
use std::process::Command;
use tycho_sys::*;

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../..")
}

fn squash(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// A C type as this crate spells it: `const char*` -> `*const c_char`, `tycho_session**` ->
/// `*mut *mut tycho_session`.
fn rust_spelling(c_type: &str) -> String {
    let t = squash(c_type).replace(" *", "*");
    let levels = t.matches('*').count();
    let base = t.trim_end_matches('*').trim();
    let (is_const, base) = match base.strip_prefix("const ") {
        Some(b) => (true, b.trim()),
        None => (false, base),
    };
    let base = match base {
        "char" => "c_char",
        "int" => "c_int",
        "void" => "c_void",
        "int64_t" => "i64",
        "int32_t" => "i32",
        "uint32_t" => "u32",
        other => other,
    };
    let mut out = String::new();
    for level in 0..levels {
        let innermost = level + 1 == levels;
        out.push_str(if innermost && is_const { "*const " } else { "*mut " });
    }
    out + base
}

/// name -> (argument types, return type), from tycho.h's `TYCHO_API` declarations.
fn c_functions(header: &str) -> BTreeMap<String, (Vec<String>, String)> {
    let mut out = BTreeMap::new();
    for piece in header.split("TYCHO_API ").skip(1) {
        if piece.starts_with("__") {
            continue; // the #define lines
        }
        let decl = squash(&piece[..piece.find(';').expect("a declaration ends with ';'")]);
        let open = decl.find('(').unwrap();
        let head = decl[..open].trim();
        let args = decl[open + 1..decl.rfind(')').unwrap()].trim();
        let split = head.rfind(&[' ', '*'][..]).unwrap();
        let name = head[split + 1..].to_string();
        let ret = rust_spelling(&head[..split + 1]);
        let mut types = Vec::new();
        if args != "void" {
            for arg in args.split(',') {
                let arg = arg.trim();
                let cut = arg.rfind(&[' ', '*'][..]).unwrap();
                types.push(rust_spelling(&arg[..cut + 1]));
            }
        }
        out.insert(name, (types, if ret == "c_void" { String::new() } else { ret }));
    }
    out
}

/// The same from the `extern "C"` block of src/lib.rs.
fn rust_functions(source: &str) -> BTreeMap<String, (Vec<String>, String)> {
    let start = source.find("extern \"C\" {").expect("an extern block") + "extern \"C\" {".len();
    let block = &source[start..start + source[start..].find("\n}").unwrap()];
    let mut out = BTreeMap::new();
    for decl in block.split(';').map(squash).filter(|d| !d.is_empty()) {
        let decl = decl.strip_prefix("pub fn ").expect("only `pub fn` in the extern block");
        let open = decl.find('(').unwrap();
        let close = decl.rfind(')').unwrap();
        let name = decl[..open].to_string();
        let types = decl[open + 1..close]
            .split(',')
            .map(str::trim)
            .filter(|a| !a.is_empty())
            .map(|a| a[a.find(':').unwrap() + 1..].trim().to_string())
            .collect();
        let ret = decl[close + 1..].trim().trim_start_matches("->").trim().to_string();
        out.insert(name, (types, ret));
    }
    out
}

#[test]
fn every_function_of_tycho_h_is_declared_alike() {
    let header = std::fs::read_to_string(repo_root().join("abi/tycho/tycho.h")).unwrap();
    let source = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("src/lib.rs")).unwrap();
    let c = c_functions(&header);
    let rust = rust_functions(&source);
    assert_eq!(c.len(), 16, "tycho.h declares 16 functions (unchanged since ABI 1.3): {:?}", c.keys());
    assert_eq!(c, rust, "tycho.h (left) and tycho-sys (right) differ");
}

macro_rules! layout {
    ($into:expr, $t:ident { $($field:ident),* }) => {{
        $into.push((format!("sizeof {}", stringify!($t)), size_of::<$t>() as u64,
                    format!("sizeof({})", stringify!($t))));
        let probe = MaybeUninit::<$t>::uninit();
        let base = probe.as_ptr();
        $(
            // SAFETY: only the address of a field is taken, nothing is read.
            let at = unsafe { std::ptr::addr_of!((*base).$field) } as usize - base as usize;
            $into.push((format!("offsetof {}.{}", stringify!($t), stringify!($field)), at as u64,
                        format!("offsetof({}, {})", stringify!($t), stringify!($field))));
        )*
    }};
}

macro_rules! constants {
    ($into:expr, $($name:ident),*) => {
        $( $into.push((stringify!($name).to_string(), $name as u64, format!("(unsigned long long){}", stringify!($name)))); )*
    };
}

#[test]
fn struct_layouts_and_constants_match_the_c_headers() {
    // (label, Rust's value, the C expression that must equal it)
    let mut checks: Vec<(String, u64, String)> = Vec::new();
    layout!(checks, tycho_progress { struct_size, iteration, iterations_total, loss, seconds });
    layout!(checks, tycho_session_options { struct_size, base_dir, overrides, n_overrides, communicator });
    layout!(checks, tycho_evaluate_options { struct_size, sigma_A, fov_fraction, slice_thickness_A });
    layout!(checks, DLDevice { device_type, device_id });
    layout!(checks, DLDataType { code, bits, lanes });
    layout!(checks, DLTensor { data, device, ndim, dtype, shape, strides, byte_offset });
    layout!(checks, DLManagedTensor { dl_tensor, manager_ctx, deleter });
    checks.push(("sizeof tycho_status".into(), size_of::<tycho_status>() as u64, "sizeof(tycho_status)".into()));
    checks.push(("sizeof tycho_save_mode".into(), size_of::<tycho_save_mode>() as u64, "sizeof(tycho_save_mode)".into()));
    checks.push(("sizeof DLDeviceType".into(), size_of::<DLDeviceType>() as u64, "sizeof(DLDeviceType)".into()));
    constants!(checks, TYCHO_ABI_VERSION_MAJOR, TYCHO_ABI_VERSION_MINOR, TYCHO_ABI_VERSION, DLPACK_VERSION,
        TYCHO_OK, TYCHO_ERR_INVALID_ARGUMENT, TYCHO_ERR_NOT_FOUND, TYCHO_ERR_IO, TYCHO_ERR_BAD_DATA,
        TYCHO_ERR_ABI_MISMATCH, TYCHO_ERR_OUT_OF_MEMORY, TYCHO_ERR_UNSUPPORTED, TYCHO_ERR_CANCELLED,
        TYCHO_ERR_INTERNAL, TYCHO_SAVE_NEW, TYCHO_SAVE_OVERWRITE,
        kDLCPU, kDLCUDA, kDLCUDAHost, kDLOpenCL, kDLVulkan, kDLMetal, kDLVPI, kDLROCM, kDLROCMHost,
        kDLExtDev, kDLCUDAManaged, kDLInt, kDLUInt, kDLFloat, kDLOpaqueHandle, kDLBfloat, kDLComplex);

    let mut c = String::from("#include <stddef.h>\n#include <stdio.h>\n#include <string.h>\n#include <tycho/tycho.h>\nint main(void) {\n");
    c += &format!("  if (strcmp(TYCHO_VERSION_STRING, \"{}\") != 0) return 3;\n", TYCHO_VERSION_STRING);
    for (label, _, expr) in &checks {
        c += &format!("  printf(\"%s %llu\\n\", \"{}\", (unsigned long long)({}));\n", label, expr);
    }
    c += "  return 0;\n}\n";

    let dir = std::env::temp_dir().join(format!("tycho-sys-layout-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (src, exe) = (dir.join("layout.c"), dir.join("layout"));
    std::fs::write(&src, c).unwrap();
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let built = Command::new(&cc)
        .args(["-std=c11", "-I"]).arg(repo_root().join("abi")).arg(&src).arg("-o").arg(&exe)
        .output().unwrap_or_else(|e| panic!("running {cc}: {e}"));
    assert!(built.status.success(), "{cc} failed:\n{}", String::from_utf8_lossy(&built.stderr));
    let ran = Command::new(&exe).output().unwrap();
    assert!(ran.status.success(), "TYCHO_VERSION_STRING differs from tycho-sys's");
    let printed = String::from_utf8(ran.stdout).unwrap();
    std::fs::remove_dir_all(&dir).ok();

    let from_c: Vec<(String, u64)> = printed
        .lines()
        .map(|l| {
            let (label, value) = l.rsplit_once(' ').unwrap();
            (label.to_string(), value.parse().unwrap())
        })
        .collect();
    let from_rust: Vec<(String, u64)> = checks.into_iter().map(|(l, v, _)| (l, v)).collect();
    assert_eq!(from_c, from_rust, "C headers (left) and tycho-sys (right) differ");
}

#[test]
fn the_linked_library_is_the_one_declared() {
    // SAFETY: plain calls without arguments; the strings are static in libtycho.
    unsafe {
        assert_eq!(tycho_abi_version() >> 16, TYCHO_ABI_VERSION_MAJOR);
        let version = std::ffi::CStr::from_ptr(tycho_version()).to_str().unwrap();
        assert_eq!(version, TYCHO_VERSION_STRING);
        let name = std::ffi::CStr::from_ptr(tycho_status_string(TYCHO_ERR_NOT_FOUND));
        assert_eq!(name.to_str().unwrap(), "TYCHO_ERR_NOT_FOUND");
    }
}
