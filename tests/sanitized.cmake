# The tests that feed tycho untrusted input, as their own binary for the ASan/UBSan build
# (-DTYCHO_SANITIZE=ON or -DTYCHO_FUZZ=ON; scripts/sanitize-tests): building only these, the
# `tycho` command and the plugins they run keeps that build short (CI has 2 cores).
#   bad_input, run_guarantees     configs, command lines, outputs, non-finite values
#   hostile_files, hostile_results  crafted HDF5 shapes, manifests, .npz CRCs and sizes
#   zip_format, npy_source        zip members and .npy headers
#   config_environment, settings  ${} expansion, typed settings of components
#   emd_source, cxi_source        HDF5 files with missing, misshapen or mistyped datasets
#   mib_, arina_, dm_, empad_source  detector files truncated, bit-flipped, oversized
#   hostile_features              evaluate's truth files, constraint entries, host_memory_GiB
#   hostile_limits                settings checked before the work, sizes and counts near 2^63
#   fused_loss                    the losses' far-field pass: shapes, masks, modes, refused arguments
#   deterministic_sums, fixed_point  the cpu engine's int64 sums (wrapping, never signed overflow)
#                                 in every path: off by default, so no other test here runs them
#   bad_pixels                    [preprocess] bad_pixels and the search for dead and hot pixels on
#                                 every shared data file, NaN and saturated values, the ranks' texts
#   lattice_map                   the scan map from a crystal's lattice: the fits' index arithmetic
#                                 on synthetic scans, no lattice, a block too small
if(TYCHO_SANITIZE OR TYCHO_FUZZ)
  add_executable(tycho_sanitized_tests test_bad_input.cpp test_run_guarantees.cpp test_hostile_files.cpp
    test_hostile_results.cpp test_zip_format.cpp test_npy_source.cpp test_config_environment.cpp test_settings.cpp
    test_emd_source.cpp test_cxi_source.cpp test_hostile_features.cpp test_hostile_limits.cpp test_fused_loss.cpp
    test_mib_source.cpp test_arina_source.cpp test_dm_source.cpp test_empad_source.cpp test_bad_pixels.cpp
    test_deterministic_sums.cpp test_fixed_point.cpp test_lattice_map.cpp)
  target_include_directories(tycho_sanitized_tests PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/support)
  target_link_libraries(tycho_sanitized_tests PRIVATE tycho_runtime tycho_core tomlplusplus::tomlplusplus
    nlohmann_json::nlohmann_json hdf5::hdf5 PkgConfig::LZ4 PkgConfig::LIBZIP GTest::gtest_main)
  target_compile_definitions(tycho_sanitized_tests PRIVATE
    TYCHO_SOURCE_DIR="${PROJECT_SOURCE_DIR}" TYCHO_BINARY_DIR="${PROJECT_BINARY_DIR}"
    TYCHO_TEST_PLUGIN_DIR="${CMAKE_BINARY_DIR}/test-plugins")
  # Only the plugins these tests run (sources, the cpu engine, loss, optimizers, constraints, the zip format,
  # the test-only plugins): the instrumented build compiles nothing else.
  add_dependencies(tycho_sanitized_tests tycho tycho_plugin_emd tycho_plugin_cxi tycho_plugin_npy tycho_plugin_detectors tycho_plugin_simulate
    tycho_plugin_zip tycho_plugin_cpu tycho_plugin_losses tycho_plugin_optimizers tycho_plugin_constraints
    tycho_test_plugin_abi_major2 tycho_test_plugin_abi_newer_minor tycho_test_plugin_no_entry
    tycho_test_plugin_nan_optimizer tycho_test_plugin_planned_engine)
endif()
