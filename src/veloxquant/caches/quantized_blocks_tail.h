#pragma once
// Helpers shared by the caches that keep "quantized blocks plus an input-dtype tail" (gear,
// kitty, zipcache): rows [0, frontier) live as codes in whole blocks of `group` rows, rows
// [frontier, offset) wait in a [B, H, group, W] tail tensor in the cache's dtype until their block
// is complete. The three caches wrote the tail addressing, the tail half of fetch() and the
// offset / frontier / dtype part of from_state() the same way; one copy here keeps their bytes and
// their error messages identical by construction.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "lm/tensor.h"

namespace veloxquant::blocks_tail {

// Start of head bh's (bh = b * heads + h) rows in a [B, H, group, W] tail tensor.
std::byte* head_rows(lm::Tensor& tail, int64_t bh, int64_t group, int64_t width);
const std::byte* head_rows(const lm::Tensor& tail, int64_t bh, int64_t group, int64_t width);

// fetch(): converts head bh's `rows` tail rows (stored as `tail_dtype`) into rows
// [frontier, frontier + rows) of head bh in `out` [B, H, offset, W], in out's dtype.
void fetch_head_tail(const lm::Tensor& tail, lm::DType tail_dtype, int64_t bh, int64_t group, int64_t width,
                     int64_t rows, int64_t frontier, int64_t offset, lm::Tensor& out);

// A double as meta_state text that parses back to the same bits ("%.17g").
std::string exact_double(double x);

// Parses a double from a meta_state string; throws base::FormatError "<who>: bad <what> '<text>'".
double parse_meta_double(const std::string& text, const char* who, const char* what);

// The offset, frontier and dtype every such cache writes last in meta_state.
struct TailMeta {
  int64_t offset = 0;
  int64_t frontier = 0;
  lm::DType dtype{};
};

// Parses meta[first], meta[first + 1], meta[first + 2] as offset, frontier and dtype and checks
// that the frontier is a block boundary at most `group` - 1 rows below the offset; throws
// base::FormatError naming `who` otherwise.
TailMeta parse_tail_meta(const std::vector<std::string>& meta, std::size_t first, int64_t group, const char* who);

// Checks the saved key / value tails [B, H, offset - frontier, W]; throws base::FormatError
// "<who>: tail rows do not match offset <offset_text> / frontier <frontier_text>" otherwise.
void check_tail_state(const lm::Tensor& rk, const lm::Tensor& rv, int64_t rows, const char* who,
                      const std::string& offset_text, const std::string& frontier_text);

}  // namespace veloxquant::blocks_tail
