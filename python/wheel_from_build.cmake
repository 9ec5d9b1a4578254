# The wheel of an already-built tree: with -DTYCHO_WHEEL_FROM_BUILD=<build folder> (the tests
# pass it: tests/python_wheel_check.py), the top-level CMakeLists.txt includes only this file and
# the wheel holds that tree's libtycho, command and plugins, installed by that tree's own
# python_wheel rules (python/wheel.cmake: the same layout and run paths as a wheel built from
# scratch). Nothing is compiled, so the check of the wheel costs seconds instead of a second
# build of everything. The Python files come from the source tree either way.
if(NOT EXISTS "${TYCHO_WHEEL_FROM_BUILD}/CMakeCache.txt")
  message(FATAL_ERROR "TYCHO_WHEEL_FROM_BUILD='${TYCHO_WHEEL_FROM_BUILD}' is not a configured tycho build folder "
    "(no CMakeCache.txt): build it first (scripts/build)")
endif()
message(STATUS "tycho: the wheel packages the build in ${TYCHO_WHEEL_FROM_BUILD}, compiling nothing")
install(CODE "
  set(strip \"\")
  if(CMAKE_INSTALL_DO_STRIP)  # scikit-build-core's install.strip, passed on
    set(strip --strip)
  endif()
  execute_process(COMMAND \"${CMAKE_COMMAND}\" --install \"${TYCHO_WHEEL_FROM_BUILD}\" --component python_wheel
                          --prefix \"\${CMAKE_INSTALL_PREFIX}\" \${strip} COMMAND_ERROR_IS_FATAL ANY)"
  COMPONENT python_wheel)
