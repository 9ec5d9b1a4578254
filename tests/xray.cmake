# X-ray ptychography end to end (tests/xray_check.py): a zone-plate scan simulated by
# bench/xray/simulate_xray.py (numpy, h5py) reconstructs against its truth from the model probe
# and from the CXI file's illumination. Skipped (77) without python3-numpy and python3-h5py.
add_test(NAME Xray.SimulatedZonePlateScanReconstructs
  COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/xray_check.py ${PROJECT_SOURCE_DIR} ${PROJECT_BINARY_DIR})
set_tests_properties(Xray.SimulatedZonePlateScanReconstructs PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77)
