# tests/test_emd_source.cpp writes small HDF5 files (3-D arrays, odd calibrations) to test the
# emd source's errors and unit handling.
if(TARGET hdf5::hdf5)
  target_link_libraries(tycho_tests PRIVATE hdf5::hdf5)
else()
  target_link_libraries(tycho_tests PRIVATE ${HDF5_C_LIBRARIES})
  target_include_directories(tycho_tests SYSTEM PRIVATE ${HDF5_C_INCLUDE_DIRS})
endif()
# tests/test_hdf5_guard.cpp calls the SDK's HDF5 guard directly.
target_link_libraries(tycho_tests PRIVATE tycho::sdk_hdf5)
