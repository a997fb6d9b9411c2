#include "veloxquant/caches/turboquant_block_split_keys.h"

#include <algorithm>
#include <array>
#include <numeric>
#include <random>

#include "veloxquant/core/bit_packing.h"
#include "veloxquant/errors.h"
#include "veloxquant/quant/log8_scale.h"

namespace veloxquant {
namespace {

// Relative MSE per coordinate of n-coordinate Gaussian blocks through q's log8-scaled code: a
// fixed seeded sample (256 blocks), so every cache of the same groups ranks channels alike.
double measured_mse(const quant::BlockLloydQuantizer& q, int n) {
  std::mt19937_64 rng(0x243f6a8885a308d3ULL);
  std::normal_distribution<double> normal;
  std::vector<float> x(static_cast<std::size_t>(n));
  std::vector<uint8_t> c(static_cast<std::size_t>(n));
  double err = 0.0, energy = 0.0;
  for (int b = 0; b < 256; ++b) {
    for (float& v : x) v = static_cast<float>(normal(rng));
    const float s = quant::log8_scale(q.encode_block_log8(x.data(), n, c.data()));
    for (int i = 0; i < n; ++i) {
      const double d = x[static_cast<std::size_t>(i)] - s * q.levels()[c[static_cast<std::size_t>(i)]];
      err += d * d;
      energy += static_cast<double>(x[static_cast<std::size_t>(i)]) * x[static_cast<std::size_t>(i)];
    }
  }
  return err / energy;
}

}  // namespace

namespace {
// The key_split errors, built outside parse_key_split's loop: `what` is the complaint, `text`
// the whole setting.
[[noreturn]] void throw_bad_key_split(const std::string& what, const std::string& text) {
  throw QuantizerConfigError("key_split for 'turboquant_block': " + what + " in '" + text + "'");
}
}  // namespace

std::vector<KeySplitGroup> parse_key_split(const std::string& text) {
  std::vector<KeySplitGroup> out;
  std::size_t at = 0;
  while (at <= text.size()) {
    const std::size_t end = std::min(text.find(',', at), text.size());
    const std::string item = text.substr(at, end - at);
    const std::size_t colon = item.find(':');
    KeySplitGroup g;
    std::size_t used_c = 0, used_b = 0;
    try {
      if (colon == std::string::npos) throw std::invalid_argument("no colon");
      g.channels = std::stoi(item.substr(0, colon), &used_c);
      g.bits = std::stoi(item.substr(colon + 1), &used_b);
    } catch (const std::exception&) {
      used_c = used_b = std::string::npos;
    }
    if (colon == std::string::npos || used_c != colon || used_b != item.size() - colon - 1) {
      throw_bad_key_split("groups are channels:bits separated by commas (e.g. 32:4,16:3,16:2), got '" + item + "'",
                          text);
    }
    if (g.channels < 8 || g.channels % 8 != 0) {
      throw_bad_key_split("a group's channels must be a positive multiple of 8, got " + std::to_string(g.channels),
                          text);
    }
    if (g.bits < 1 || g.bits > 4) {
      throw_bad_key_split("a group's bits must lie in [1, 4], got " + std::to_string(g.bits), text);
    }
    out.push_back(g);
    at = end + 1;
  }
  if (out.size() > static_cast<std::size_t>(SplitKeyCoder::kMaxGroups)) {
    throw_bad_key_split("at most 4 groups, got " + std::to_string(out.size()), text);
  }
  return out;
}

SplitKeyCoder::SplitKeyCoder(std::vector<KeySplitGroup> groups, int head_dim, uint64_t seed)
    : groups_(std::move(groups)), head_dim_(head_dim) {
  int channels = 0;
  for (const KeySplitGroup& g : groups_) {
    offsets_.push_back(channels);
    code_offsets_.push_back(code_bytes_);
    channels += g.channels;
    code_bytes_ += g.channels * g.bits / 8;
  }
  if (groups_.empty() || channels != head_dim) {
    throw QuantizerConfigError("key_split for 'turboquant_block': the groups' channels must add up to head_dim " +
                               std::to_string(head_dim) + " (or to a divisor of it: the groups scale up), got " +
                               std::to_string(channels));
  }
  for (std::size_t g = 0; g < groups_.size(); ++g) {
    quantizers_.push_back(std::make_shared<const quant::BlockLloydQuantizer>(groups_[g].bits, 32));
    rotations_.push_back(
        std::make_shared<const core::Rotation>(groups_[g].channels, seed ^ (kGroupSeedSalt * (g + 1))));
    mse_.push_back(measured_mse(*quantizers_.back(), groups_[g].channels));
  }
}

void SplitKeyCoder::labels_from_weights(const double* weights, uint8_t* labels) const {
  std::vector<int> order(static_cast<std::size_t>(head_dim_));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return weights[a] > weights[b]; });
  std::size_t at = 0;
  for (int g = 0; g < groups(); ++g) {
    for (int i = 0; i < group(g).channels; ++i) labels[order[at++]] = static_cast<uint8_t>(g);
  }
}

