//! The run path of this crate's tests and doctests: the folder tycho-sys linked libtycho from
//! (TYCHO_LIB_DIR, or the build tree), so `cargo test` needs no LD_LIBRARY_PATH.
fn main() {
    if let Ok(dir) = std::env::var("DEP_TYCHO_LIB_DIR") {
        println!("cargo:rustc-link-arg=-Wl,-rpath,{}", dir);
    }
}
