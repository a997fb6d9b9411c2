#include "veloxquant/caches/gear_block_set.h"

#include <cstring>
#include <string>

#include "base/error.h"
#include "lm/cache/kv_rows.h"
#include "veloxquant/core/bit_packing.h"
#include "veloxquant/core/group_quant.h"
#include "veloxquant/rows/cache_rows.h"
#include "veloxquant/rows/group_affine_codes.h"

namespace veloxquant {

using cache_rows::row_ptr;

namespace {
// Row `row` of head (b, h) of a contiguous [B, H, cap, W] tensor, as bytes (strides count elements).
std::byte* row_bytes(lm::Tensor& t, int64_t b, int64_t h, int64_t row) {
  const auto& s = t.strides();
  return t.raw_data() + (b * s[0] + h * s[1] + row * s[2]) * static_cast<int64_t>(t.element_size());
}
const std::byte* row_bytes(const lm::Tensor& t, int64_t b, int64_t h, int64_t row) {
  const auto& s = t.strides();
  return t.raw_data() + (b * s[0] + h * s[1] + row * s[2]) * static_cast<int64_t>(t.element_size());
}
}  // namespace

void GearBlockSet::allocate(int64_t batch, int64_t heads, int64_t dk, int64_t dv) {
  batch_ = batch;
  heads_ = heads;
  dk_ = dk;
  dv_ = dv;
  const int64_t gv = static_cast<int64_t>(token_groups(static_cast<int>(dv_), group_));
  key_codes_ = lm::Tensor({batch_, heads_, 0, static_cast<int64_t>(core::packed_words(dk_, bits_))}, lm::DType::U32);
  key_params_ = lm::Tensor({batch_, heads_, 0, 2 * dk_}, lm::DType::F16);
  value_codes_ = lm::Tensor({batch_, heads_, 0, static_cast<int64_t>(core::packed_words(dv_, bits_))}, lm::DType::U32);
  value_params_ = lm::Tensor({batch_, heads_, 0, 2 * gv}, lm::DType::F16);
  outliers_ = SparseOutliers(outliers_.fraction());
  outliers_.allocate(batch_, heads_, group_, dk_, dv_);
  key_order_ = std::make_shared<const attention::CodeOrder>(bits_, dk_);
  value_order_ = std::make_shared<const attention::CodeOrder>(bits_, dv_, group_);
  auto position = std::make_shared<std::vector<int32_t>>(static_cast<std::size_t>(dk_));
  for (int64_t e = 0; e < dk_; ++e)
    (*position)[static_cast<std::size_t>(key_order_->natural(e))] = static_cast<int32_t>(e);
  key_position_ = std::move(position);
  blocks_ = capacity_ = 0;
}

void GearBlockSet::reserve(int64_t blocks) {
  if (blocks <= capacity_) return;
  // Whole 256-token steps, rounded up to whole blocks (as KIVI grows its quantized region).
  const int64_t have = capacity_ * group_, need = blocks * group_;
  const int64_t tokens = have + ((need - have + kGrowthStep - 1) / kGrowthStep) * kGrowthStep;
  const int64_t grown = (tokens + group_ - 1) / group_;
  key_codes_ = cache_rows::copy_rows(key_codes_, blocks_ * group_, grown * group_);
  key_params_ = cache_rows::copy_rows(key_params_, blocks_, grown);
  value_codes_ = cache_rows::copy_rows(value_codes_, blocks_ * group_, grown * group_);
  value_params_ = cache_rows::copy_rows(value_params_, blocks_ * group_, grown * group_);
  outliers_.reserve(blocks_, grown);
  capacity_ = grown;
}

void GearBlockSet::isolate(int which, const float* src, Isolated& out) const {
  const int64_t d = which == 0 ? dk_ : dv_, n = group_ * d;
  const int64_t k_out = outliers_.enabled() ? outliers_.per_block(which == 0) : 0;
  out.x.assign(src, src + n);
  out.index.resize(static_cast<std::size_t>(k_out));
  out.exact.resize(static_cast<std::size_t>(k_out));
  // S: the block's outliers leave the data the quantizer sees (replaced by their group's median).
  if (k_out > 0) {
    isolate_outliers(out.x.data(), group_, d, which == 0, group_, nullptr, k_out, out.index.data(), out.exact.data());
  }
}

void GearBlockSet::code_isolated(int64_t index, int64_t b, int64_t h, int which, const Isolated& part, float* decoded) {
  const int64_t gv = static_cast<int64_t>(token_groups(static_cast<int>(dv_), group_));
  const int64_t d = which == 0 ? dk_ : dv_, n = group_ * d;
  // Grow-only per-thread scratch: parts of one flush run on the pool's threads at once.
  thread_local std::vector<uint8_t> codes;
  thread_local std::vector<core::GroupParams> params;
  codes.resize(static_cast<std::size_t>(n));
  // D: KIVI's group code — keys per channel over the block's tokens, values per token.
  if (which == 0) {
    params.resize(static_cast<std::size_t>(dk_));
    core::quantize_per_channel(part.x.data(), static_cast<std::size_t>(group_), static_cast<std::size_t>(dk_), bits_,
                               static_cast<std::size_t>(group_), codes.data(), params.data());
    std::memcpy(row_ptr<uint16_t>(key_params_, b, h, index), params.data(),
                sizeof(core::GroupParams) * static_cast<std::size_t>(dk_));
  } else {
    params.resize(static_cast<std::size_t>(group_ * gv));
    core::quantize_per_token(part.x.data(), static_cast<std::size_t>(group_), static_cast<std::size_t>(dv_), bits_,
                             static_cast<std::size_t>(group_), codes.data(), params.data());
  }
  lm::Tensor& packed = which == 0 ? key_codes_ : value_codes_;
  for (int64_t t = 0; t < group_; ++t) {
    core::pack_words(codes.data() + t * d, static_cast<std::size_t>(d), bits_,
                     row_ptr<uint32_t>(packed, b, h, index * group_ + t));
    if (which == 1) {
      std::memcpy(row_ptr<uint16_t>(value_params_, b, h, index * group_ + t), params.data() + t * gv,
                  sizeof(core::GroupParams) * static_cast<std::size_t>(gv));
    }
  }
  // The outliers' corrections against what the stored codes give back, so a reader gets them exact.
  decode_part(which == 0, b, h, index, false, decoded);
  if (!part.index.empty()) {
    outliers_.record(which == 0, b, h, index, part.index.data(), part.exact.data(), decoded);
    outliers_.apply(which == 0, b, h, index * group_, (index + 1) * group_, decoded);
  }
}

void GearBlockSet::code_part(int64_t index, int64_t b, int64_t h, int which, const float* src, float* decoded) {
  thread_local Isolated part;
  isolate(which, src, part);
  code_isolated(index, b, h, which, part, decoded);
}

void GearBlockSet::decode_part(bool keys, int64_t b, int64_t h, int64_t index, bool with_outliers, float* out) const {
  const int64_t row0 = index * group_;
  if (keys) {
    thread_local std::vector<uint8_t> codes;
    codes.resize(static_cast<std::size_t>(dk_));
    const auto* kp = reinterpret_cast<const GroupParams16*>(row_ptr<uint16_t>(key_params_, b, h, index));
    for (int64_t t = 0; t < group_; ++t) {
      core::unpack_words(row_ptr<uint32_t>(key_codes_, b, h, row0 + t), static_cast<std::size_t>(dk_), bits_,
                         codes.data());
      for (int64_t c = 0; c < dk_; ++c) out[t * dk_ + c] = decode_code(codes[static_cast<std::size_t>(c)], kp[c]);
    }
  } else {
    for (int64_t t = 0; t < group_; ++t) {
      decode_token_row(row_ptr<uint32_t>(value_codes_, b, h, row0 + t),
                       reinterpret_cast<const GroupParams16*>(row_ptr<uint16_t>(value_params_, b, h, row0 + t)),
                       static_cast<int>(dv_), group_, bits_, out + t * dv_);
    }
  }
  if (with_outliers) outliers_.apply(keys, b, h, row0, row0 + group_, out);
}

void GearBlockSet::copy_block(const GearBlockSet& source, int64_t from, int64_t to) {
  const auto copy = [&](const lm::Tensor& src, lm::Tensor& dst, int64_t rows) {
    const std::size_t bytes = static_cast<std::size_t>(rows * src.dim(3)) * src.element_size();
    for (int64_t b = 0; b < batch_; ++b) {
      for (int64_t h = 0; h < heads_; ++h) {
        // memmove: within one set the rows may overlap when a flush's blocks close up.
        std::memmove(row_bytes(dst, b, h, to * rows), row_bytes(src, b, h, from * rows), bytes);
      }
    }
  };
  copy(source.key_codes_, key_codes_, group_);
  copy(source.key_params_, key_params_, 1);
  copy(source.value_codes_, value_codes_, group_);
  copy(source.value_params_, value_params_, group_);
  outliers_.copy_block(source.outliers_, from, to);
}

std::size_t GearBlockSet::nbytes() const {
  return key_codes_.storage_bytes() + key_params_.storage_bytes() + value_codes_.storage_bytes() +
         value_params_.storage_bytes() + outliers_.nbytes();
}

std::vector<lm::Tensor> GearBlockSet::state() const {
  std::vector<lm::Tensor> out = {key_codes_.slice(2, 0, blocks_ * group_), key_params_.slice(2, 0, blocks_),
                                 value_codes_.slice(2, 0, blocks_ * group_),
                                 value_params_.slice(2, 0, blocks_ * group_)};
  if (outliers_.enabled()) {
    for (lm::Tensor& t : outliers_.state(blocks_)) out.push_back(std::move(t));
  }
  return out;
}

void GearBlockSet::from_state(const std::vector<lm::Tensor>& state, std::size_t first, int64_t blocks,
                              const char* who) {
  const lm::Tensor* like[] = {&key_codes_, &key_params_, &value_codes_, &value_params_};
  const int64_t rows[] = {blocks * group_, blocks, blocks * group_, blocks * group_};
  for (std::size_t i = 0; i < 4; ++i) {
    const lm::Tensor& s = state[first + i];
    if (s.ndim() != 4 || s.dim(0) != like[i]->dim(0) || s.dim(1) != like[i]->dim(1) || s.dim(2) != rows[i] ||
        s.dim(3) != like[i]->dim(3) || s.dtype() != like[i]->dtype()) {
      throw base::FormatError(std::string(who) + ": tensor " + std::to_string(first + i) + " " +
                              lm::shape_text(s.shape()) + " does not match " + std::to_string(rows[i]) + " rows");
    }
  }
  key_codes_ = cache_rows::copy_rows(state[first], rows[0], rows[0]);
  key_params_ = cache_rows::copy_rows(state[first + 1], rows[1], rows[1]);
  value_codes_ = cache_rows::copy_rows(state[first + 2], rows[2], rows[2]);
  value_params_ = cache_rows::copy_rows(state[first + 3], rows[3], rows[3]);
  if (outliers_.enabled()) outliers_.from_state(state, first + 4, blocks, who);
  blocks_ = capacity_ = blocks;
}

GearBlockSet GearBlockSet::deep_copy() const {
  GearBlockSet copy = *this;
  copy.key_codes_ = key_codes_.clone();
  copy.key_params_ = key_params_.clone();
  copy.value_codes_ = value_codes_.clone();
  copy.value_params_ = value_params_.clone();
  copy.outliers_ = outliers_.deep_copy();
  return copy;
}

}  // namespace veloxquant
