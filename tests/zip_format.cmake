# test_zip_format.cpp writes hand-made archives (malformed or unusual .npy members that the
# plugin's save never produces) and inspects saved members with libzip directly.
target_link_libraries(tycho_tests PRIVATE PkgConfig::LIBZIP)
