#include "veloxquant/caches/quantized_blocks_tail.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "base/error.h"
#include "lm/cache/kv_rows.h"
#include "veloxquant/rows/cache_rows.h"

namespace veloxquant::blocks_tail {

std::byte* head_rows(lm::Tensor& tail, int64_t bh, int64_t group, int64_t width) {
  return tail.raw_data() + bh * group * width * static_cast<int64_t>(tail.element_size());
}

const std::byte* head_rows(const lm::Tensor& tail, int64_t bh, int64_t group, int64_t width) {
  return tail.raw_data() + bh * group * width * static_cast<int64_t>(tail.element_size());
}

void fetch_head_tail(const lm::Tensor& tail, lm::DType tail_dtype, int64_t bh, int64_t group, int64_t width,
                     int64_t rows, int64_t frontier, int64_t offset, lm::Tensor& out) {
  std::byte* head_out = out.raw_data() + bh * offset * width * static_cast<int64_t>(out.element_size());
  lm::convert_elements(head_rows(tail, bh, group, width), tail_dtype,
                       head_out + frontier * width * static_cast<int64_t>(out.element_size()), out.dtype(),
                       static_cast<std::size_t>(rows * width));
}

void gather_pending(const lm::Tensor& tail_rows, lm::DType tail_dtype, int64_t bh, int64_t group, int64_t width,
                    int64_t tail, const float* new_rows, int64_t s, float* out) {
  cache_rows::load_f32(head_rows(tail_rows, bh, group, width), tail_dtype, static_cast<std::size_t>(tail * width), out);
  std::memcpy(out + tail * width, new_rows + bh * s * width, sizeof(float) * static_cast<std::size_t>(s * width));
}

void gather_all_pending(const PendingShape& shape, const lm::Tensor& tail_keys, const lm::Tensor& tail_values,
                        const lm::Tensor& keys, const lm::Tensor& values, std::vector<float>& pending_keys,
                        std::vector<float>& pending_values) {
  const int64_t s = keys.dim(2), rows = shape.tail + s;
  // Grow-only per-thread buffers: a decode step that completes a block allocates nothing.
  thread_local std::vector<float> new_keys, new_values;
  cache_rows::widen_to_f32(keys, new_keys);
  cache_rows::widen_to_f32(values, new_values);
  pending_keys.resize(static_cast<std::size_t>(shape.heads * rows * shape.key_dim));
  pending_values.resize(static_cast<std::size_t>(shape.heads * rows * shape.value_dim));
  for (int64_t bh = 0; bh < shape.heads; ++bh) {
    gather_pending(tail_keys, shape.tail_dtype, bh, shape.group, shape.key_dim, shape.tail, new_keys.data(), s,
                   pending_keys.data() + bh * rows * shape.key_dim);
    gather_pending(tail_values, shape.tail_dtype, bh, shape.group, shape.value_dim, shape.tail, new_values.data(), s,
                   pending_values.data() + bh * rows * shape.value_dim);
  }
}

void keep_in_tail(const float* rows, int64_t kept, lm::Tensor& tail_rows, lm::DType tail_dtype, int64_t bh,
                  int64_t group, int64_t width) {
  cache_rows::store_f32(rows, static_cast<std::size_t>(kept * width), head_rows(tail_rows, bh, group, width),
                        tail_dtype);
}

void reopen_into_tail(const ReopenedRows& r, lm::Tensor& tail_keys, lm::Tensor& tail_values,
                      const DecodeRows& decode_rows) {
  const int64_t reopened = r.offset - r.frontier;
  std::vector<float> rows(static_cast<std::size_t>(std::max<int64_t>(reopened, 1) * std::max(r.key_dim, r.value_dim)));
  for (int64_t b = 0; b < r.batch; ++b) {
    for (int64_t h = 0; h < r.heads; ++h) {
      const int64_t bh = b * r.heads + h;
      decode_rows(true, b, h, r.frontier, r.offset, rows.data());
      keep_in_tail(rows.data(), reopened, tail_keys, r.tail_dtype, bh, r.group, r.key_dim);
      decode_rows(false, b, h, r.frontier, r.offset, rows.data());
      keep_in_tail(rows.data(), reopened, tail_values, r.tail_dtype, bh, r.group, r.value_dim);
    }
  }
}

int64_t trim_coded_blocks(const char* who, int64_t n, ReopenedRows shape, lm::Tensor& tail_keys,
                          lm::Tensor& tail_values, const DecodeRows& decode_rows, int64_t& frontier, int64_t& offset) {
  if (n < 0) throw base::InvalidArgument(std::string(who) + "::trim: n must be >= 0, got " + std::to_string(n));
  const int64_t removed = std::min(n, offset);
  const int64_t new_offset = offset - removed;
  const int64_t new_frontier = new_offset / shape.group * shape.group;
  if (new_frontier < frontier) {
    shape.frontier = new_frontier;
    shape.offset = new_offset;
    reopen_into_tail(shape, tail_keys, tail_values, decode_rows);
    frontier = new_frontier;
  }
  offset = new_offset;
  return removed;
}

lm::KeysValues fetch_coded_keys(const CodedKeysRows& r, const lm::Tensor& tail_keys, const lm::Tensor& values,
                                lm::DType dtype, const DecodeKeyBlock& decode_block) {
  lm::Tensor k({r.batch, r.heads, r.offset, r.key_dim}, dtype);
  lm::Tensor v({r.batch, r.heads, r.offset, r.value_dim}, dtype);
  std::vector<float> block(static_cast<std::size_t>(r.group * r.key_dim));
  const int64_t ke = static_cast<int64_t>(k.element_size()), ve = static_cast<int64_t>(values.element_size());
  for (int64_t b = 0; b < r.batch; ++b) {
    for (int64_t h = 0; h < r.heads; ++h) {
      const int64_t bh = b * r.heads + h;
      std::byte* kout = k.raw_data() + bh * r.offset * r.key_dim * ke;
      for (int64_t g = 0; g < r.frontier / r.group; ++g) {
        decode_block(b, h, g, block.data());
        cache_rows::store_f32(block.data(), block.size(), kout + g * r.group * r.key_dim * ke, dtype);
      }
      fetch_head_tail(tail_keys, r.stored, bh, r.group, r.key_dim, r.offset - r.frontier, r.frontier, r.offset, k);
      const std::byte* rv = values.raw_data() + bh * values.dim(2) * r.value_dim * ve;
      lm::convert_elements(rv, r.stored,
                           v.raw_data() + bh * r.offset * r.value_dim * static_cast<int64_t>(v.element_size()), dtype,
                           static_cast<std::size_t>(r.offset * r.value_dim));
    }
  }
  return {std::move(k), std::move(v)};
}

std::string exact_double(double x) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.17g", x);
  return text;
}

