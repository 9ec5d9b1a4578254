# The GNU Octave / MATLAB bindings (bindings/matlab): the MEX gateway is built with Octave's
# mkoctfile into build/tests/matlab, and Octave.MexTest runs bindings/matlab/tests/
# tycho_octave_test.m: the MoS2 example for 3 iterations equals the tycho command's result bit
# for bit, a bad config raises naming the key, and docs/embedding/matlab.md's examples run.
# Skipped with a message where Octave is missing (Debian: octave liboctave-dev).
find_program(TYCHO_MKOCTFILE mkoctfile)
find_program(TYCHO_OCTAVE octave)
if(TYCHO_MKOCTFILE AND TYCHO_OCTAVE)
  set(tycho_mex_dir ${CMAKE_CURRENT_BINARY_DIR}/matlab)
  set(tycho_mex_src ${PROJECT_SOURCE_DIR}/bindings/matlab/tycho_mex.c)
  add_custom_command(OUTPUT ${tycho_mex_dir}/tycho_mex.mex
    COMMAND ${CMAKE_COMMAND} -E make_directory ${tycho_mex_dir}
    COMMAND ${TYCHO_MKOCTFILE} --mex -Wall -Wextra -I${PROJECT_SOURCE_DIR}/abi
      -L$<TARGET_FILE_DIR:tycho_shared> -ltycho -Wl,-rpath,$<TARGET_FILE_DIR:tycho_shared>
      -o ${tycho_mex_dir}/tycho_mex.mex ${tycho_mex_src}
    WORKING_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR}
    DEPENDS ${tycho_mex_src} tycho_shared
    COMMENT "Building the Octave MEX gateway tycho_mex.mex")
  add_custom_target(tycho_octave_mex ALL DEPENDS ${tycho_mex_dir}/tycho_mex.mex)
  add_test(NAME Octave.MexTest
    COMMAND ${TYCHO_OCTAVE} --no-gui --no-history --norc --quiet --eval
      "addpath('${PROJECT_SOURCE_DIR}/bindings/matlab'); addpath('${PROJECT_SOURCE_DIR}/bindings/matlab/tests'); addpath('${tycho_mex_dir}'); tycho_octave_test('${PROJECT_SOURCE_DIR}', '$<TARGET_FILE:tycho>', '${CMAKE_CURRENT_BINARY_DIR}/octave-out')")
  set_tests_properties(Octave.MexTest PROPERTIES TIMEOUT 600)
else()
  add_test(NAME Octave.MexTest
    COMMAND sh -c "echo 'Octave.MexTest skipped: octave or mkoctfile was not found (Debian: apt-get install octave liboctave-dev, as scripts/install-deps does)'; exit 77")
  set_tests_properties(Octave.MexTest PROPERTIES SKIP_RETURN_CODE 77)
endif()
