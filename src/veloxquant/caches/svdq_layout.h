#pragma once
// How svdq (caches/svdq_cache.h) lays out one key row: the D latent channels (sorted by singular
// value, most significant first) fall into 8 equal groups, channel c into group floor(8c / D), and
// group g gets svdq_bit_schedule[g] bits (0 drops the group). The coded channels — those with a
// width — keep their latent order; a row is their codes packed densely group by group
// (core/bit_packing.h's dense layout: group g's n_g codes in dense_bytes(n_g, b_g) bytes), so the
// default schedule (8, 4, 2, 1, 1, 0, 0, 0) at D = 64 stores 40 channels in 8 + 4 + 2 + 1 + 1 =
// 16 bytes.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace veloxquant {

// "8,4,2,1,1,0,0,0" -> 8 widths in [0, 8]; throws QuantizerConfigError naming svdq_bit_schedule.
std::vector<int> parse_svdq_schedule(const std::string& text);

struct SvdqGroup {
  int64_t first = 0;     // first coded channel of the group (index into the coded order)
  int64_t channels = 0;  // its coded channels
  int bits = 0;
  int64_t byte_offset = 0;  // where its codes start in a row
};

struct SvdqLayout {
  int64_t dim = 0;
  int64_t coded = 0;               // channels with a width
  std::vector<int64_t> latent_of;  // coded channel i -> its latent channel
  std::vector<SvdqGroup> groups;   // the groups with a width, in latent order
  int64_t row_bytes = 0;
};

SvdqLayout make_svdq_layout(int64_t dim, const std::vector<int>& schedule);

// One row's codes (coded order, one byte each) into its packed bytes, and back.
void pack_svdq_row(const SvdqLayout& layout, const uint8_t* codes, uint8_t* row);
void unpack_svdq_row(const SvdqLayout& layout, const uint8_t* row, uint8_t* codes);

}  // namespace veloxquant
