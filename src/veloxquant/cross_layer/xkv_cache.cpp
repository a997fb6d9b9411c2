#include "veloxquant/cross_layer/xkv_cache.h"

#include <algorithm>
#include <cstring>

#include "base/error.h"
#include "base/thread_pool.h"
#include "lm/dtype.h"
#include "lm/cache/kv_rows.h"
#include "veloxquant/attention/attention_driver.h"
#include "veloxquant/attention/dtype_rows.h"
#include "veloxquant/attention/fused_call.h"
#include "veloxquant/caches/quantized_blocks_tail.h"
#include "veloxquant/core/group_quant.h"
#include "veloxquant/caches/svdq_rows.h"
#include "veloxquant/cross_layer/xkv_rows.h"
#include "veloxquant/errors.h"
#include "veloxquant/rows/cache_rows.h"
#include "veloxquant/rows/group_affine_codes.h"

namespace veloxquant {

using cache_rows::row_ptr;

namespace {
constexpr const char* kTypeName = "XkvCache";

void check_options(const XkvOptions& o) {
  if (o.xkv_group_size < 1) {
    throw QuantizerConfigError("xkv_group_size must be >= 1, got " + std::to_string(o.xkv_group_size));
  }
  if (o.xkv_rank && *o.xkv_rank < 1) {
    throw QuantizerConfigError("xkv_rank must be >= 1 or None, got " + std::to_string(*o.xkv_rank));
  }
  if (!(o.xkv_energy_threshold > 0.0 && o.xkv_energy_threshold <= 1.0)) {
    throw QuantizerConfigError("xkv_energy_threshold must lie in (0, 1], got " +
                               std::to_string(o.xkv_energy_threshold));
  }
  if (o.xkv_latent_bits < 1 || o.xkv_latent_bits > 8) {
    throw QuantizerConfigError("xkv_latent_bits must lie in [1, 8], got " + std::to_string(o.xkv_latent_bits));
  }
  if (o.xkv_group_quant_size < 1 || o.xkv_group_quant_size > 4096) {
    throw QuantizerConfigError("xkv_group_quant_size must lie in [1, 4096], got " +
                               std::to_string(o.xkv_group_quant_size));
  }
  if (o.xkv_max_ctx < 1) throw QuantizerConfigError("xkv_max_ctx must be >= 1, got " + std::to_string(o.xkv_max_ctx));
}

const XkvOptions& checked(const XkvOptions& o) {
  check_options(o);
  return o;
}

int64_t round_up(int64_t x, int64_t step) { return (x + step - 1) / step * step; }

// Latent coordinates of n keys: z[t * coded + i] = <direction i, key t - mean>, with the mean
// in row 0 of head (b, h) of the basis table and the directions in rows 1..coded (double sums).
void project_keys(const lm::Tensor& table, int64_t b, int64_t h, const float* keys, int64_t n, int64_t dim,
                  int64_t coded, float* z) {
  const float* mean = row_ptr<float>(table, b, h, 0);
  for (int64_t t = 0; t < n; ++t) {
    const float* key = keys + t * dim;
    for (int64_t i = 0; i < coded; ++i) {
      const float* dir = row_ptr<float>(table, b, h, 1 + i);
      double dot = 0.0;
      for (int64_t c = 0; c < dim; ++c) dot += static_cast<double>(dir[c]) * (key[c] - mean[c]);
      z[t * coded + i] = static_cast<float>(dot);
    }
  }
}

}  // namespace

std::vector<XkvRole> xkv_roles(std::size_t n_attention_layers, int group_size) {
  std::vector<XkvRole> roles(n_attention_layers);
  const std::size_t g = static_cast<std::size_t>(std::max(group_size, 1));
  for (std::size_t k = 0; k < n_attention_layers; ++k) {
    const std::size_t first = k / g * g;
    roles[k] = {static_cast<int>(k / g), static_cast<int>(k - first),
                static_cast<int>(std::min(g, n_attention_layers - first))};
  }
  return roles;
}

XkvCache::XkvCache(const XkvOptions& options, XkvRole role, std::shared_ptr<XkvCoordinator> coordinator)
    : options_(checked(options)),
      role_(role),
      coordinator_(std::move(coordinator)),
      group_(options.xkv_group_quant_size) {}

std::size_t XkvCache::nbytes() const {
  return codes_.storage_bytes() + params_.storage_bytes() + values_.storage_bytes() + pending_.storage_bytes() +
         (basis_ && owns_basis_ ? basis_->nbytes() : 0);
}

void XkvCache::allocate(const lm::Tensor& keys, const lm::Tensor& values) {
  batch_ = keys.dim(0);
  heads_ = keys.dim(1);
  dk_ = keys.dim(3);
  dv_ = values.dim(3);
  dtype_ = keys.dtype();
  values_ = lm::Tensor({batch_, heads_, 0, dv_}, dtype_);
  pending_ = lm::Tensor({batch_, heads_, group_, dk_}, dtype_);
  pending_capacity_ = group_;
  value_capacity_ = code_capacity_ = 0;
}

void XkvCache::adopt_basis(std::shared_ptr<const XkvBasis> basis, bool owns) {
  basis_ = std::move(basis);
  owns_basis_ = owns;
  layout_ = xkv_latent_layout(dk_, basis_->coded, options_.xkv_latent_bits);
  codes_ = lm::Tensor({batch_, heads_, 0, layout_.row_bytes}, lm::DType::U8);
  params_ = lm::Tensor({batch_, heads_, 0, 2 * basis_->coded}, lm::DType::F16);
  code_capacity_ = 0;
}

void XkvCache::acquire_basis() {
  // This layer's prefill keys: every row received so far (all of them are still pending).
  const auto pending_keys = [this] {
    auto keys = std::make_shared<XkvKeys>();
    keys->batch = batch_;
    keys->heads = heads_;
    keys->rows = offset_ - frontier_;
    keys->dim = dk_;
    keys->data.resize(static_cast<std::size_t>(batch_ * heads_ * keys->rows * dk_));
    for (int64_t bh = 0; bh < batch_ * heads_; ++bh) {
      cache_rows::load_f32(blocks_tail::head_rows(pending_, bh, pending_capacity_, dk_), dtype_,
                           static_cast<std::size_t>(keys->rows * dk_), keys->data.data() + bh * keys->rows * dk_);
    }
    return keys;
  };
  if (!coordinator_) {  // alone (made by make_serving, or restored): a per-layer SVD
    const auto keys = pending_keys();
    published_ = true;
    adopt_basis(
        std::make_shared<const XkvBasis>(fit_xkv_basis({keys.get()}, options_.xkv_rank, options_.xkv_energy_threshold)),
        true);
    return;
  }
  if (!published_) {  // fan-in
    published_ = true;
    coordinator_->publish(role_.group_id, role_.member, role_.n_members, pending_keys());
  }
  const int fits_before = coordinator_->fits();
  std::shared_ptr<const XkvBasis> basis = coordinator_->basis(role_.group_id);
  if (basis) adopt_basis(std::move(basis), coordinator_->fits() > fits_before);
}

void XkvCache::ensure_code_rows(int64_t rows) {
  if (rows <= code_capacity_) return;
  const int64_t grown = round_up(code_capacity_ + round_up(rows - code_capacity_, kGrowthStep), group_);
  codes_ = cache_rows::copy_rows(codes_, frontier_, grown);
  params_ = cache_rows::copy_rows(params_, frontier_ / group_, grown / group_);
  code_capacity_ = grown;
}

void XkvCache::flush() {
  const int64_t waiting = offset_ - frontier_, blocks = waiting / group_;
  if (blocks == 0) return;
  ensure_code_rows(frontier_ + blocks * group_);
  const int64_t coded = layout_.coded, kept = waiting - blocks * group_;
  const int bits = options_.xkv_latent_bits;
  std::vector<float> rows(static_cast<std::size_t>(waiting * dk_));
  std::vector<float> z(static_cast<std::size_t>(group_ * coded));
  std::vector<uint8_t> codes(static_cast<std::size_t>(group_ * coded));
  for (int64_t b = 0; b < batch_; ++b) {
    for (int64_t h = 0; h < heads_; ++h) {
      const int64_t bh = b * heads_ + h;
      std::byte* head = blocks_tail::head_rows(pending_, bh, pending_capacity_, dk_);
      cache_rows::load_f32(head, dtype_, rows.size(), rows.data());
      for (int64_t k = 0; k < blocks; ++k) {
        const int64_t block = frontier_ / group_ + k;
        project_keys(basis_->table, b, h, rows.data() + k * group_ * dk_, group_, dk_, coded, z.data());
        auto* params = reinterpret_cast<core::GroupParams*>(row_ptr<uint16_t>(params_, b, h, block));
        for (int64_t i = 0; i < coded; ++i) {
          params[i] = core::quantize_group(z.data() + i, static_cast<std::size_t>(group_),
                                           static_cast<std::size_t>(coded), bits, codes.data() + i);
        }
        for (int64_t t = 0; t < group_; ++t) {
          pack_svdq_row(layout_, codes.data() + t * coded, row_ptr<uint8_t>(codes_, b, h, block * group_ + t));
        }
      }
      // The incomplete block's rows move to the front of the pending rows.
      const std::size_t width = static_cast<std::size_t>(dk_) * lm::dtype_size(dtype_);
      std::memmove(head, head + static_cast<std::size_t>(blocks * group_) * width,
                   static_cast<std::size_t>(kept) * width);
    }
  }
  frontier_ += blocks * group_;
  if (pending_capacity_ > group_) {  // member 0's long wait is over: back to one block of rows
    pending_ = cache_rows::copy_rows(pending_, kept, group_);
    pending_capacity_ = group_;
  }
}

void XkvCache::store(const lm::Tensor& keys, const lm::Tensor& values) {
  lm::check_new_tokens(keys, values, "XkvCache::update_and_fetch");
  if (!pending_.defined()) {
    allocate(keys, values);
  } else {
    cache_rows::check_row_layout(keys, values, {batch_, heads_, dk_, dv_}, "XkvCache::update_and_fetch");
  }
  const int64_t s = keys.dim(2), waiting = offset_ - frontier_;
  if (offset_ + s > value_capacity_) {
    const int64_t grown = value_capacity_ + round_up(offset_ + s - value_capacity_, kGrowthStep);
    values_ = cache_rows::copy_rows(values_, offset_, grown);
    value_capacity_ = grown;
  }
  if (waiting + s > pending_capacity_) {
    const int64_t grown = round_up(waiting + s, group_);
    pending_ = cache_rows::copy_rows(pending_, waiting, grown);
    pending_capacity_ = grown;
  }
  lm::copy_token_rows(values, values_, offset_);
  lm::copy_token_rows(keys, pending_, waiting);
  offset_ += s;
  if (!basis_) acquire_basis();
  if (basis_) flush();
}

void XkvCache::decode_block(int64_t b, int64_t h, int64_t block, float* out) const {
  const int64_t coded = layout_.coded;
  std::vector<uint8_t> codes(static_cast<std::size_t>(coded));
  const auto* params = reinterpret_cast<const GroupParams16*>(row_ptr<uint16_t>(params_, b, h, block));
  const float* mean = row_ptr<float>(basis_->table, b, h, 0);
  for (int64_t t = 0; t < group_; ++t) {
    unpack_svdq_row(layout_, row_ptr<uint8_t>(codes_, b, h, block * group_ + t), codes.data());
    float* k = out + t * dk_;
    std::copy(mean, mean + dk_, k);
    for (int64_t i = 0; i < coded; ++i) {
      const float z = decode_code(codes[static_cast<std::size_t>(i)], params[i]);
      const float* dir = row_ptr<float>(basis_->table, b, h, 1 + i);
      for (int64_t c = 0; c < dk_; ++c) k[c] += z * dir[c];
    }
  }
}

std::vector<float> XkvCache::key_row(int64_t b, int64_t h, int64_t j) const {
  std::vector<float> row(static_cast<std::size_t>(dk_));
  if (j < frontier_) {
    std::vector<float> block(static_cast<std::size_t>(group_ * dk_));
    decode_block(b, h, j / group_, block.data());
    std::copy_n(block.begin() + (j % group_) * dk_, dk_, row.begin());
  } else {
    const std::byte* head = blocks_tail::head_rows(pending_, b * heads_ + h, pending_capacity_, dk_);
    cache_rows::load_f32(head + static_cast<std::size_t>((j - frontier_) * dk_) * lm::dtype_size(dtype_), dtype_,
                         row.size(), row.data());
  }
  return row;
}

lm::KeysValues XkvCache::update_and_fetch(const lm::Tensor& keys, const lm::Tensor& values) {
  store(keys, values);
  return fetch(keys.dtype());
}

lm::KeysValues XkvCache::fetch(lm::DType dtype) const {
  lm::Tensor k({batch_, heads_, offset_, dk_}, dtype);
  lm::Tensor v({batch_, heads_, offset_, dv_}, dtype);
  std::vector<float> block(static_cast<std::size_t>(group_ * dk_));
  const int64_t ke = static_cast<int64_t>(k.element_size()), ve = static_cast<int64_t>(values_.element_size());
  for (int64_t b = 0; b < batch_; ++b) {
    for (int64_t h = 0; h < heads_; ++h) {
      const int64_t bh = b * heads_ + h;
      std::byte* kout = k.raw_data() + bh * offset_ * dk_ * ke;
      for (int64_t g = 0; g < frontier_ / group_; ++g) {
        decode_block(b, h, g, block.data());
        cache_rows::store_f32(block.data(), block.size(), kout + g * group_ * dk_ * ke, dtype);
      }
      blocks_tail::fetch_head_tail(pending_, dtype_, bh, pending_capacity_, dk_, offset_ - frontier_, frontier_,
                                   offset_, k);
      const std::byte* rv = values_.raw_data() + bh * values_.dim(2) * dv_ * ve;
      lm::convert_elements(rv, dtype_, v.raw_data() + bh * offset_ * dv_ * static_cast<int64_t>(v.element_size()),
                           dtype, static_cast<std::size_t>(offset_ * dv_));
    }
  }
  return {std::move(k), std::move(v)};
}

void XkvCache::fused_attention(const lm::FusedAttentionRequest& request, lm::Tensor& out) {
  if (!request.queries || !request.keys || !request.values) {
    throw base::InvalidArgument("XkvCache::fused_attention: queries, keys and values are required");
  }
  const lm::Tensor& q = *request.queries;
  const int64_t first = offset_;
  store(*request.keys, *request.values);
  attention::check_fused_shapes("XkvCache::fused_attention", q, *request.keys, batch_, heads_, dk_, dv_, out);
  const lm::Tensor empty_table;
  const SvdqRows blocks(codes_, params_, basis_ ? basis_->table : empty_table, values_, layout_, frontier_, group_,
                        /*leading_mean=*/true);
  const attention::DtypeRowSource pending(pending_, values_, frontier_, offset_ - frontier_, frontier_);
  const attention::RowSource* segments[2];
  int n = 0;
  if (frontier_ > 0) segments[n++] = &blocks;
  if (offset_ > frontier_) segments[n++] = &pending;
  lm::Tensor contiguous_queries;
  const attention::AttentionCall call = attention::call_from_request(request, heads_, first, out, contiguous_queries);
  attention::attend(call, segments, n, attention::request_pool(request));
}

std::vector<lm::Tensor> XkvCache::state() const {
  if (!pending_.defined()) return {};
  std::vector<lm::Tensor> out = {values_.slice(2, 0, offset_), pending_.slice(2, 0, offset_ - frontier_)};
  if (basis_) {
    out.push_back(basis_->table);
    out.push_back(basis_->ranks);
    out.push_back(codes_.slice(2, 0, frontier_));
    out.push_back(params_.slice(2, 0, frontier_ / group_));
  }
  return out;
}

std::vector<std::string> XkvCache::meta_state() const {
  const XkvOptions& o = options_;
  return {std::to_string(o.xkv_group_size),
          o.xkv_rank ? std::to_string(*o.xkv_rank) : std::string("None"),
          blocks_tail::exact_double(o.xkv_energy_threshold),
          std::to_string(o.xkv_latent_bits),
          std::to_string(o.xkv_group_quant_size),
          std::to_string(o.xkv_max_ctx),
          std::to_string(role_.group_id),
          std::to_string(role_.member),
          std::to_string(role_.n_members),
          std::to_string(published_ ? 1 : 0),
          std::to_string(offset_),
          std::to_string(frontier_),
          std::string(lm::dtype_name(dtype_))};
}

void XkvCache::from_state(const std::vector<lm::Tensor>& state, const std::vector<std::string>& meta) {
  const char* who = "XkvCache::from_state";
  if (meta.size() != 13) {
    throw base::FormatError(std::string(who) + ": expected 13 meta entries (6 options, group_id, member, n_members, " +
                            "published, offset, frontier, dtype), got " + std::to_string(meta.size()));
  }
  XkvOptions o;
  o.xkv_group_size = static_cast<int>(cache_rows::parse_meta_int(meta[0], who, "xkv_group_size"));
  if (meta[1] != "None") o.xkv_rank = static_cast<int>(cache_rows::parse_meta_int(meta[1], who, "xkv_rank"));
  o.xkv_energy_threshold = blocks_tail::parse_meta_double(meta[2], who, "xkv_energy_threshold");
  o.xkv_latent_bits = static_cast<int>(cache_rows::parse_meta_int(meta[3], who, "xkv_latent_bits"));
  o.xkv_group_quant_size = static_cast<int>(cache_rows::parse_meta_int(meta[4], who, "xkv_group_quant_size"));
  o.xkv_max_ctx = cache_rows::parse_meta_int(meta[5], who, "xkv_max_ctx");
  XkvRole role{static_cast<int>(cache_rows::parse_meta_int(meta[6], who, "group_id")),
               static_cast<int>(cache_rows::parse_meta_int(meta[7], who, "member")),
               static_cast<int>(cache_rows::parse_meta_int(meta[8], who, "n_members"))};
  // Restored alone: no coordinator, so a cache still waiting for its group's basis fits its own
  // on its next call, and a restored basis is this cache's own copy (counted by it).
  XkvCache fresh(o, role, nullptr);
  const bool published = cache_rows::parse_meta_int(meta[9], who, "published") != 0;
  // Not blocks_tail::parse_tail_meta: a member waiting for its group's basis holds more than
  // G - 1 pending rows.
  blocks_tail::TailMeta saved;
  saved.offset = cache_rows::parse_meta_int(meta[10], who, "offset");
  saved.frontier = cache_rows::parse_meta_int(meta[11], who, "frontier");
  try {
    saved.dtype = lm::parse_float_dtype(meta[12]);
  } catch (const base::InvalidArgument& e) {
    throw base::FormatError(std::string(who) + ": " + e.what());
  }
  const int64_t offset = saved.offset, frontier = saved.frontier;
  if (frontier < 0 || frontier > offset) {
    throw base::FormatError(std::string(who) + ": inconsistent offset " + meta[10] + " / frontier " + meta[11]);
  }
  if (state.empty()) {
    if (offset != 0) throw base::FormatError(std::string(who) + ": no tensors for offset " + meta[10]);
    *this = std::move(fresh);
    return;
  }
  if (state.size() != 2 && state.size() != 6) {
    throw base::FormatError(std::string(who) + ": expected 2 or 6 tensors, got " + std::to_string(state.size()));
  }
  const lm::Tensor& values = state[0];
  const lm::Tensor& pending = state[1];
  if (values.ndim() != 4 || pending.ndim() != 4 || values.dim(2) != offset || pending.dim(2) != offset - frontier ||
      frontier % fresh.group_ != 0 || (state.size() == 2 && frontier != 0)) {
    throw base::FormatError(std::string(who) + ": value / pending rows do not match offset " + meta[10] +
                            " / frontier " + meta[11]);
  }
  fresh.allocate(pending.astype(saved.dtype), values.astype(saved.dtype));
  fresh.published_ = published;
  fresh.value_capacity_ = round_up(std::max<int64_t>(offset, 1), kGrowthStep);
  fresh.values_ = cache_rows::copy_rows(values.astype(saved.dtype), offset, fresh.value_capacity_);
  fresh.pending_capacity_ = std::max<int64_t>(fresh.group_, round_up(offset - frontier, fresh.group_));
  fresh.pending_ = cache_rows::copy_rows(pending.astype(saved.dtype), offset - frontier, fresh.pending_capacity_);
  if (state.size() == 6) {
    const lm::Tensor& table = state[2];
    const lm::Tensor& ranks = state[3];
    if (table.ndim() != 4 || table.dtype() != lm::DType::F32 || table.dim(0) != fresh.batch_ ||
        table.dim(1) != fresh.heads_ || table.dim(2) < 2 || table.dim(3) != fresh.dk_ ||
        ranks.dtype() != lm::DType::I32 || ranks.numel() != fresh.batch_ * fresh.heads_) {
      throw base::FormatError(std::string(who) + ": basis " + lm::shape_text(table.shape()) + " does not fit");
    }
    auto basis = std::make_shared<XkvBasis>();
    basis->coded = table.dim(2) - 1;
    basis->table = table.clone();
    basis->ranks = ranks.clone();
    fresh.offset_ = offset;
    fresh.adopt_basis(std::move(basis), true);
    const lm::Tensor& codes = state[4];
    const lm::Tensor& params = state[5];
    const int64_t blocks = frontier / fresh.group_;
    if (codes.ndim() != 4 || codes.dim(2) != frontier || codes.dim(3) != fresh.layout_.row_bytes ||
        codes.dtype() != lm::DType::U8 || params.ndim() != 4 || params.dim(2) != blocks ||
        params.dim(3) != 2 * fresh.layout_.coded || params.dtype() != lm::DType::F16) {
      throw base::FormatError(std::string(who) + ": codes / params do not match frontier " + meta[11]);
    }
    // The capacity the uninterrupted cache has (256-row steps, whole blocks), so bytes agree.
    fresh.code_capacity_ = round_up(round_up(frontier, kGrowthStep), fresh.group_);
    fresh.codes_ = cache_rows::copy_rows(codes, frontier, fresh.code_capacity_);
    fresh.params_ = cache_rows::copy_rows(params, blocks, fresh.code_capacity_ / fresh.group_);
  }
  fresh.offset_ = offset;
  fresh.frontier_ = frontier;
  *this = std::move(fresh);
}

std::shared_ptr<lm::KVCache> XkvCache::clone() const {
  // Everything per layer is copied. The basis is immutable: a member that does not count it
  // keeps sharing it; the one that counts it gives its copy a basis of its own, so each cache's
  // nbytes stays what it holds.
  auto copy = std::make_shared<XkvCache>(*this);
  if (basis_ && owns_basis_) {
    auto own = std::make_shared<XkvBasis>(*basis_);
    own->table = basis_->table.clone();
    own->ranks = basis_->ranks.clone();
    copy->basis_ = std::move(own);
  }
  copy->codes_ = codes_.clone();
  copy->params_ = params_.clone();
  copy->values_ = values_.clone();
  copy->pending_ = pending_.clone();
  return copy;
}

void validate_xkv_options(const KVCacheConfig& config) { check_options(config.options<XkvOptions>()); }

std::shared_ptr<lm::KVCache> make_xkv_cache(const KVCacheConfig& config) {
  validate_xkv_options(config);
  return std::make_shared<XkvCache>(config.options<XkvOptions>());
}

MethodDescriptor xkv_method() {
  MethodDescriptor m;
  m.name = "xkv";
  m.family = "quantization";
  m.is_servable = true;
  m.capabilities = {.fused_attention = true, .needs_coordinator = true, .real_compression = true};
  m.blurb =
      "Cross-layer: one SVD key basis per group of xkv_group_size layers (joint, centred, memoized), "
      "each layer's keys stored as xkv_latent_bits latent codes; values kept as given";
  m.paper = "xKV: Cross-Layer SVD for KV-Cache Compression (Chang et al., arXiv 2503.18893)";
  m.deviations =
      "The original's spec, not the paper: a shared right basis V_g over the group's stacked, centred keys "
      "(the paper shares left token factors of layer-concatenated keys). Fitted per kv head on the first "
      "call; member 0's prefill keys stay in the input dtype until the group's last member has published. "
      "Latent codes are KIVI per-channel group codes over xkv_group_quant_size tokens, really packed; the "
      "incomplete last block stays in the input dtype. Family label 'quantization' (the original's is "
      "'eviction', but nothing is evicted and this registry ties 'eviction' to budgets). A restored or "
      "unwired cache fits its own basis.";
  m.docs = "docs/methods/xkv.md";
  m.fields = {
      option_field("xkv_group_size", &XkvOptions::xkv_group_size,
                   "Contiguous attention layers sharing one key basis (1: a per-layer SVD)", 1),
      option_field("xkv_rank", &XkvOptions::xkv_rank, "Latent channels kept (None: the xkv_energy_threshold rank)"),
      option_field(
          "xkv_energy_threshold", &XkvOptions::xkv_energy_threshold,
          "Without xkv_rank: keep the fewest directions holding this share of the centred keys' energy, (0, 1]"),
      option_field("xkv_latent_bits", &XkvOptions::xkv_latent_bits, "Bits per latent key code", 1, 8),
      option_field("xkv_group_quant_size", &XkvOptions::xkv_group_quant_size,
                   "Tokens per quantization block (one f16 scale and min per latent channel and block)", 1, 4096),
      option_field("xkv_max_ctx", &XkvOptions::xkv_max_ctx,
                   "Most prefill tokens published per group and not yet consumed by the joint SVD", 1),
  };
  m.validate = validate_xkv_options;
  m.make_serving = make_xkv_cache;
  m.cache_type_name = kTypeName;
  m.make_restorable = [] { return std::make_shared<XkvCache>(XkvOptions{}); };
  m.wire_model = [](const KVCacheConfig& config, std::size_t n_attention_layers) -> LayerCacheFactory {
    const XkvOptions& o = config.options<XkvOptions>();
    auto roles = std::make_shared<std::vector<XkvRole>>(xkv_roles(n_attention_layers, o.xkv_group_size));
    auto coordinator =
        std::make_shared<XkvCoordinator>(o.xkv_max_ctx, "xkv_max_ctx", o.xkv_rank, o.xkv_energy_threshold);
    return
        [roles, coordinator](const KVCacheConfig& layer, std::size_t attention_index) -> std::shared_ptr<lm::KVCache> {
          return std::make_shared<XkvCache>(layer.options<XkvOptions>(), roles->at(attention_index), coordinator);
        };
  };
  return m;
}

}  // namespace veloxquant
