# The bad-input and hostile-file tests as their own binary, for the ASan/UBSan build
# (-DTYCHO_SANITIZE=ON, scripts/sanitize-tests): building only these keeps that build short.
if(TYCHO_SANITIZE)
  add_executable(tycho_sanitized_tests test_bad_input.cpp test_hostile_files.cpp test_hostile_results.cpp)
  target_include_directories(tycho_sanitized_tests PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/support)
  target_link_libraries(tycho_sanitized_tests PRIVATE tycho_runtime tycho_core tomlplusplus::tomlplusplus
    nlohmann_json::nlohmann_json GTest::gtest_main)
  target_compile_definitions(tycho_sanitized_tests PRIVATE
    TYCHO_SOURCE_DIR="${PROJECT_SOURCE_DIR}" TYCHO_BINARY_DIR="${PROJECT_BINARY_DIR}"
    TYCHO_TEST_PLUGIN_DIR="${CMAKE_BINARY_DIR}/test-plugins")
  # Only the plugins these tests run (sources, the cpu engine, loss, optimizers, the zip format):
  # the instrumented build compiles nothing else.
  add_dependencies(tycho_sanitized_tests tycho tycho_plugin_emd tycho_plugin_cxi tycho_plugin_npy
    tycho_plugin_zip tycho_plugin_cpu tycho_plugin_losses tycho_plugin_optimizers
    tycho_test_plugin_abi_major2 tycho_test_plugin_abi_newer_minor tycho_test_plugin_no_entry)
  gtest_discover_tests(tycho_sanitized_tests TEST_PREFIX "sanitized." DISCOVERY_TIMEOUT 120 PROPERTIES TIMEOUT 900)
endif()
