#include "veloxquant/cross_layer/xquant_cache.h"

#include <algorithm>
#include <cstring>

#include "base/error.h"
#include "base/thread_pool.h"
#include "lm/cache/kv_rows.h"
#include "lm/kernels/attention.h"
#include "veloxquant/rows/cache_rows.h"
#include "veloxquant/attention/attention_driver.h"
#include "veloxquant/attention/fused_call.h"
#include "veloxquant/core/bit_packing.h"
#include "veloxquant/cross_layer/token_group_quant.h"
#include "veloxquant/cross_layer/wiring_registry.h"
#include "veloxquant/cross_layer/xquant_rows.h"
#include "veloxquant/errors.h"

namespace veloxquant {

using cache_rows::row_ptr;
using cross_layer::TokenGroupParams;

namespace {

int64_t words_for(int64_t dim, int bits) {
  return static_cast<int64_t>(core::packed_words(static_cast<std::size_t>(dim), bits));
}

// Packs `rows` rows of `dim` codes (one byte each) into rows [0, rows) of head (b, h) of dst.
void pack_code_rows(const uint8_t* codes, int64_t rows, int64_t dim, int bits, lm::Tensor& dst, int64_t b, int64_t h) {
  for (int64_t t = 0; t < rows; ++t) {
    core::pack_words(codes + t * dim, static_cast<std::size_t>(dim), bits, row_ptr<uint32_t>(dst, b, h, t));
  }
}

// The inverse: rows [0, rows) of head (b, h) of src as one byte per code.
void unpack_code_rows(const lm::Tensor& src, int64_t b, int64_t h, int64_t rows, int64_t dim, int bits,
                      uint8_t* codes) {
  for (int64_t t = 0; t < rows; ++t) {
    core::unpack_words(row_ptr<uint32_t>(src, b, h, t), static_cast<std::size_t>(dim), bits, codes + t * dim);
  }
}

// A new [B, H, rows, W] tensor holding rows [0, rows) of the given per-block tensors one after
// the other (state(): the blocks as one contiguous run).
lm::Tensor concat_rows(const std::vector<std::pair<const lm::Tensor*, int64_t>>& parts, int64_t b, int64_t h,
                       int64_t width, lm::DType dtype) {
  int64_t total = 0;
  for (const auto& part : parts) total += part.second;
  lm::Tensor out({b, h, total, width}, dtype);
  const std::size_t row_bytes = static_cast<std::size_t>(width) * out.element_size();
  for (int64_t i = 0; i < b; ++i) {
    for (int64_t j = 0; j < h; ++j) {
      std::byte* dst = out.raw_data() + ((i * h + j) * total) * static_cast<int64_t>(row_bytes);
      for (const auto& [t, rows] : parts) {
        const auto& s = t->strides();
        std::memcpy(dst, t->raw_data() + (i * s[0] + j * s[1]) * static_cast<int64_t>(t->element_size()),
                    row_bytes * static_cast<std::size_t>(rows));
        dst += row_bytes * static_cast<std::size_t>(rows);
      }
    }
  }
  return out;
}

}  // namespace

XQuantCache::XQuantCache(int base_bits, int residual_bits, int group, cross_layer::LayerRole role,
                         std::shared_ptr<XQuantCoordinator> coordinator, uint64_t wiring_id)
    : base_bits_(base_bits),
      residual_bits_(residual_bits),
      group_(group),
      role_(role),
      coordinator_(std::move(coordinator)),
      wiring_id_(wiring_id) {
  if (base_bits < 1 || base_bits > 8) {
    throw QuantizerConfigError("xquant_base_bits must lie in [1, 8], got " + std::to_string(base_bits));
  }
  if (residual_bits < 0 || residual_bits > 8) {
    throw QuantizerConfigError("xquant_residual_bits must lie in [0, 8], got " + std::to_string(residual_bits));
  }
  if (group < 1) throw QuantizerConfigError("xquant_group_quant_size must be >= 1, got " + std::to_string(group));
}

std::size_t XQuantCache::nbytes() const {
  std::size_t total = tail_k_.storage_bytes() + tail_v_.storage_bytes();
  for (const Block& block : blocks_) {
    if (block.owns_codes) total += block.codes->key_codes.storage_bytes() + block.codes->value_codes.storage_bytes();
    total += block.key_params.storage_bytes() + block.value_params.storage_bytes() +
             block.key_residual_codes.storage_bytes() + block.value_residual_codes.storage_bytes() +
             block.key_residual_params.storage_bytes() + block.value_residual_params.storage_bytes();
  }
  return total;
}

int64_t XQuantCache::reused_rows() const {
  int64_t rows = 0;
  for (const Block& block : blocks_) rows += block.owns_codes ? 0 : block.rows;
  return rows;
}

void XQuantCache::allocate(const lm::Tensor& keys, const lm::Tensor& values) {
  batch_ = keys.dim(0);
  heads_ = keys.dim(1);
  dk_ = keys.dim(3);
  dv_ = values.dim(3);
  dtype_ = keys.dtype();
  // The tail holds at most group - 1 rows between calls (the frontier is a multiple of the group).
  tail_k_ = lm::Tensor({batch_, heads_, group_, dk_}, dtype_);
  tail_v_ = lm::Tensor({batch_, heads_, group_, dv_}, dtype_);
  orders_ = std::make_shared<const XQuantCodeOrders>(base_bits_, residual_bits_, dk_, dv_);
}

std::byte* XQuantCache::tail_row0(lm::Tensor& tail, int64_t bh, int64_t width) {
  return tail.raw_data() + bh * group_ * width * static_cast<int64_t>(tail.element_size());
}
const std::byte* XQuantCache::tail_row0(const lm::Tensor& tail, int64_t bh, int64_t width) const {
  return tail.raw_data() + bh * group_ * width * static_cast<int64_t>(tail.element_size());
}

XQuantCache::Block XQuantCache::make_block(const std::vector<float>& pk, const std::vector<float>& pv,
                                           int64_t pending_rows, int64_t rows) {
  Block block;
  block.token_start = frontier_;
  block.rows = rows;
  std::shared_ptr<const XQuantCodes> shared;
  if (!role_.leader && coordinator_) shared = coordinator_->fetch(role_.group_id, frontier_);
  if (shared && (shared->key_codes.shape() != lm::Shape{batch_, heads_, rows, words_for(dk_, base_bits_)} ||
                 shared->value_codes.shape() != lm::Shape{batch_, heads_, rows, words_for(dv_, base_bits_)})) {
    shared = nullptr;  // an anchor of another shape cannot lend its codes: handled as missing
  }
  std::shared_ptr<XQuantCodes> own;
  if (!shared) {
    own = std::make_shared<XQuantCodes>();
    own->key_codes = lm::Tensor({batch_, heads_, rows, words_for(dk_, base_bits_)}, lm::DType::U32);
    own->value_codes = lm::Tensor({batch_, heads_, rows, words_for(dv_, base_bits_)}, lm::DType::U32);
  }
  const int64_t groups = rows / group_;
  block.key_params = lm::Tensor({batch_, heads_, groups, 2 * dk_}, lm::DType::F32);
  block.value_params = lm::Tensor({batch_, heads_, groups, 2 * dv_}, lm::DType::F32);
  if (has_residual()) {
    block.key_residual_codes = lm::Tensor({batch_, heads_, rows, words_for(dk_, residual_bits_)}, lm::DType::U32);
    block.value_residual_codes = lm::Tensor({batch_, heads_, rows, words_for(dv_, residual_bits_)}, lm::DType::U32);
    block.key_residual_params = lm::Tensor({batch_, heads_, groups, 2 * dk_}, lm::DType::F32);
    block.value_residual_params = lm::Tensor({batch_, heads_, groups, 2 * dv_}, lm::DType::F32);
  }
  std::vector<uint8_t> codes(static_cast<std::size_t>(rows * std::max(dk_, dv_)));
  std::vector<float> residual(static_cast<std::size_t>(rows * std::max(dk_, dv_)));
  for (int64_t b = 0; b < batch_; ++b) {
    for (int64_t h = 0; h < heads_; ++h) {
      const int64_t bh = b * heads_ + h;
      for (const bool is_key : {true, false}) {
        const int64_t d = is_key ? dk_ : dv_;
        const float* x = (is_key ? pk : pv).data() + bh * pending_rows * d;
        auto* params = reinterpret_cast<TokenGroupParams*>(
            row_ptr<float>(is_key ? block.key_params : block.value_params, b, h, 0));
        if (own) {
          cross_layer::quantize_token_groups(x, rows, d, group_, base_bits_, codes.data(), params);
          pack_code_rows(codes.data(), rows, d, base_bits_, is_key ? own->key_codes : own->value_codes, b, h);
        } else {
          // Reuse: the anchor's code assignment, this layer's own (scale, min).
          unpack_code_rows(is_key ? shared->key_codes : shared->value_codes, b, h, rows, d, base_bits_, codes.data());
          cross_layer::fit_token_group_params(x, rows, d, group_, base_bits_, params);
        }
        if (!has_residual()) continue;
        cross_layer::dequantize_token_groups(codes.data(), rows, d, group_, params, residual.data());
        for (int64_t i = 0; i < rows * d; ++i) residual[i] = x[i] - residual[i];
        auto* rparams = reinterpret_cast<TokenGroupParams*>(
            row_ptr<float>(is_key ? block.key_residual_params : block.value_residual_params, b, h, 0));
        cross_layer::quantize_token_groups(residual.data(), rows, d, group_, residual_bits_, codes.data(), rparams);
        pack_code_rows(codes.data(), rows, d, residual_bits_,
                       is_key ? block.key_residual_codes : block.value_residual_codes, b, h);
      }
    }
  }
  block.owns_codes = own != nullptr;
  block.codes = own ? std::shared_ptr<const XQuantCodes>(std::move(own)) : std::move(shared);
  if (role_.leader && coordinator_) {
    coordinator_->publish(role_.group_id, frontier_, rows, role_.n_readers, block.codes);
  }
  return block;
}

void XQuantCache::decode_block(const Block& block, int64_t b, int64_t h, bool keys, float* out) const {
  const int64_t d = keys ? dk_ : dv_;
  std::vector<uint8_t> codes(static_cast<std::size_t>(block.rows * d));
  std::vector<float> residual(has_residual() ? codes.size() : 0);
  decode_rows(block, b, h, keys, 0, block.rows, out, codes.data(), residual.data());
}

void XQuantCache::decode_rows(const Block& block, int64_t b, int64_t h, bool keys, int64_t first, int64_t n, float* out,
                              uint8_t* codes, float* residual) const {
  const int64_t d = keys ? dk_ : dv_;
  const lm::Tensor& src = keys ? block.codes->key_codes : block.codes->value_codes;
  for (int64_t t = 0; t < n; ++t) {
    core::unpack_words(row_ptr<uint32_t>(src, b, h, first + t), static_cast<std::size_t>(d), base_bits_, codes + t * d);
  }
  const auto* params =
      reinterpret_cast<const TokenGroupParams*>(row_ptr<float>(keys ? block.key_params : block.value_params, b, h, 0));
  cross_layer::dequantize_token_group_rows(codes, first, n, d, group_, params, out);
  if (!has_residual()) return;
  const lm::Tensor& rsrc = keys ? block.key_residual_codes : block.value_residual_codes;
  for (int64_t t = 0; t < n; ++t) {
    core::unpack_words(row_ptr<uint32_t>(rsrc, b, h, first + t), static_cast<std::size_t>(d), residual_bits_,
                       codes + t * d);
  }
  const auto* rparams = reinterpret_cast<const TokenGroupParams*>(
      row_ptr<float>(keys ? block.key_residual_params : block.value_residual_params, b, h, 0));
  cross_layer::dequantize_token_group_rows(codes, first, n, d, group_, rparams, residual);
  for (int64_t i = 0; i < n * d; ++i) out[i] += residual[i];
}

void XQuantCache::fused_attention(const lm::FusedAttentionRequest& request, lm::Tensor& out) {
  if (!request.queries || !request.keys || !request.values) {
    throw base::InvalidArgument("XQuantCache::fused_attention: queries, keys and values are required");
  }
  const lm::Tensor& q = *request.queries;
  if (q.ndim() == 4 && q.dim(2) > kFusedMaxQueries) {
    // A prefill: attended over the fetched rows, each block decoded once per call (rounded to
    // the cache's dtype, as update_and_fetch returns them). Through the driver every query tile
    // rescores the rows from their codes: a layer's cache-only 4k prefill took 455 ms that way
    // against 410-417 ms fetched (none: 397-414 ms; bench/prefill_instructions xquant 2 4096).
    const lm::AttentionMask mask = make_mask(q.dim(2), request.window);
    const lm::KeysValues kv = update_and_fetch(*request.keys, *request.values);
    lm::kernels::attention(q, kv.keys, kv.values, mask, request.window, request.scale, out,
                           &base::ThreadPool::global());
    return;
  }
  const int64_t first = offset_;
  store(*request.keys, *request.values);
  attention::check_fused_shapes("XQuantCache::fused_attention", q, *request.keys, batch_, heads_, dk_, dv_, out);
  lm::Tensor contiguous_queries;
  const attention::AttentionCall call = attention::call_from_request(request, heads_, first, out, contiguous_queries);
  const XQuantRows rows(*this);
  attention::attend(call, rows, attention::request_pool(request));
}

lm::KeysValues XQuantCache::update_and_fetch(const lm::Tensor& keys, const lm::Tensor& values) {
  store(keys, values);
  return fetch(keys.dtype());
}

void XQuantCache::store(const lm::Tensor& keys, const lm::Tensor& values) {
  lm::check_new_tokens(keys, values, "XQuantCache::update_and_fetch");
  if (!tail_k_.defined()) {
    allocate(keys, values);
  } else {
    cache_rows::check_row_layout(keys, values, {batch_, heads_, dk_, dv_}, "XQuantCache::update_and_fetch");
  }
  const int64_t s = keys.dim(2);
  const int64_t tail = offset_ - frontier_;
  const int64_t pending_rows = tail + s;
  if (pending_rows < group_) {  // no token group completes: the rows wait in the tail as they are
    lm::copy_token_rows(keys, tail_k_, tail);
    lm::copy_token_rows(values, tail_v_, tail);
    offset_ += s;
    return;
  }
  // Pending = the full-precision tail followed by the new rows, f32 (a per-call temporary).
  std::vector<float> pk(static_cast<std::size_t>(batch_ * heads_ * pending_rows * dk_));
  std::vector<float> pv(static_cast<std::size_t>(batch_ * heads_ * pending_rows * dv_));
  const std::vector<float> new_k = keys.contiguous().to_f32();
  const std::vector<float> new_v = values.contiguous().to_f32();
  for (int64_t bh = 0; bh < batch_ * heads_; ++bh) {
    cache_rows::load_f32(tail_row0(tail_k_, bh, dk_), dtype_, static_cast<std::size_t>(tail * dk_),
                         pk.data() + bh * pending_rows * dk_);
    cache_rows::load_f32(tail_row0(tail_v_, bh, dv_), dtype_, static_cast<std::size_t>(tail * dv_),
                         pv.data() + bh * pending_rows * dv_);
    std::memcpy(pk.data() + (bh * pending_rows + tail) * dk_, new_k.data() + bh * s * dk_,
                sizeof(float) * static_cast<std::size_t>(s * dk_));
    std::memcpy(pv.data() + (bh * pending_rows + tail) * dv_, new_v.data() + bh * s * dv_,
                sizeof(float) * static_cast<std::size_t>(s * dv_));
  }
  const int64_t new_offset = offset_ + s;
  const int64_t new_frontier = (new_offset / group_) * group_;
  const int64_t flushed = new_frontier - frontier_;
  if (flushed > 0) blocks_.push_back(make_block(pk, pv, pending_rows, flushed));
  const int64_t kept = pending_rows - flushed;
  for (int64_t bh = 0; bh < batch_ * heads_; ++bh) {
    cache_rows::store_f32(pk.data() + (bh * pending_rows + flushed) * dk_, static_cast<std::size_t>(kept * dk_),
                          tail_row0(tail_k_, bh, dk_), dtype_);
    cache_rows::store_f32(pv.data() + (bh * pending_rows + flushed) * dv_, static_cast<std::size_t>(kept * dv_),
                          tail_row0(tail_v_, bh, dv_), dtype_);
  }
  offset_ = new_offset;
  frontier_ = new_frontier;
}

lm::KeysValues XQuantCache::fetch(lm::DType dtype) const {
  lm::Tensor k({batch_, heads_, offset_, dk_}, dtype);
  lm::Tensor v({batch_, heads_, offset_, dv_}, dtype);
  int64_t widest = 1;
  for (const Block& block : blocks_) widest = std::max(widest, block.rows);
  const int64_t tail = offset_ - frontier_;
  // Heads decode independently (each writes its own rows of k and v).
  base::ThreadPool::global().parallel_for(batch_ * heads_, [&](int64_t begin, int64_t end) {
    std::vector<float> tmp(static_cast<std::size_t>(widest * std::max(dk_, dv_)));
    for (int64_t bh = begin; bh < end; ++bh) {
      const int64_t b = bh / heads_, h = bh % heads_;
      std::byte* kout = k.raw_data() + bh * offset_ * dk_ * static_cast<int64_t>(k.element_size());
      std::byte* vout = v.raw_data() + bh * offset_ * dv_ * static_cast<int64_t>(v.element_size());
      for (const Block& block : blocks_) {
        decode_block(block, b, h, true, tmp.data());
        cache_rows::store_f32(tmp.data(), static_cast<std::size_t>(block.rows * dk_),
                              kout + block.token_start * dk_ * static_cast<int64_t>(k.element_size()), dtype);
        decode_block(block, b, h, false, tmp.data());
        cache_rows::store_f32(tmp.data(), static_cast<std::size_t>(block.rows * dv_),
                              vout + block.token_start * dv_ * static_cast<int64_t>(v.element_size()), dtype);
      }
      lm::convert_elements(tail_row0(tail_k_, bh, dk_), dtype_,
                           kout + frontier_ * dk_ * static_cast<int64_t>(k.element_size()), dtype,
                           static_cast<std::size_t>(tail * dk_));
      lm::convert_elements(tail_row0(tail_v_, bh, dv_), dtype_,
                           vout + frontier_ * dv_ * static_cast<int64_t>(v.element_size()), dtype,
                           static_cast<std::size_t>(tail * dv_));
    }
  });
  return {std::move(k), std::move(v)};
}

int64_t XQuantCache::trim(int64_t n) {
  if (n < 0) throw base::InvalidArgument("XQuantCache::trim: n must be >= 0, got " + std::to_string(n));
  const int64_t removed = std::min(n, offset_);
  if (removed == 0) return 0;
  const int64_t new_offset = offset_ - removed;
  const int64_t new_frontier = (new_offset / group_) * group_;
  if (new_frontier < frontier_) {
    // Rows [new_frontier, new_offset) return to the tail, decoded from their block.
    const int64_t back = new_offset - new_frontier;
    if (back > 0) {
      const Block& block = *std::find_if(blocks_.begin(), blocks_.end(), [&](const Block& blk) {
        return blk.token_start <= new_frontier && new_frontier < blk.token_start + blk.rows;
      });
      std::vector<float> tmp(static_cast<std::size_t>(block.rows * std::max(dk_, dv_)));
      const int64_t first = new_frontier - block.token_start;
      for (int64_t b = 0; b < batch_; ++b) {
        for (int64_t h = 0; h < heads_; ++h) {
          const int64_t bh = b * heads_ + h;
          decode_block(block, b, h, true, tmp.data());
          cache_rows::store_f32(tmp.data() + first * dk_, static_cast<std::size_t>(back * dk_),
                                tail_row0(tail_k_, bh, dk_), dtype_);
          decode_block(block, b, h, false, tmp.data());
          cache_rows::store_f32(tmp.data() + first * dv_, static_cast<std::size_t>(back * dv_),
                                tail_row0(tail_v_, bh, dv_), dtype_);
        }
      }
    }
    // Blocks wholly past the new frontier go; the one it cuts keeps its first rows (its
    // buffers stay as allocated, and counted, until the block is dropped).
    std::erase_if(blocks_, [&](const Block& blk) { return blk.token_start >= new_frontier; });
    if (!blocks_.empty()) {
      Block& last = blocks_.back();
      last.rows = std::min(last.rows, new_frontier - last.token_start);
    }
  } else {
    // Only tail rows go; the first new_offset - frontier tail rows stay as they are.
  }
  offset_ = new_offset;
  frontier_ = new_frontier;
  return removed;
}

// state(): {key_codes, value_codes, key_params, value_params, key_residual_codes,
// value_residual_codes, key_residual_params, value_residual_params, tail_k, tail_v}, the blocks
// laid end to end (a reuse layer writes the anchor codes it reads, so a file holds each layer
// whole); the residual tensors have 0 rows without a residual. Empty before the first update.
std::vector<lm::Tensor> XQuantCache::state() const {
  if (!tail_k_.defined()) return {};
  const auto gather = [&](auto member, int64_t width, lm::DType dtype, bool per_group) {
    std::vector<std::pair<const lm::Tensor*, int64_t>> parts;
    for (const Block& block : blocks_) {
      const lm::Tensor* t = member(block);
      if (t->defined()) parts.push_back({t, per_group ? block.rows / group_ : block.rows});
    }
    return concat_rows(parts, batch_, heads_, width, dtype);
  };
  const int64_t wk = words_for(dk_, base_bits_), wv = words_for(dv_, base_bits_);
  const int64_t rk = words_for(dk_, std::max(residual_bits_, 1)), rv = words_for(dv_, std::max(residual_bits_, 1));
  const int64_t tail = offset_ - frontier_;
  lm::Tensor tk({batch_, heads_, tail, dk_}, dtype_), tv({batch_, heads_, tail, dv_}, dtype_);
  for (int64_t bh = 0; bh < batch_ * heads_; ++bh) {
    std::memcpy(tk.raw_data() + bh * tail * dk_ * static_cast<int64_t>(tk.element_size()), tail_row0(tail_k_, bh, dk_),
                static_cast<std::size_t>(tail * dk_) * tk.element_size());
    std::memcpy(tv.raw_data() + bh * tail * dv_ * static_cast<int64_t>(tv.element_size()), tail_row0(tail_v_, bh, dv_),
                static_cast<std::size_t>(tail * dv_) * tv.element_size());
  }
  return {gather([](const Block& b) { return &b.codes->key_codes; }, wk, lm::DType::U32, false),
          gather([](const Block& b) { return &b.codes->value_codes; }, wv, lm::DType::U32, false),
          gather([](const Block& b) { return &b.key_params; }, 2 * dk_, lm::DType::F32, true),
          gather([](const Block& b) { return &b.value_params; }, 2 * dv_, lm::DType::F32, true),
          gather([](const Block& b) { return &b.key_residual_codes; }, rk, lm::DType::U32, false),
          gather([](const Block& b) { return &b.value_residual_codes; }, rv, lm::DType::U32, false),
          gather([](const Block& b) { return &b.key_residual_params; }, 2 * dk_, lm::DType::F32, true),
          gather([](const Block& b) { return &b.value_residual_params; }, 2 * dv_, lm::DType::F32, true),
          std::move(tk),
          std::move(tv)};
}

std::vector<std::string> XQuantCache::meta_state() const {
  return {role_.leader ? "anchor" : "reuse",
          std::to_string(base_bits_),
          std::to_string(residual_bits_),
          std::to_string(group_),
          std::to_string(offset_),
          std::to_string(frontier_),
          std::to_string(role_.group_id),
          std::to_string(role_.n_readers),
          std::to_string(role_.member),
          std::to_string(wiring_id_),
          std::to_string(coordinator_ ? coordinator_->max_ctx() : 0)};
}

void XQuantCache::from_state(const std::vector<lm::Tensor>& state, const std::vector<std::string>& meta) {
  const char* who = "XQuantCache";
  if (meta.size() != 11 || (meta[0] != "anchor" && meta[0] != "reuse")) {
    throw base::FormatError(
        "XQuantCache::from_state: expected meta {anchor|reuse, base_bits, residual_bits, "
        "group, offset, frontier, group_id, n_readers, member, wiring_id, max_ctx}, got " +
        std::to_string(meta.size()) + " entries");
  }
  const bool leader = meta[0] == "anchor";
  if (coordinator_ && leader != role_.leader) {
    throw base::FormatError(std::string("XQuantCache::from_state: the saved layer is an ") + meta[0] +
                            " but this layer is wired as " + (role_.leader ? "an anchor" : "a reuse layer") +
                            " (saved with another xquant_group_size?)");
  }
  std::shared_ptr<XQuantCoordinator> coordinator = coordinator_;
  cross_layer::LayerRole role = role_;
  uint64_t wiring_id = wiring_id_;
  if (!coordinator) {
    // Loaded alone: take the saved role and rejoin the list's coordinator (wiring_registry.h).
    role = {leader, static_cast<int>(cache_rows::parse_meta_int(meta[6], who, "group_id")),
            static_cast<int>(cache_rows::parse_meta_int(meta[7], who, "n_readers")),
            static_cast<int>(cache_rows::parse_meta_int(meta[8], who, "member"))};
    wiring_id = static_cast<uint64_t>(cache_rows::parse_meta_int(meta[9], who, "wiring_id"));
    const int64_t max_ctx = cache_rows::parse_meta_int(meta[10], who, "max_ctx");
    if (wiring_id != 0) {
      coordinator = cross_layer::rejoin_coordinator<XQuantCoordinator>(
          "xquant", wiring_id, role.group_id, role.member,
          [&] { return std::make_shared<XQuantCoordinator>(max_ctx, "xquant_max_ctx"); });
    }
  }
  XQuantCache restored(static_cast<int>(cache_rows::parse_meta_int(meta[1], who, "base_bits")),
                       static_cast<int>(cache_rows::parse_meta_int(meta[2], who, "residual_bits")),
                       static_cast<int>(cache_rows::parse_meta_int(meta[3], who, "group")), role, coordinator,
                       wiring_id);
  const int64_t offset = cache_rows::parse_meta_int(meta[4], who, "offset");
  const int64_t frontier = cache_rows::parse_meta_int(meta[5], who, "frontier");
  if (state.empty() && offset == 0) {
    *this = std::move(restored);
    return;
  }
  if (state.size() != 10 || state[8].ndim() != 4 || state[9].ndim() != 4) {
    throw base::FormatError("XQuantCache::from_state: expected 10 state tensors, got " + std::to_string(state.size()));
  }
  const int64_t g = restored.group_;
  if (frontier % g != 0 || frontier > offset || offset - frontier >= g) {
    throw base::FormatError("XQuantCache::from_state: offset " + std::to_string(offset) + " / frontier " +
                            std::to_string(frontier) + " do not fit group " + std::to_string(g));
  }
  // Every tensor's shape follows from (B, H, D) of the tail, the frontier and the bit widths.
  const int64_t b = state[8].dim(0), h = state[8].dim(1), dk = state[8].dim(3), dv = state[9].dim(3);
  const int rbits = std::max(restored.residual_bits_, 1);
  const int64_t rrows = restored.has_residual() ? frontier : 0;
  const std::vector<std::pair<lm::Shape, lm::DType>> expected = {
      {{b, h, frontier, words_for(dk, restored.base_bits_)}, lm::DType::U32},
      {{b, h, frontier, words_for(dv, restored.base_bits_)}, lm::DType::U32},
      {{b, h, frontier / g, 2 * dk}, lm::DType::F32},
      {{b, h, frontier / g, 2 * dv}, lm::DType::F32},
      {{b, h, rrows, words_for(dk, rbits)}, lm::DType::U32},
      {{b, h, rrows, words_for(dv, rbits)}, lm::DType::U32},
      {{b, h, rrows / g, 2 * dk}, lm::DType::F32},
      {{b, h, rrows / g, 2 * dv}, lm::DType::F32},
      {{b, h, offset - frontier, dk}, state[8].dtype()},
      {{b, h, offset - frontier, dv}, state[8].dtype()}};
  for (std::size_t i = 0; i < expected.size(); ++i) {
    if (state[i].shape() != expected[i].first || state[i].dtype() != expected[i].second) {
      throw base::FormatError("XQuantCache::from_state: state tensor " + std::to_string(i) + " is " +
                              lm::shape_text(state[i].shape()) + ", expected " + lm::shape_text(expected[i].first) +
                              " (offset " + std::to_string(offset) + ", frontier " + std::to_string(frontier) + ")");
    }
  }
  restored.allocate(state[8], state[9]);
  restored.offset_ = offset;
  restored.frontier_ = frontier;
  const lm::Tensor saved_k = state[8].contiguous(), saved_v = state[9].contiguous();
  const int64_t tail = offset - frontier;
  for (int64_t bh = 0; bh < restored.batch_ * restored.heads_; ++bh) {
    std::memcpy(restored.tail_row0(restored.tail_k_, bh, dk),
                saved_k.raw_data() + bh * tail * dk * static_cast<int64_t>(saved_k.element_size()),
                static_cast<std::size_t>(tail * dk) * saved_k.element_size());
    std::memcpy(restored.tail_row0(restored.tail_v_, bh, dv),
                saved_v.raw_data() + bh * tail * dv * static_cast<int64_t>(saved_v.element_size()),
                static_cast<std::size_t>(tail * dv) * saved_v.element_size());
  }
  if (frontier > 0) {
    Block block;
    auto codes = std::make_shared<XQuantCodes>();
    codes->key_codes = state[0].clone();
    codes->value_codes = state[1].clone();
    block.codes = std::move(codes);
    block.owns_codes = true;  // restored on its own: nothing is shared with the anchor any more
    block.rows = frontier;
    block.key_params = state[2].clone();
    block.value_params = state[3].clone();
    if (restored.has_residual()) {
      block.key_residual_codes = state[4].clone();
      block.value_residual_codes = state[5].clone();
      block.key_residual_params = state[6].clone();
      block.value_residual_params = state[7].clone();
    }
    restored.blocks_.push_back(std::move(block));
  }
  *this = std::move(restored);
}

std::shared_ptr<lm::KVCache> XQuantCache::clone() const {
  auto copy = std::make_shared<XQuantCache>(base_bits_, residual_bits_, group_, role_, coordinator_, wiring_id_);
  copy->batch_ = batch_;
  copy->heads_ = heads_;
  copy->dk_ = dk_;
  copy->dv_ = dv_;
  copy->dtype_ = dtype_;
  copy->offset_ = offset_;
  copy->frontier_ = frontier_;
  copy->orders_ = orders_;
  if (tail_k_.defined()) {
    copy->tail_k_ = tail_k_.clone();
    copy->tail_v_ = tail_v_.clone();
  }
  const auto deep = [](const lm::Tensor& t) { return t.defined() ? t.clone() : lm::Tensor(); };
  for (const Block& block : blocks_) {
    Block b = block;
    if (block.owns_codes) {
      auto codes = std::make_shared<XQuantCodes>();
      codes->key_codes = block.codes->key_codes.clone();
      codes->value_codes = block.codes->value_codes.clone();
      b.codes = std::move(codes);
    }
    b.key_params = deep(block.key_params);
    b.value_params = deep(block.value_params);
    b.key_residual_codes = deep(block.key_residual_codes);
    b.value_residual_codes = deep(block.value_residual_codes);
    b.key_residual_params = deep(block.key_residual_params);
    b.value_residual_params = deep(block.value_residual_params);
    copy->blocks_.push_back(std::move(b));
  }
  return copy;
}

std::shared_ptr<lm::KVCache> make_xquant_cache(const KVCacheConfig& config) {
  const XQuantOptions& o = config.xquant;
  return std::make_shared<XQuantCache>(o.xquant_base_bits, o.xquant_residual_bits, o.xquant_group_quant_size);
}

}  // namespace veloxquant
