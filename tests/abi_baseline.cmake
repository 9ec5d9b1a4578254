# The ABI baseline (docs/plugin-guide.md, "The ABI baseline"): abidiff (Debian abigail-tools)
# compares the layout of every public struct, through a probe library built with debug info,
# with abi/baseline/tycho_abi_probe.abi. A second probe, with a field inserted by a -D, must make
# the check fail. Without abidiff the tests are not registered (scripts/install-deps adds it).
find_program(TYCHO_ABIDIFF abidiff)
find_program(TYCHO_ABIDW abidw)
if(NOT TYCHO_ABIDIFF OR NOT TYCHO_ABIDW)
  message(STATUS "abidiff/abidw not found (abigail-tools): the ABI baseline check is off")
  return()
endif()

foreach(variant probe probe_broken)
  add_library(tycho_abi_${variant} SHARED ${CMAKE_CURRENT_SOURCE_DIR}/abi/abi_probe.c)
  target_link_libraries(tycho_abi_${variant} PRIVATE tycho::abi)
  target_compile_options(tycho_abi_${variant} PRIVATE -g -Og)
  set_target_properties(tycho_abi_${variant} PROPERTIES C_VISIBILITY_PRESET hidden
    LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/abi-probe)
  add_dependencies(tycho_tests tycho_abi_${variant})
endforeach()
target_compile_definitions(tycho_abi_probe_broken PRIVATE TYCHO_ABI_PROBE_BREAK)

set(TYCHO_ABI_BASELINE ${PROJECT_SOURCE_DIR}/abi/baseline/tycho_abi_probe.abi)
add_test(NAME abi_baseline
  COMMAND ${CMAKE_COMMAND} -DABIDIFF=${TYCHO_ABIDIFF} -DBASELINE=${TYCHO_ABI_BASELINE}
    -DLIBRARY=$<TARGET_FILE:tycho_abi_probe> -DEXPECT=same -P ${CMAKE_CURRENT_SOURCE_DIR}/abi/check_abi.cmake)
add_test(NAME abi_baseline_catches_an_inserted_field
  COMMAND ${CMAKE_COMMAND} -DABIDIFF=${TYCHO_ABIDIFF} -DBASELINE=${TYCHO_ABI_BASELINE}
    -DLIBRARY=$<TARGET_FILE:tycho_abi_probe_broken> -DEXPECT=changed -P ${CMAKE_CURRENT_SOURCE_DIR}/abi/check_abi.cmake)

# libtycho itself: the functions it exports (its symbol table, debug info stripped) against
# abi/baseline/libtycho.abi; the signatures of those functions are the probe's. The check must
# fail on a baseline that lists one function more than the library exports (a removed function).
set(TYCHO_LIBTYCHO_BASELINE ${PROJECT_SOURCE_DIR}/abi/baseline/libtycho.abi)
set(stripped ${CMAKE_BINARY_DIR}/abi-probe/libtycho-stripped.so)
add_test(NAME abi_baseline_libtycho
  COMMAND ${CMAKE_COMMAND} -DABIDIFF=${TYCHO_ABIDIFF} -DOBJCOPY=${CMAKE_OBJCOPY} -DBASELINE=${TYCHO_LIBTYCHO_BASELINE}
    -DLIBRARY=$<TARGET_FILE:tycho_shared> -DSTRIP_TO=${stripped} -DEXPECT=same -P ${CMAKE_CURRENT_SOURCE_DIR}/abi/check_abi.cmake)
file(READ ${TYCHO_LIBTYCHO_BASELINE} libtycho_abi)
string(REPLACE "<elf-function-symbols>"
  "<elf-function-symbols>\n    <elf-symbol name='tycho_removed_by_the_test' type='func-type' binding='global-binding' visibility='default-visibility' is-defined='yes'/>"
  libtycho_abi_removed "${libtycho_abi}")
file(WRITE ${CMAKE_BINARY_DIR}/abi-probe/libtycho-one-function-more.abi "${libtycho_abi_removed}")
add_test(NAME abi_baseline_libtycho_catches_a_removed_function
  COMMAND ${CMAKE_COMMAND} -DABIDIFF=${TYCHO_ABIDIFF} -DOBJCOPY=${CMAKE_OBJCOPY}
    -DBASELINE=${CMAKE_BINARY_DIR}/abi-probe/libtycho-one-function-more.abi -DLIBRARY=$<TARGET_FILE:tycho_shared>
    -DSTRIP_TO=${stripped}.2 -DEXPECT=changed -P ${CMAKE_CURRENT_SOURCE_DIR}/abi/check_abi.cmake)
set_tests_properties(abi_baseline_libtycho_catches_a_removed_function PROPERTIES DEPENDS abi_baseline_libtycho)

# After a deliberate ABI change: rewrites the baselines from the current headers and library.
add_custom_target(tycho_abi_baseline
  COMMAND ${TYCHO_ABIDW} --no-show-locs --no-corpus-path --out-file ${TYCHO_ABI_BASELINE} $<TARGET_FILE:tycho_abi_probe>
  COMMAND ${CMAKE_OBJCOPY} --strip-debug $<TARGET_FILE:tycho_shared> ${stripped}
  COMMAND ${TYCHO_ABIDW} --no-show-locs --no-corpus-path --out-file ${TYCHO_LIBTYCHO_BASELINE} ${stripped}
  DEPENDS tycho_abi_probe tycho_shared
  COMMENT "abidw: refreshing ${TYCHO_ABI_BASELINE} and ${TYCHO_LIBTYCHO_BASELINE}")
