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
#
# tycho_add_cuda_objects(<target> <files.cu...>)
#
# A plugin's CUDA files as an object library, to pass in tycho_add_plugin's LIBRARIES (with
# CUDA::cudart): hidden visibility like the rest of the plugin, the SDK's headers, line
# information for profilers, and none of the host compiler's warning flags (nvcc does not take
# them). Needs the CUDA language enabled (enable_language(CUDA)); finds the CUDA toolkit if the
# project has not. TYCHO_CUDA_PTXAS_VERBOSE=ON prints every kernel's registers and spills.
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

function(tycho_add_cuda_objects target)
  get_property(languages GLOBAL PROPERTY ENABLED_LANGUAGES)
  if(NOT "CUDA" IN_LIST languages)
    message(FATAL_ERROR "tycho_add_cuda_objects(${target}): the CUDA language is not enabled; call "
      "enable_language(CUDA) (or project(... LANGUAGES CXX CUDA)) first")
  endif()
  if(NOT TARGET CUDA::cudart)
    find_package(CUDAToolkit REQUIRED)
  endif()
  add_library(${target} OBJECT ${ARGN})
  target_link_libraries(${target} PRIVATE tycho::sdk CUDA::cudart)
  set_target_properties(${target} PROPERTIES CUDA_VISIBILITY_PRESET hidden POSITION_INDEPENDENT_CODE ON)
  target_compile_options(${target} PRIVATE -lineinfo -Xcompiler=-Wall,-fvisibility-inlines-hidden
    $<$<BOOL:${TYCHO_CUDA_PTXAS_VERBOSE}>:-Xptxas=-v>)
endfunction()
