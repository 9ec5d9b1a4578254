# The documentation, run: every command and code block of README.md and docs/*.md
# (tests/docs_commands.py, with the blocks that cannot run in CI listed there with the reason),
# and docs/default-config.toml against the code's defaults. Debian's python3 (numpy, for the
# pages' Python blocks), whatever python3 comes first on PATH.
get_property(docs_plugins GLOBAL PROPERTY TYCHO_PLUGIN_TARGETS)
add_test(NAME Docs.CommandsRunAsWritten
  COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/docs_commands.py ${PROJECT_SOURCE_DIR} ${PROJECT_BINARY_DIR})
add_test(NAME Docs.DefaultConfigIsTheCodesDefaults
  COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/docs_default_config.py ${PROJECT_SOURCE_DIR} ${PROJECT_BINARY_DIR})
set_tests_properties(Docs.CommandsRunAsWritten Docs.DefaultConfigIsTheCodesDefaults PROPERTIES TIMEOUT 1200)
