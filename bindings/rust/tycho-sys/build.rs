//! Links libtycho. The folder holding libtycho.so comes from the environment variable
//! TYCHO_LIB_DIR (an install's `<prefix>/lib`, say); without it, the build tree of this
//! checkout (`<repo>/build/lib`, what scripts/build makes). The folder is also written into the
//! run path of this crate's tests, so they find the library without LD_LIBRARY_PATH, and passed
//! on to dependent crates as DEP_TYCHO_LIB_DIR.
use std::env;
use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-env-changed=TYCHO_LIB_DIR");
    let lib_dir = match env::var_os("TYCHO_LIB_DIR") {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"))
            .join("../../../build/lib"),
    };
    // An absolute, clean path: libtycho finds its plugins beside the path it was loaded from.
    let lib_dir = lib_dir.canonicalize().unwrap_or(lib_dir);
    if !lib_dir.join("libtycho.so").exists() {
        println!(
            "cargo:warning=no libtycho.so in {} (set TYCHO_LIB_DIR, or build tycho with scripts/build)",
            lib_dir.display()
        );
    }
    println!("cargo:rustc-link-search=native={}", lib_dir.display());
    println!("cargo:rustc-link-lib=dylib=tycho");
    println!("cargo:rustc-link-arg=-Wl,-rpath,{}", lib_dir.display());
    println!("cargo:lib_dir={}", lib_dir.display());
}
