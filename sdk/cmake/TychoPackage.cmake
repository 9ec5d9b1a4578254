# The installed CMake package and pkg-config file (included once by the top-level
# CMakeLists.txt after every target exists; not installed itself). `cmake --install build
# --prefix P` then lays out:
#   P/bin/tycho                               the command
#   P/lib/libtycho.so*                        the embedding C API
#   P/lib/tycho/plugins/libtycho_plugin_*.so  the built-in plugins (found from bin/ and lib/)
#   P/include/tycho/*.h, tycho/sdk.hpp, tycho/sdk/*.hpp   the ABI and the SDK
#   P/lib/libtycho_sdk_hdf5.a                 the SDK's HDF5 helpers (tycho::sdk_hdf5)
#   P/lib/libtycho_memory_models.a, libtycho_constraint_kernels.a, P/include/tycho/core/{memory_plan,
#     fft_size,multislice,accuracy,error}.hpp  what the built-in engines and constraints link
#     from core (tycho::memory_models, tycho::constraint_kernels), so a third party has them too
#   P/lib/cmake/tycho/                        tychoConfig.cmake, version, targets, TychoPlugin.cmake
#   P/lib/pkgconfig/tycho.pc
include(CMakePackageConfigHelpers)
set(TYCHO_CMAKE_INSTALL_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/tycho)

set_target_properties(tycho_abi PROPERTIES EXPORT_NAME abi)
set_target_properties(tycho_sdk PROPERTIES EXPORT_NAME sdk)
set_target_properties(tycho_sdk_hdf5 PROPERTIES EXPORT_NAME sdk_hdf5)
set_target_properties(tycho_memory_models PROPERTIES EXPORT_NAME memory_models)
set_target_properties(tycho_constraint_kernels PROPERTIES EXPORT_NAME constraint_kernels)
set_target_properties(tycho_shared PROPERTIES EXPORT_NAME tycho)
set_target_properties(tycho PROPERTIES EXPORT_NAME cli)
install(TARGETS tycho_abi tycho_sdk EXPORT tychoTargets)
install(TARGETS tycho_sdk_hdf5 EXPORT tychoTargets ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(TARGETS tycho_memory_models tycho_constraint_kernels EXPORT tychoTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(FILES
  ${PROJECT_SOURCE_DIR}/core/include/tycho/core/memory_plan.hpp ${PROJECT_SOURCE_DIR}/core/include/tycho/core/fft_size.hpp
  ${PROJECT_SOURCE_DIR}/core/include/tycho/core/multislice.hpp ${PROJECT_SOURCE_DIR}/core/include/tycho/core/accuracy.hpp
  ${PROJECT_SOURCE_DIR}/core/include/tycho/core/error.hpp
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/tycho/core)
install(TARGETS tycho_shared EXPORT tychoTargets LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(TARGETS tycho EXPORT tychoTargets RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(EXPORT tychoTargets NAMESPACE tycho:: DESTINATION ${TYCHO_CMAKE_INSTALL_DIR})

configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/tychoConfig.cmake.in
  ${CMAKE_BINARY_DIR}/package/tychoConfig.cmake
  INSTALL_DESTINATION ${TYCHO_CMAKE_INSTALL_DIR}
  PATH_VARS CMAKE_INSTALL_INCLUDEDIR TYCHO_PLUGIN_INSTALL_DIR)
# 0.y.z: a minor release may change the SDK, so only the same minor version is compatible (the
# plugin ABI has its own major/minor, checked when a plugin is loaded).
write_basic_package_version_file(${CMAKE_BINARY_DIR}/package/tychoConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_BINARY_DIR}/package/tychoConfig.cmake
  ${CMAKE_BINARY_DIR}/package/tychoConfigVersion.cmake
  ${CMAKE_CURRENT_LIST_DIR}/TychoPlugin.cmake
  DESTINATION ${TYCHO_CMAKE_INSTALL_DIR})

file(RELATIVE_PATH TYCHO_PC_PREFIX_FROM_PCDIR
  ${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_LIBDIR}/pkgconfig ${CMAKE_INSTALL_PREFIX})
string(REGEX REPLACE "/$" "" TYCHO_PC_PREFIX_FROM_PCDIR "${TYCHO_PC_PREFIX_FROM_PCDIR}")
configure_file(${CMAKE_CURRENT_LIST_DIR}/tycho.pc.in ${CMAKE_BINARY_DIR}/package/tycho.pc @ONLY)
install(FILES ${CMAKE_BINARY_DIR}/package/tycho.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
