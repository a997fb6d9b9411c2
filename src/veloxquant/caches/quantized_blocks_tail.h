#pragma once
// Helpers shared by the caches that keep "quantized blocks plus an input-dtype tail" (gear,
// kitty, zipcache): rows [0, frontier) live as codes in whole blocks of `group` rows, rows
// [frontier, offset) wait in a [B, H, group, W] tail tensor in the cache's dtype until their block
// is complete. The three caches wrote the tail addressing, the tail half of fetch() and the
// offset / frontier / dtype part of from_state() the same way; one copy here keeps their bytes and
// their error messages identical by construction.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "lm/cache/cache.h"
#include "lm/tensor.h"

namespace veloxquant::blocks_tail {

// Start of head bh's (bh = b * heads + h) rows in a [B, H, group, W] tail tensor.
std::byte* head_rows(lm::Tensor& tail, int64_t bh, int64_t group, int64_t width);
const std::byte* head_rows(const lm::Tensor& tail, int64_t bh, int64_t group, int64_t width);

// fetch(): converts head bh's `rows` tail rows (stored as `tail_dtype`) into rows
// [frontier, frontier + rows) of head bh in `out` [B, H, offset, W], in out's dtype.
void fetch_head_tail(const lm::Tensor& tail, lm::DType tail_dtype, int64_t bh, int64_t group, int64_t width,
                     int64_t rows, int64_t frontier, int64_t offset, lm::Tensor& out);

// store(): head bh's pending rows — its `tail` rows waiting in the tail tensor, then its `s` new
// rows (`new_rows`: the call's rows widened to f32, [B * H, s, width]) — as f32 [tail + s, width].
void gather_pending(const lm::Tensor& tail_rows, lm::DType tail_dtype, int64_t bh, int64_t group, int64_t width,
                    int64_t tail, const float* new_rows, int64_t s, float* out);

// store() of a cache that codes every head's complete blocks in one pass (cachegen, gear,
// vecinfer): the call's keys and values widened to f32, then every head's pending rows — its
// `tail` rows from the tail tensors, then its new rows — head after head into `pending_keys`
// [B * H, tail + s, key_dim] and `pending_values` [B * H, tail + s, value_dim] (resized).
// `heads` is B * H; `group` the tail tensors' row capacity.
struct PendingShape {
  int64_t heads = 0, group = 0, key_dim = 0, value_dim = 0, tail = 0;
  lm::DType tail_dtype{};
};
void gather_all_pending(const PendingShape& shape, const lm::Tensor& tail_keys, const lm::Tensor& tail_values,
                        const lm::Tensor& keys, const lm::Tensor& values, std::vector<float>& pending_keys,
                        std::vector<float>& pending_values);

// store(): the `kept` pending rows left after the complete blocks (f32 at `rows`) back into head
// bh's tail, as `tail_dtype`.
void keep_in_tail(const float* rows, int64_t kept, lm::Tensor& tail_rows, lm::DType tail_dtype, int64_t bh,
                  int64_t group, int64_t width);

// trim() to a frontier inside the coded blocks: rows [frontier, offset) of every head go back to the
// tail, decoded from their codes by decode_rows(keys?, b, h, begin, end, f32 [end - begin, width]),
// stored as `tail_dtype` (the tails are [B, H, group, Dk] and [B, H, group, Dv]). The caller then
// moves its frontier to `frontier` and drops the codes above it.
using DecodeRows = std::function<void(bool keys, int64_t b, int64_t h, int64_t begin, int64_t end, float* out)>;
struct ReopenedRows {
  int64_t batch = 0, heads = 0, key_dim = 0, value_dim = 0, group = 0, frontier = 0, offset = 0;
  lm::DType tail_dtype{};
};
void reopen_into_tail(const ReopenedRows& rows, lm::Tensor& tail_keys, lm::Tensor& tail_values,
                      const DecodeRows& decode_rows);

// trim(n) of such a cache (nsnquant, vecinfer): the offset drops by min(n, offset); when it falls
// below the frontier, the block holding the new offset reopens into the tail (its rows below the
// new offset decoded back by reopen_into_tail) and every block above it is dropped, the frontier
// moving to that block's start. `shape` gives batch, heads, dims, group and tail dtype (its
// frontier and offset are `frontier` and `offset`, which this updates). Returns the rows removed;
// n < 0 throws base::InvalidArgument naming `who`.
int64_t trim_coded_blocks(const char* who, int64_t n, ReopenedRows shape, lm::Tensor& tail_keys,
                          lm::Tensor& tail_values, const DecodeRows& decode_rows, int64_t& frontier, int64_t& offset);

// fetch() of a cache whose keys are coded blocks of `group` rows below `frontier` plus the tail,
// and whose values are every row as stored ([B, H, >= offset, Dv] in `stored` dtype): keys from
// decode_block(b, h, block, f32 [group, Dk]), all in `dtype`.
struct CodedKeysRows {
  int64_t batch = 0, heads = 0, key_dim = 0, value_dim = 0, offset = 0, frontier = 0, group = 0;
  lm::DType stored{};
};
using DecodeKeyBlock = std::function<void(int64_t b, int64_t h, int64_t block, float* out)>;
lm::KeysValues fetch_coded_keys(const CodedKeysRows& rows, const lm::Tensor& tail_keys, const lm::Tensor& values,
                                lm::DType dtype, const DecodeKeyBlock& decode_block);

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
