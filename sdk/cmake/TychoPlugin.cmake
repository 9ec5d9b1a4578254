# tycho_add_plugin(<name> SOURCES <files...> [LIBRARIES <targets...>])
# Builds libtycho_plugin_<name>.so against the SDK only, with hidden visibility so that only
# the entry function `tycho_plugin_entry` is exported, into the plugin folder the host scans.
function(tycho_add_plugin name)
  cmake_parse_arguments(ARG "" "" "SOURCES;LIBRARIES" ${ARGN})
  set(target tycho_plugin_${name})
  add_library(${target} SHARED ${ARG_SOURCES})
  target_link_libraries(${target} PRIVATE tycho::sdk ${ARG_LIBRARIES})
  if(TARGET tycho_warnings)
    target_link_libraries(${target} PRIVATE tycho_warnings)
  endif()
  set_target_properties(${target} PROPERTIES
    CXX_VISIBILITY_PRESET hidden C_VISIBILITY_PRESET hidden VISIBILITY_INLINES_HIDDEN ON
    LIBRARY_OUTPUT_DIRECTORY "${TYCHO_PLUGIN_OUTPUT_DIRECTORY}")
  set_property(GLOBAL APPEND PROPERTY TYCHO_PLUGIN_TARGETS ${target})
  if(COMMAND tycho_install_plugin)
    tycho_install_plugin(${target})
  endif()
endfunction()