void SplitKeyCoder::labels_from_statistics(const double* query_power, const double* key_variance,
                                           uint8_t* labels) const {
  std::vector<double> product(static_cast<std::size_t>(head_dim_));
  for (int c = 0; c < head_dim_; ++c) product[static_cast<std::size_t>(c)] = query_power[c] * key_variance[c];
  labels_from_weights(product.data(), labels);
  std::array<double, kMaxGroups> qs{}, vs{}, unit{};
  for (int g = 0; g < groups(); ++g) unit[g] = mse_[static_cast<std::size_t>(g)] / group(g).channels;
  for (int c = 0; c < head_dim_; ++c) {
    qs[labels[c]] += query_power[c];
    vs[labels[c]] += key_variance[c];
  }
  const auto cost = [&](int g, double q, double v) { return unit[static_cast<std::size_t>(g)] * q * v; };
  // Best-improvement swaps; each lowers J, so this ends (capped for safety).
  for (int pass = 0; pass < 4 * head_dim_; ++pass) {
    double best = 0.0;
    int best_a = -1, best_b = -1;
    for (int a = 0; a < head_dim_; ++a) {
      for (int b = a + 1; b < head_dim_; ++b) {
        const int ga = labels[a], gb = labels[b];
        if (ga == gb) continue;
        const double dq = query_power[b] - query_power[a], dv = key_variance[b] - key_variance[a];
        const double before = cost(ga, qs[ga], vs[ga]) + cost(gb, qs[gb], vs[gb]);
        const double after = cost(ga, qs[ga] + dq, vs[ga] + dv) + cost(gb, qs[gb] - dq, vs[gb] - dv);
        if (after - before < best) {
          best = after - before;
          best_a = a;
          best_b = b;
        }
      }
    }
    double total = 0.0;
    for (int g = 0; g < groups(); ++g) total += cost(g, qs[g], vs[g]);
    if (best_a < 0 || best > -1e-12 * total) break;
    const int ga = labels[best_a], gb = labels[best_b];
    const double dq = query_power[best_b] - query_power[best_a], dv = key_variance[best_b] - key_variance[best_a];
    qs[ga] += dq;
    vs[ga] += dv;
    qs[gb] -= dq;
    vs[gb] -= dv;
    std::swap(labels[best_a], labels[best_b]);
  }
}

void SplitKeyCoder::pack_labels(const uint8_t* labels, uint8_t* packed) const {
  std::fill(packed, packed + label_bytes(), uint8_t{0});
  for (int c = 0; c < head_dim_; ++c) packed[c / 4] |= static_cast<uint8_t>((labels[c] & 3) << (2 * (c % 4)));
}

bool SplitKeyCoder::unpack_labels(const uint8_t* packed, uint8_t* labels) const {
  std::array<int, kMaxGroups> count{};
  for (int c = 0; c < head_dim_; ++c) {
    labels[c] = static_cast<uint8_t>((packed[c / 4] >> (2 * (c % 4))) & 3);
    if (labels[c] >= groups()) return false;
    ++count[labels[c]];
  }
  for (int g = 0; g < groups(); ++g) {
    if (count[static_cast<std::size_t>(g)] != group(g).channels) return false;
  }
  return true;
}

void SplitKeyCoder::permutation(const uint8_t* labels, int32_t* perm) const {
  int at = 0;
  for (int g = 0; g < groups(); ++g) {
    for (int c = 0; c < head_dim_; ++c) {
      if (labels[c] == g) perm[at++] = c;
    }
  }
}

void SplitKeyCoder::forward(const int32_t* perm, const float* x, float* y) const {
  std::array<float, 1024> tmp;
  for (int g = 0; g < groups(); ++g) {
    const int o = offset(g), n = group(g).channels;
    for (int i = 0; i < n; ++i) tmp[static_cast<std::size_t>(i)] = x[perm[o + i]];
    rotations_[static_cast<std::size_t>(g)]->forward(tmp.data(), y + o);
  }
}

void SplitKeyCoder::inverse(const int32_t* perm, const float* y, float* x) const {
  std::array<float, 1024> tmp;
  for (int g = 0; g < groups(); ++g) {
    const int o = offset(g), n = group(g).channels;
    rotations_[static_cast<std::size_t>(g)]->inverse(y + o, tmp.data());
    for (int i = 0; i < n; ++i) x[perm[o + i]] = tmp[static_cast<std::size_t>(i)];
  }
}

void SplitKeyCoder::encode(const float* y, uint8_t* codes, uint8_t* scales) const {
  std::array<uint8_t, 1024> c;
  for (int g = 0; g < groups(); ++g) {
    const int o = offset(g), n = group(g).channels;
    scales[g] = quantizer(g).encode_block_log8(y + o, n, c.data());
    core::pack_dense(c.data(), static_cast<std::size_t>(n), group(g).bits, codes + code_offset(g));
  }
}

void SplitKeyCoder::decode(const uint8_t* codes, const uint8_t* scales, float* y) const {
  std::array<uint8_t, 1024> c;
  for (int g = 0; g < groups(); ++g) {
    const int o = offset(g), n = group(g).channels;
    core::unpack_dense(codes + code_offset(g), static_cast<std::size_t>(n), group(g).bits, c.data());
    const float s = quant::log8_scale(scales[g]);
    const std::vector<float>& lv = quantizer(g).levels();
    for (int i = 0; i < n; ++i) y[o + i] = s * lv[c[static_cast<std::size_t>(i)]];
  }
}

}  // namespace veloxquant
