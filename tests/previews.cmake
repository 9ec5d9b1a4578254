# test_previews.cpp reads the written PNGs back through cairo to measure them.
target_link_libraries(tycho_tests PRIVATE PkgConfig::CAIRO)
