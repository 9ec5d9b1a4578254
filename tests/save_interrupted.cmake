# tests/test_save_interrupted.cpp kills a save in the middle: this program saves one large
# record over a file through the zip format, as the host saves a result.
add_executable(tycho_save_record_helper ${CMAKE_CURRENT_SOURCE_DIR}/helpers/save_record_helper.cpp)
target_link_libraries(tycho_save_record_helper PRIVATE tycho_runtime tycho_core)
add_dependencies(tycho_tests tycho_save_record_helper)
target_compile_definitions(tycho_tests PRIVATE
  TYCHO_SAVE_RECORD_HELPER="$<TARGET_FILE:tycho_save_record_helper>")
