# The embedding API tested from C, against libtycho.so alone.
add_executable(tycho_c_api_test ${CMAKE_CURRENT_SOURCE_DIR}/c_api_test.c)
target_link_libraries(tycho_c_api_test PRIVATE tycho::tycho m)
get_property(c_api_plugins GLOBAL PROPERTY TYCHO_PLUGIN_TARGETS)
add_dependencies(tycho_c_api_test ${c_api_plugins})
add_test(NAME CApi.RunsMainJobFromC
  COMMAND tycho_c_api_test ${PROJECT_SOURCE_DIR}/examples ${CMAKE_CURRENT_BINARY_DIR})

# A loss plugin that always fails, in a folder of its own (normal runs never see it): its
# message must reach tycho_last_error() whole.
set(TYCHO_FAILING_PLUGIN_DIR ${CMAKE_BINARY_DIR}/test-plugins-failing)
add_library(tycho_test_plugin_failing_loss SHARED ${CMAKE_CURRENT_SOURCE_DIR}/plugins/failing_loss_plugin.cpp)
target_link_libraries(tycho_test_plugin_failing_loss PRIVATE tycho::sdk)
set_target_properties(tycho_test_plugin_failing_loss PROPERTIES
  OUTPUT_NAME tycho_plugin_failing_loss
  CXX_VISIBILITY_PRESET hidden C_VISIBILITY_PRESET hidden VISIBILITY_INLINES_HIDDEN ON
  LIBRARY_OUTPUT_DIRECTORY ${TYCHO_FAILING_PLUGIN_DIR})
add_dependencies(tycho_c_api_test tycho_test_plugin_failing_loss)
add_test(NAME CApi.ComponentErrorTextReachesCaller
  COMMAND tycho_c_api_test --failing-loss ${PROJECT_SOURCE_DIR}/examples)
set_tests_properties(CApi.ComponentErrorTextReachesCaller PROPERTIES
  ENVIRONMENT "TYCHO_PLUGIN_PATH=${TYCHO_FAILING_PLUGIN_DIR}")

# Plugin discovery however libtycho was loaded: by a relative path, and by its SONAME through a
# relative LD_LIBRARY_PATH entry (both from the build folder; the program then leaves it).
add_executable(tycho_c_api_dlopen_test ${CMAKE_CURRENT_SOURCE_DIR}/c_api_dlopen_test.c)
target_link_libraries(tycho_c_api_dlopen_test PRIVATE tycho_abi)
target_link_libraries(tycho_c_api_dlopen_test PRIVATE ${CMAKE_DL_LIBS})
# Not in bin/: there the command's own folder (bin/../lib/tycho/plugins) would find the plugins
# whatever libtycho did, as it would not for python3 in /usr/bin.
set_target_properties(tycho_c_api_dlopen_test PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR}/dlopen)
add_dependencies(tycho_c_api_dlopen_test tycho_shared ${c_api_plugins})
add_test(NAME CApi.FindsPluginsWhenLoadedByRelativePath
  COMMAND tycho_c_api_dlopen_test lib/$<TARGET_LINKER_FILE_NAME:tycho_shared> ${PROJECT_SOURCE_DIR}/examples
          ${CMAKE_BINARY_DIR}/lib/tycho/plugins
  WORKING_DIRECTORY ${CMAKE_BINARY_DIR})
add_test(NAME CApi.FindsPluginsWhenLoadedThroughLdLibraryPath
  COMMAND tycho_c_api_dlopen_test $<TARGET_SONAME_FILE_NAME:tycho_shared> ${PROJECT_SOURCE_DIR}/examples
          ${CMAKE_BINARY_DIR}/lib/tycho/plugins
  WORKING_DIRECTORY ${CMAKE_BINARY_DIR})
set_tests_properties(CApi.FindsPluginsWhenLoadedThroughLdLibraryPath PROPERTIES ENVIRONMENT "LD_LIBRARY_PATH=lib")

# ... and from an installed prefix (lib/libtycho.so.1 beside lib/tycho/plugins), loaded by a
# relative path from the prefix.
set(c_api_prefix ${CMAKE_CURRENT_BINARY_DIR}/c_api_prefix)
add_test(NAME CApi.InstallForDlopen
  COMMAND ${CMAKE_COMMAND} --install ${CMAKE_BINARY_DIR} --prefix ${c_api_prefix})
set_tests_properties(CApi.InstallForDlopen PROPERTIES FIXTURES_SETUP c_api_prefix)
add_test(NAME CApi.FindsPluginsWhenLoadedFromInstalledPrefix
  COMMAND tycho_c_api_dlopen_test ${CMAKE_INSTALL_LIBDIR}/$<TARGET_SONAME_FILE_NAME:tycho_shared>
          ${PROJECT_SOURCE_DIR}/examples ${c_api_prefix}/${CMAKE_INSTALL_LIBDIR}/tycho/plugins
  WORKING_DIRECTORY ${c_api_prefix})
set_tests_properties(CApi.FindsPluginsWhenLoadedFromInstalledPrefix PROPERTIES FIXTURES_REQUIRED c_api_prefix)
