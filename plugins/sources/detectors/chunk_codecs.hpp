// The HDF5 chunk codecs EIGER / ARINA detectors write, decoded here from the raw chunk bytes
// (H5Dread_chunk) instead of through libhdf5's filter plugins: the plugins Debian ships
// (bitshuffle 0.3.5, hdf5-filter-plugin) decompress with LZ4_decompress_fast, which trusts the
// stream and may read past a crafted chunk; LZ4_decompress_safe bounds every read and write.
//
//   filter 32008 (bitshuffle, cd_values[4] = 2: + LZ4, 0: none)
//     u64 BE total bytes | u32 BE block bytes | per block: u32 BE compressed bytes + LZ4 block
//     (none: the block itself). Each block holds block_bytes / elem elements bit-transposed: bit
//     b of byte j of element i is bit i % 8 of byte i / 8 of bit-row 8 j + b. A last block of
//     fewer elements holds a multiple of 8 of them; the < 8 left over follow unshuffled.
//   filter 32004 (LZ4)
//     u64 BE total bytes | u32 BE block bytes | per block: u32 BE compressed bytes + LZ4 block,
//     stored as is when its compressed size equals its size.
//
// Pure functions, no state (thread-safe). A chunk that does not decode to exactly `out_bytes`
// is refused (TYCHO_ERR_BAD_DATA) naming `where` (the file, dataset and chunk) and the reason.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace tycho::detectors {

constexpr unsigned k_filter_bitshuffle = 32008;
constexpr unsigned k_filter_lz4 = 32004;

// Decodes a bitshuffle chunk (`lz4`: LZ4-compressed blocks) of `in_bytes` into `out`, which
// receives exactly `out_bytes` (elements of `elem_size` bytes).
void decode_bitshuffle_chunk(const unsigned char* in, std::size_t in_bytes, unsigned char* out, std::size_t out_bytes,
                             std::size_t elem_size, bool lz4, const std::string& where);

// Decodes an HDF5 LZ4 filter chunk into exactly `out_bytes`.
void decode_lz4_chunk(const unsigned char* in, std::size_t in_bytes, unsigned char* out, std::size_t out_bytes,
                      const std::string& where);

// The bitshuffle transform of `n` elements (n a multiple of 8) of `elem_size` bytes, inverted:
// bit-rows `in` to elements `out` (both n * elem_size bytes). Exposed for the tests.
void bit_unshuffle(const unsigned char* in, unsigned char* out, std::size_t n, std::size_t elem_size);

// The largest compressed chunk a decoder accepts for `out_bytes` of data: LZ4's worst case
// plus the headers. A chunk index that claims more is corrupt.
std::size_t most_chunk_bytes(std::size_t out_bytes);

}  // namespace tycho::detectors
