# tests/test_arina_source.cpp encodes bitshuffle/LZ4 and LZ4 chunks itself (LZ4_compress_default).
target_link_libraries(tycho_tests PRIVATE PkgConfig::LZ4)
