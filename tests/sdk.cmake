# The installed SDK, end to end (tests/sdk/plugin_guide_walk.py): the walk of
# docs/plugin-guide.md installs this build tree into a temporary prefix, builds
# sdk/examples/huber_loss against that prefix only, loads it through TYCHO_PLUGIN_PATH and
# checks its effect on a 3-iteration MoS2 run; tycho.pc links a C program. Label `sdk`.
# Needs a python3 with numpy (python3-numpy); the system's is preferred over one on PATH.
set(tycho_sdk_python "")
find_program(tycho_path_python3 python3)
foreach(candidate /usr/bin/python3 ${tycho_path_python3})
  if(NOT tycho_sdk_python AND EXISTS ${candidate})
    execute_process(COMMAND ${candidate} -c "import numpy" RESULT_VARIABLE rc OUTPUT_QUIET ERROR_QUIET)
    if(rc EQUAL 0)
      set(tycho_sdk_python ${candidate})
    endif()
  endif()
endforeach()
if(NOT tycho_sdk_python)
  message(STATUS "tycho: no python3 with numpy, the installed-SDK test (label sdk) is not registered")
  return()
endif()
add_test(NAME Sdk.PluginGuideWalk
  COMMAND ${tycho_sdk_python} ${CMAKE_CURRENT_SOURCE_DIR}/sdk/plugin_guide_walk.py
          --source ${PROJECT_SOURCE_DIR} --build ${PROJECT_BINARY_DIR})
set_tests_properties(Sdk.PluginGuideWalk PROPERTIES LABELS sdk TIMEOUT 300)
