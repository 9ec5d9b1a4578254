# The Julia module (bindings/julia) checked mechanically against abi/tycho/tycho.h (Julia is not
# installed here): one @ccall wrapper per function with matching argument count and types,
# Progress/SessionOptions and the DLPack structs laid out as their C structs, the Julia page
# using only what exists;
# --self-test proves the check catches a dropped argument, a wrong type, a missing wrapper.
find_package(Python3 COMPONENTS Interpreter QUIET)
set(julia_check_python ${Python3_EXECUTABLE})
if(NOT julia_check_python)
  set(julia_check_python python3)
endif()
find_path(TYCHO_DLPACK_INCLUDE_DIR dlpack/dlpack.h REQUIRED)
add_test(NAME Julia.WrappersMatchTychoH
  COMMAND ${julia_check_python} ${CMAKE_CURRENT_SOURCE_DIR}/julia_wrapper_check.py
          ${PROJECT_SOURCE_DIR}/abi/tycho/tycho.h ${PROJECT_SOURCE_DIR}/bindings/julia/src/Tycho.jl
          ${PROJECT_SOURCE_DIR}/docs/embedding/julia.md ${TYCHO_DLPACK_INCLUDE_DIR}/dlpack/dlpack.h --self-test)
set_tests_properties(Julia.WrappersMatchTychoH PROPERTIES ENVIRONMENT "PYTHONDONTWRITEBYTECODE=1")
