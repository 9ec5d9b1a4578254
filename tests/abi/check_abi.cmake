# Runs abidiff on BASELINE (abidw XML) and LIBRARY. EXPECT = same: passes when abidiff finds no
# change (exit 0); EXPECT = changed: passes when it finds an ABI change (exit bits 4 or 8, not
# the error bit 1): the test that a deliberately changed struct fails the check.
# STRIP_TO (a path): compare a copy of LIBRARY without debug info, so a library's baseline is its
# symbol table whatever the build type (libtycho: the exported C API).
if(STRIP_TO)
  execute_process(COMMAND ${OBJCOPY} --strip-debug ${LIBRARY} ${STRIP_TO} RESULT_VARIABLE strip_rc)
  if(NOT strip_rc EQUAL 0)
    message(FATAL_ERROR "objcopy --strip-debug ${LIBRARY} failed")
  endif()
  set(LIBRARY ${STRIP_TO})
endif()
execute_process(COMMAND ${ABIDIFF} --no-show-locs ${BASELINE} ${LIBRARY}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
math(EXPR error_bit "${rc} & 1")
math(EXPR change_bits "${rc} & 12")
if(error_bit)
  message(FATAL_ERROR "abidiff failed (exit ${rc}): ${err}${out}")
endif()
if(EXPECT STREQUAL "same" AND NOT rc EQUAL 0)
  message(FATAL_ERROR "the ABI differs from ${BASELINE} (abidiff exit ${rc}):\n${out}\n"
    "A deliberate change (appended fields, a new minor): refresh the baseline with "
    "`cmake --build build --target tycho_abi_baseline` and commit abi/baseline/ (docs/plugin-guide.md).")
endif()
if(EXPECT STREQUAL "changed" AND change_bits EQUAL 0)
  message(FATAL_ERROR "abidiff did not notice the deliberate change (exit ${rc}):\n${out}")
endif()
message(STATUS "abidiff exit ${rc} as expected (${EXPECT})\n${out}")
