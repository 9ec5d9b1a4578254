# Test-only plugins for tests/test_plugin_abi.cpp and tests/test_bad_input.cpp: libraries the
# host must refuse (another ABI major, a newer ABI minor, no entry function). They go to
# <build>/test-plugins, NOT lib/tycho/plugins, so normal runs never see them; tests reach them
# through TYCHO_TEST_PLUGIN_DIR (registry::load_file / TYCHO_PLUGIN_PATH).
set(TYCHO_TEST_PLUGIN_DIR ${CMAKE_BINARY_DIR}/test-plugins)

function(tycho_add_test_plugin target output_name source)
  add_library(${target} SHARED ${source})
  target_link_libraries(${target} PRIVATE tycho::sdk)
  set_target_properties(${target} PROPERTIES
    OUTPUT_NAME ${output_name}
    CXX_VISIBILITY_PRESET hidden C_VISIBILITY_PRESET hidden VISIBILITY_INLINES_HIDDEN ON
    LIBRARY_OUTPUT_DIRECTORY ${TYCHO_TEST_PLUGIN_DIR})
  add_dependencies(tycho_tests ${target})
endfunction()

tycho_add_test_plugin(tycho_test_plugin_abi_major2 tycho_plugin_abi_major2
  ${CMAKE_CURRENT_SOURCE_DIR}/plugins/abi_version_plugin.cpp)
target_compile_definitions(tycho_test_plugin_abi_major2 PRIVATE
  "TEST_PLUGIN_ABI_VERSION=((2u << 16) | 0u)" TEST_PLUGIN_NAME="abi_major2"
  TEST_PLUGIN_ENGINE="abi2_engine")

tycho_add_test_plugin(tycho_test_plugin_abi_newer_minor tycho_plugin_abi_newer_minor
  ${CMAKE_CURRENT_SOURCE_DIR}/plugins/abi_version_plugin.cpp)
target_compile_definitions(tycho_test_plugin_abi_newer_minor PRIVATE
  "TEST_PLUGIN_ABI_VERSION=((1u << 16) | 99u)" TEST_PLUGIN_NAME="abi_newer_minor"
  TEST_PLUGIN_ENGINE="abi_minor99_engine")

# Built against "ABI 1.99" but requiring only 1.1: the host loads it (version negotiation).
tycho_add_test_plugin(tycho_test_plugin_abi_newer_minor_ok tycho_plugin_abi_newer_minor_ok
  ${CMAKE_CURRENT_SOURCE_DIR}/plugins/abi_version_plugin.cpp)
target_compile_definitions(tycho_test_plugin_abi_newer_minor_ok PRIVATE
  "TEST_PLUGIN_ABI_VERSION=((1u << 16) | 99u)" "TEST_PLUGIN_ABI_REQUIRED=((1u << 16) | 1u)"
  TEST_PLUGIN_ACCEPTABLE TEST_PLUGIN_NAME="abi_newer_minor_ok" TEST_PLUGIN_ENGINE="abi_minor99_ok_engine")

# Claims dlpack.h 0.5 (DLPACK_VERSION 50): refused at load.
tycho_add_test_plugin(tycho_test_plugin_abi_old_dlpack tycho_plugin_abi_old_dlpack
  ${CMAKE_CURRENT_SOURCE_DIR}/plugins/abi_version_plugin.cpp)
target_compile_definitions(tycho_test_plugin_abi_old_dlpack PRIVATE
  "TEST_PLUGIN_ABI_VERSION=((1u << 16) | 1u)" TEST_PLUGIN_DLPACK=50u
  TEST_PLUGIN_NAME="abi_old_dlpack" TEST_PLUGIN_ENGINE="old_dlpack_engine")

tycho_add_test_plugin(tycho_test_plugin_no_entry tycho_plugin_no_entry
  ${CMAKE_CURRENT_SOURCE_DIR}/plugins/no_entry_plugin.cpp)

# A third-party engine that only describes its memory (plan_memory): `tycho plan` with it.
tycho_add_test_plugin(tycho_test_plugin_planned_engine tycho_plugin_planned_engine
  ${CMAKE_CURRENT_SOURCE_DIR}/plugins/planned_engine_plugin.cpp)

target_compile_definitions(tycho_tests PRIVATE TYCHO_TEST_PLUGIN_DIR="${TYCHO_TEST_PLUGIN_DIR}")

# An optimizer that writes NaN into its parameter at a chosen step (tests/test_non_finite.cpp).
tycho_add_test_plugin(tycho_test_plugin_nan_optimizer tycho_plugin_test_nan_optimizer
  ${CMAKE_CURRENT_SOURCE_DIR}/plugins/nan_optimizer_plugin.cpp)
