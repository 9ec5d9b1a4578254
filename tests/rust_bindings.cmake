# The Rust bindings (bindings/rust): `cargo test --offline` of tycho-sys (declarations checked
# against tycho.h) and tycho (reconstructs the MoS2 example for 3 iterations and compares the
# object with the tycho command's bit for bit; runs the examples of docs/embedding/rust.md).
# Cargo builds into the build tree, so the source tree stays clean (but for Cargo.lock, ignored).
find_program(TYCHO_CARGO cargo)
if(TYCHO_CARGO)
  add_test(NAME Rust.CargoTest
    COMMAND ${TYCHO_CARGO} test --offline --manifest-path ${PROJECT_SOURCE_DIR}/bindings/rust/Cargo.toml)
  set_tests_properties(Rust.CargoTest PROPERTIES TIMEOUT 900 ENVIRONMENT
    "CARGO_TARGET_DIR=${CMAKE_CURRENT_BINARY_DIR}/rust-target;TYCHO_LIB_DIR=$<TARGET_FILE_DIR:tycho_shared>;TYCHO_CLI=$<TARGET_FILE:tycho>;TYCHO_TEST_OUT=${CMAKE_CURRENT_BINARY_DIR}/rust-out")
else()
  add_test(NAME Rust.CargoTest
    COMMAND sh -c "echo 'Rust.CargoTest skipped: cargo was not found on PATH (Debian: apt-get install cargo rustc, as scripts/install-deps does)'; exit 77")
  set_tests_properties(Rust.CargoTest PROPERTIES SKIP_RETURN_CODE 77)
endif()
