# The Python package (python/) under pytest, against this build's libtycho and tycho command; its
# offline install with pip; the wheel of pyproject.toml; the first-contact notebook. Needs a
# python3 with numpy, pytest and tomli-w (Debian: python3-numpy python3-pytest python3-tomli-w,
# in scripts/install-deps); TYCHO_TEST_PYTHON picks one, else the first of find_package(Python3)'s
# and /usr/bin/python3 that has them.
set(TYCHO_TEST_PYTHON "" CACHE FILEPATH "python3 for the Python package's tests (default: found)")
set(tycho_test_python "${TYCHO_TEST_PYTHON}")
if(NOT tycho_test_python)
  find_package(Python3 COMPONENTS Interpreter QUIET)
  foreach(candidate ${Python3_EXECUTABLE} /usr/bin/python3)
    execute_process(COMMAND ${candidate} -c "import numpy, pytest, tomli_w"
                    RESULT_VARIABLE python_ok OUTPUT_QUIET ERROR_QUIET)
    if(python_ok EQUAL 0)
      set(tycho_test_python ${candidate})
      break()
    endif()
  endforeach()
endif()

set(python_test_env
  "PYTHONPATH=${PROJECT_SOURCE_DIR}/python"
  "PYTHONDONTWRITEBYTECODE=1"
  "TYCHO_LIBRARY=$<TARGET_FILE:tycho_shared>"
  "TYCHO_CLI=$<TARGET_FILE:tycho>"
  "TYCHO_EXAMPLES=${PROJECT_SOURCE_DIR}/examples"
  "TYCHO_LOG_LEVEL=warning")
if(tycho_test_python)
  add_test(NAME Python.Package
    COMMAND ${tycho_test_python} -m pytest -q -p no:cacheprovider ${PROJECT_SOURCE_DIR}/python/tests
    WORKING_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR})
  set_tests_properties(Python.Package PROPERTIES ENVIRONMENT "${python_test_env}" TIMEOUT 900)
  # pip install --no-build-isolation ./python, offline, into a folder; then `import tycho` from
  # there finds libtycho without TYCHO_LIBRARY.
  add_test(NAME Python.PipInstallOffline
    COMMAND ${tycho_test_python} ${CMAKE_CURRENT_SOURCE_DIR}/python_pip_install_check.py
            ${PROJECT_SOURCE_DIR}/python ${CMAKE_CURRENT_BINARY_DIR}/pip-target $<TARGET_FILE:tycho_shared>)
  set_tests_properties(Python.PipInstallOffline PROPERTIES ENVIRONMENT "PYTHONDONTWRITEBYTECODE=1;TYCHO_LOG_LEVEL=warning")
  # pip wheel . (pyproject.toml, scikit-build-core from PyPI) from this build, installed into a
  # fresh venv and run with the checkout hidden; skipped (77) when PyPI cannot be reached.
  add_test(NAME Python.Wheel
    COMMAND ${tycho_test_python} ${CMAKE_CURRENT_SOURCE_DIR}/python_wheel_check.py
            ${PROJECT_SOURCE_DIR} ${CMAKE_BINARY_DIR})
  set_tests_properties(Python.Wheel PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 900
    ENVIRONMENT "PYTHONDONTWRITEBYTECODE=1" DEPENDS Python.Package)
  # The first-contact notebook, headless (nbclient, ipykernel, matplotlib: Debian's, in
  # scripts/install-deps), and a kernel's interrupts.
  execute_process(COMMAND ${tycho_test_python} -c "import nbclient, nbformat, ipykernel, matplotlib, jupyter_client"
                  RESULT_VARIABLE notebook_ok OUTPUT_QUIET ERROR_QUIET)
  if(notebook_ok EQUAL 0)
    add_test(NAME Python.Notebook
      COMMAND ${tycho_test_python} ${CMAKE_CURRENT_SOURCE_DIR}/python_notebook_check.py
              ${PROJECT_SOURCE_DIR}/examples/mos2.ipynb $<TARGET_FILE:tycho> ${CMAKE_CURRENT_BINARY_DIR}/notebook)
    set_tests_properties(Python.Notebook PROPERTIES ENVIRONMENT "${python_test_env}" TIMEOUT 900)
  else()
    add_test(NAME Python.Notebook COMMAND ${CMAKE_COMMAND} -E echo
      "${tycho_test_python} lacks nbclient, nbformat, ipykernel or matplotlib: run scripts/install-deps")
    set_tests_properties(Python.Notebook PROPERTIES WILL_FAIL ON)
  endif()
else()
  add_test(NAME Python.Package COMMAND ${CMAKE_COMMAND} -E echo
    "no python3 with numpy, pytest and tomli-w: run scripts/install-deps, or set TYCHO_TEST_PYTHON")
  set_tests_properties(Python.Package PROPERTIES WILL_FAIL ON)
endif()
