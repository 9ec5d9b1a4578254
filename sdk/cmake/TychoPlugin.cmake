# tycho_add_plugin(<name> SOURCES <files...> [LIBRARIES <targets...>] [NO_INSTALL])
#
# Builds libtycho_plugin_<name>.so against the SDK only (tycho::sdk: the C ABI headers and the
# C++ helpers; a plugin never links libtycho), with hidden visibility so that only the entry
# function `tycho_plugin_entry` is exported and each library keeps its own host pointer.
#
# The same function serves the built-in plugins (in the tycho source tree) and third-party
# plugins (after `find_package(tycho)` against an installed tycho):
# - output: TYCHO_PLUGIN_OUTPUT_DIRECTORY when set (the tycho build tree's lib/tycho/plugins),
#   else the project's build folder, which `TYCHO_PLUGIN_PATH` can name;
# - install: into TYCHO_PLUGIN_INSTALL_DIR (default <libdir>/tycho/plugins, relative to the
#   installing project's prefix): installed into tycho's own prefix, the plugin sits beside the
#   built-ins, where the installed tycho finds it without any environment variable.
#   NO_INSTALL leaves the install rule out.
include_guard(GLOBAL)
include(GNUInstallDirs)

set(TYCHO_PLUGIN_INSTALL_DIR "${CMAKE_INSTALL_LIBDIR}/tycho/plugins" CACHE STRING
  "Where tycho_add_plugin() installs plugins, relative to CMAKE_INSTALL_PREFIX (or absolute)")

function(tycho_add_plugin name)
  cmake_parse_arguments(ARG "NO_INSTALL" "" "SOURCES;LIBRARIES" ${ARGN})
  if(NOT ARG_SOURCES)
    message(FATAL_ERROR "tycho_add_plugin(${name}): no SOURCES given")
  endif()
  if(ARG_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "tycho_add_plugin(${name}): unknown arguments ${ARG_UNPARSED_ARGUMENTS} "
      "(expected SOURCES <files...> [LIBRARIES <targets...>] [NO_INSTALL])")
  endif()
  if(NOT TARGET tycho::sdk)
    message(FATAL_ERROR "tycho_add_plugin(${name}): the target tycho::sdk is missing; call "
      "find_package(tycho) first")
  endif()
  set(target tycho_plugin_${name})
  add_library(${target} SHARED ${ARG_SOURCES})
  target_link_libraries(${target} PRIVATE tycho::sdk ${ARG_LIBRARIES})
  if(TARGET tycho_warnings)  # the tycho source tree's warning flags
    target_link_libraries(${target} PRIVATE tycho_warnings)
  endif()
  set_target_properties(${target} PROPERTIES
    CXX_VISIBILITY_PRESET hidden C_VISIBILITY_PRESET hidden VISIBILITY_INLINES_HIDDEN ON)
  if(TYCHO_PLUGIN_OUTPUT_DIRECTORY)
    set_target_properties(${target} PROPERTIES LIBRARY_OUTPUT_DIRECTORY "${TYCHO_PLUGIN_OUTPUT_DIRECTORY}")
  endif()
  set_property(GLOBAL APPEND PROPERTY TYCHO_PLUGIN_TARGETS ${target})
  if(NOT ARG_NO_INSTALL)
    install(TARGETS ${target} LIBRARY DESTINATION "${TYCHO_PLUGIN_INSTALL_DIR}")
  endif()
endfunction()
