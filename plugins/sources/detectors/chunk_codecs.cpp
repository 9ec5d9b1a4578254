#include "chunk_codecs.hpp"

#include <tycho/sdk.hpp>

#include <lz4.h>

#include <cstring>
#include <limits>
#include <vector>

namespace tycho::detectors {

using sdk::fail;

namespace {

uint64_t be64(const unsigned char* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = v << 8 | p[i];
  return v;
}
uint32_t be32(const unsigned char* p) { return uint32_t(p[0]) << 24 | uint32_t(p[1]) << 16 | uint32_t(p[2]) << 8 | p[3]; }

// The 12-byte header shared by both codecs; returns the block size in bytes.
std::size_t read_header(const unsigned char* in, std::size_t in_bytes, std::size_t out_bytes, const char* codec,
                        const std::string& where) {
  if (in_bytes < 12)
    fail(TYCHO_ERR_BAD_DATA, where, ": the ", codec, " chunk is ", in_bytes, " bytes, shorter than its 12-byte header");
  const uint64_t total = be64(in);
  const uint32_t block = be32(in + 8);
  if (total != out_bytes)
    fail(TYCHO_ERR_BAD_DATA, where, ": the ", codec, " chunk's header says it holds ", total, " bytes, expected ",
         out_bytes, " (the chunk's shape times its element size)");
  if (block == 0 || block > (1u << 30))
    fail(TYCHO_ERR_BAD_DATA, where, ": the ", codec, " chunk's block size is ", block, " bytes, expected 1 to 2^30");
  return block;
}

// One LZ4 block of `n` compressed bytes at in[pos] into exactly `want` bytes at `out`.
void lz4_block(const unsigned char* in, std::size_t in_bytes, std::size_t& pos, unsigned char* out, std::size_t want,
               bool stored_if_full, const char* codec, const std::string& where) {
  if (in_bytes - pos < 4)
    fail(TYCHO_ERR_BAD_DATA, where, ": the ", codec, " chunk ends at byte ", in_bytes, " where a block's size was expected");
  const uint32_t n = be32(in + pos);
  pos += 4;
  if (n > in_bytes - pos)
    fail(TYCHO_ERR_BAD_DATA, where, ": a block of the ", codec, " chunk declares ", n, " compressed bytes at byte ", pos,
         ", but the chunk ends ", in_bytes - pos, " bytes later");
  if (stored_if_full && n == want) {
    std::memcpy(out, in + pos, want);
  } else {
    if (n > uint32_t(std::numeric_limits<int>::max()) || want > std::size_t(std::numeric_limits<int>::max()))
      fail(TYCHO_ERR_BAD_DATA, where, ": a block of the ", codec, " chunk is too large for LZ4 (", n, " bytes)");
    const int got = LZ4_decompress_safe(reinterpret_cast<const char*>(in + pos), reinterpret_cast<char*>(out), int(n),
                                        int(want));
    if (got != int(want))
      fail(TYCHO_ERR_BAD_DATA, where, ": a block of the ", codec, " chunk at byte ", pos - 4, " does not decode to ", want,
           " bytes (", got < 0 ? "corrupt LZ4 data" : sdk::cat("it gives ", got), ")");
  }
  pos += n;
}

}  // namespace

std::size_t most_chunk_bytes(std::size_t out_bytes) {
  // LZ4 grows incompressible data by at most n/255 + 16 bytes per block; blocks of at least 8
  // bytes each carry 4 more; the header 12.
  return out_bytes + out_bytes / 255 + out_bytes / 2 + 4096;
}

void bit_unshuffle(const unsigned char* in, unsigned char* out, std::size_t n, std::size_t elem_size) {
  const std::size_t row = n / 8;  // bytes per bit-row
  std::memset(out, 0, n * elem_size);
  for (std::size_t j = 0; j < elem_size; ++j)
    for (std::size_t b = 0; b < 8; ++b) {
      const unsigned char* bits = in + (8 * j + b) * row;
      const unsigned char mask = static_cast<unsigned char>(1u << b);
      for (std::size_t i8 = 0; i8 < row; ++i8) {
        const unsigned byte = bits[i8];
        if (byte == 0) continue;
        unsigned char* e = out + (8 * i8) * elem_size + j;
        for (unsigned k = 0; k < 8; ++k)
          if (byte >> k & 1u) e[k * elem_size] |= mask;
      }
    }
}

void decode_bitshuffle_chunk(const unsigned char* in, std::size_t in_bytes, unsigned char* out, std::size_t out_bytes,
                             std::size_t elem_size, bool lz4, const std::string& where) {
  const char* codec = lz4 ? "bitshuffle/LZ4" : "bitshuffle";
  if (elem_size == 0 || out_bytes % elem_size != 0)
    fail(TYCHO_ERR_BAD_DATA, where, ": ", out_bytes, " bytes are not whole elements of ", elem_size, " bytes");
  const std::size_t block_bytes = read_header(in, in_bytes, out_bytes, codec, where);
  if (block_bytes % (8 * elem_size) != 0)
    fail(TYCHO_ERR_BAD_DATA, where, ": the ", codec, " chunk's block size (", block_bytes,
         " bytes) is not a multiple of 8 elements of ", elem_size, " bytes");
  const std::size_t elements = out_bytes / elem_size, block = block_bytes / elem_size;
  // No block holds more than the chunk: a header's block size is not an allocation size.
  std::vector<unsigned char> shuffled(std::min(block_bytes, out_bytes));
  std::size_t pos = 12, done = 0;
  while (elements - done >= 8) {
    const std::size_t n = std::min(block, (elements - done) / 8 * 8);
    const std::size_t bytes = n * elem_size;
    if (lz4) {
      lz4_block(in, in_bytes, pos, shuffled.data(), bytes, false, codec, where);
    } else {
      if (in_bytes - pos < bytes)
        fail(TYCHO_ERR_BAD_DATA, where, ": the bitshuffle chunk ends at byte ", in_bytes, ", inside a block of ", bytes,
             " bytes starting at ", pos);
      std::memcpy(shuffled.data(), in + pos, bytes);
      pos += bytes;
    }
    bit_unshuffle(shuffled.data(), out + done * elem_size, n, elem_size);
    done += n;
  }
  const std::size_t rest = (elements - done) * elem_size;  // fewer than 8 elements, as they are
  if (in_bytes - pos != rest)
    fail(TYCHO_ERR_BAD_DATA, where, ": the ", codec, " chunk has ", in_bytes - pos, " bytes after its blocks, expected ",
         rest);
  std::memcpy(out + done * elem_size, in + pos, rest);
}

void decode_lz4_chunk(const unsigned char* in, std::size_t in_bytes, unsigned char* out, std::size_t out_bytes,
                      const std::string& where) {
  const std::size_t block_bytes = read_header(in, in_bytes, out_bytes, "LZ4", where);
  std::size_t pos = 12, done = 0;
  while (done < out_bytes) {
    const std::size_t n = std::min(block_bytes, out_bytes - done);
    lz4_block(in, in_bytes, pos, out + done, n, true, "LZ4", where);
    done += n;
  }
  if (pos != in_bytes)
    fail(TYCHO_ERR_BAD_DATA, where, ": the LZ4 chunk has ", in_bytes - pos, " bytes after its blocks");
}

}  // namespace tycho::detectors