double parse_meta_double(const std::string& text, const char* who, const char* what) {
  char* end = nullptr;
  const double x = std::strtod(text.c_str(), &end);
  if (end == text.c_str() || *end != '\0')
    throw base::FormatError(std::string(who) + ": bad " + what + " '" + text + "'");
  return x;
}

TailMeta parse_tail_meta(const std::vector<std::string>& meta, std::size_t first, int64_t group, const char* who) {
  TailMeta m;
  m.offset = cache_rows::parse_meta_int(meta[first], who, "offset");
  m.frontier = cache_rows::parse_meta_int(meta[first + 1], who, "frontier");
  try {
    m.dtype = lm::parse_float_dtype(meta[first + 2]);
  } catch (const base::InvalidArgument& e) {
    throw base::FormatError(std::string(who) + ": " + e.what());
  }
  if (m.frontier < 0 || m.frontier > m.offset || m.frontier % group != 0 || m.offset - m.frontier >= group) {
    throw base::FormatError(std::string(who) + ": inconsistent offset " + meta[first] + " / frontier " +
                            meta[first + 1]);
  }
  return m;
}

void check_tail_state(const lm::Tensor& rk, const lm::Tensor& rv, int64_t rows, const char* who,
                      const std::string& offset_text, const std::string& frontier_text) {
  if (rk.ndim() != 4 || rv.ndim() != 4 || rk.dim(2) != rows || rv.dim(2) != rows) {
    throw base::FormatError(std::string(who) + ": tail rows do not match offset " + offset_text + " / frontier " +
                            frontier_text);
  }
}

}  // namespace veloxquant::blocks_tail
