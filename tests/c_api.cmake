# The embedding API tested from C, against libtycho.so alone.
add_executable(tycho_c_api_test ${CMAKE_CURRENT_SOURCE_DIR}/c_api_test.c)
target_link_libraries(tycho_c_api_test PRIVATE tycho::tycho m)
get_property(c_api_plugins GLOBAL PROPERTY TYCHO_PLUGIN_TARGETS)
add_dependencies(tycho_c_api_test ${c_api_plugins})
add_test(NAME CApi.RunsMainJobFromC
  COMMAND tycho_c_api_test ${PROJECT_SOURCE_DIR}/examples ${CMAKE_CURRENT_BINARY_DIR})
