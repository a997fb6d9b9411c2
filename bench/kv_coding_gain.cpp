// How much transform coding (a KLT: per-head PCA basis + bits allocated by variance) could gain
// over the equal-bit Hadamard rotation that turboquant_block uses, measured on a real model's
// keys and values — the test issue 12's q3 work ran before building a `klt_block` cache.
//
//   build/bench/kv_coding_gain MODEL TEXT [CTX=2048] [CAL_ROWS=256] [BITS=3]
//
// One window of CTX tokens from the start of TEXT (BOS first) goes through the model in
// 512-token calls (the host's prefill). Per layer and kv head, the basis is calibrated on rows
// 1..CAL_ROWS of the first call (as the cache would: row 0 is the attention sink) and judged on
// the rows of the *last* call (positions CTX-512..CTX-1), with Gaussian rate-distortion theory
// at BITS bits per element:
//   - Hadamard baseline: every coordinate gets BITS bits; D = AM(v) 2^-2R per coordinate.
//   - KLT: per-component variances v_i of the held-out rows in the calibrated basis (around the
//     calibrated mean), reverse water-filling at the same total rate: D = sum min(theta, v_i).
//   - KLT weighted by queries (keys only): the error that moves scores is e^T E[qq^T] e, so
//     component i costs g_i = u_i^T E[qq^T] u_i (held-out queries of the kv head's GQA group);
//     water-filling on g_i v_i against the Hadamard error's E[(q.e)^2] = sigma^2 tr E[qq^T].
// Gains in dB (10 log10 of the distortion ratio); ~6 dB per bit. "in-sample" is the classic
// figure 10 log10(AM/GM) of the calibration rows' own eigenvalues (no holdout, no rate floor).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "base/thread_pool.h"
#include "lm/cache/cache.h"
#include "lm/load.h"
#include "lm/model.h"
#include "recording_kv_cache.h"
#include "veloxquant/core/linalg.h"

namespace {

// Forwards to the host's own cache and keeps the f32 rows of the first and last call.
class RecordingCache final : public bench_support::RecordingKVCache {
 public:
  RecordingCache(std::shared_ptr<lm::KVCache> inner, int64_t last_offset)
      : RecordingKVCache(std::move(inner)), last_(last_offset) {}
  std::shared_ptr<lm::KVCache> clone() const override { return std::make_shared<RecordingCache>(*this); }

  std::vector<float> first_k, first_v, last_k, last_v, last_q;
  int64_t first_rows = 0, last_rows = 0;

 private:
  // Keeps the first call's rows (the calibration rows) and the call at last_offset (held out).
  void record(const lm::Tensor& keys, const lm::Tensor& values, int64_t at) override {
    if (at == 0) {
      first_k = keys.to_f32(), first_v = values.to_f32(), first_rows = keys.dim(2);
    } else if (at == last_) {
      last_k = keys.to_f32(), last_v = values.to_f32(), last_q = pending_queries(), last_rows = keys.dim(2);
    }
  }

  int64_t last_;
};

// Reverse water-filling: the distortion sum_i min(theta, p_i) whose rate
// sum_i max(0, log2(p_i / theta) / 2) equals total_bits.
double water_filled(const std::vector<double>& p, double total_bits) {
  double lo = 1e-30, hi = *std::max_element(p.begin(), p.end());
  for (int it = 0; it < 200; ++it) {
    const double theta = std::sqrt(lo * hi);
    double rate = 0;
    for (double x : p) rate += x > theta ? 0.5 * std::log2(x / theta) : 0.0;
    (rate > total_bits ? lo : hi) = theta;
  }
  double d = 0;
  for (double x : p) d += std::min(hi, x);
  return d;
}

struct Gains {
  double in_sample = 0, holdout = 0, weighted = 0;
};

// One side (keys or values) of a layer's two recorded calls: rows [H, S, D] f32 of the calibration
// call (cal, S = cal_s) and of the held-out one (held, S = held_s).
struct RecordedSide {
  const std::vector<float>& cal;
  int64_t cal_s;
  const std::vector<float>& held;
  int64_t held_s;
  int64_t d;
};

// queries: [Hq, S, D] of the held-out call (nullptr: values).
Gains gains_of(const RecordedSide& side, const std::vector<float>* queries, int64_t heads, int64_t query_heads,
               int64_t h, int64_t cal_rows, double bits) {
  const std::vector<float>& cal = side.cal;
  const std::vector<float>& held = side.held;
  const int64_t cal_s = side.cal_s, held_s = side.held_s, d = side.d;
  Gains g;
  const int64_t n = std::min<int64_t>(cal_rows, cal_s - 1);
  const auto pca = veloxquant::linalg::pca(cal.data() + (h * cal_s + 1) * d, n, d, true);
  double am = 0, lg = 0;
  for (double l : pca.variance) am += l, lg += std::log(std::max(l, 1e-30));
  g.in_sample = 10 * std::log10(am / d / std::exp(lg / d));
  // Held-out second moments around the calibrated mean, in the calibrated basis.
  std::vector<double> v(d, 0.0), qm(d * d, 0.0);
  const float* rows = held.data() + h * held_s * d;
  for (int64_t t = 0; t < held_s; ++t) {
    for (int64_t i = 0; i < d; ++i) {
      double c = 0;
      for (int64_t e = 0; e < d; ++e) c += pca.components[i * d + e] * (rows[t * d + e] - pca.mean[e]);
      v[i] += c * c / held_s;
    }
  }
  double trace = 0;
  for (double x : v) trace += x;
  const double total = bits * static_cast<double>(d);
  const double hadamard = trace * std::exp2(-2.0 * bits);  // d coordinates of AM(v) 2^-2R
  g.holdout = 10 * std::log10(hadamard / water_filled(v, total));
  if (queries == nullptr) return g;
  const int64_t group = query_heads / heads;
  for (int64_t qh = h * group; qh < (h + 1) * group; ++qh) {
    for (int64_t t = 0; t < held_s; ++t) {
      const float* q = queries->data() + (qh * held_s + t) * d;
      for (int64_t i = 0; i < d; ++i) {
        for (int64_t j = 0; j < d; ++j) qm[i * d + j] += static_cast<double>(q[i]) * q[j] / (group * held_s);
      }
    }
  }
  double q_trace = 0;
  for (int64_t i = 0; i < d; ++i) q_trace += qm[i * d + i];
  std::vector<double> p(d);
  for (int64_t c = 0; c < d; ++c) {
    const double* u = pca.components.data() + c * d;
    double w = 0;
    for (int64_t i = 0; i < d; ++i) {
      for (int64_t j = 0; j < d; ++j) w += u[i] * qm[i * d + j] * u[j];
    }
    p[c] = w * v[c];
  }
  g.weighted = 10 * std::log10(hadamard / d * q_trace / water_filled(p, total));
  return g;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s MODEL TEXT [CTX=2048] [CAL_ROWS=256] [BITS=3]\n", argv[0]);
    return 2;
  }
  try {
    const int64_t ctx = argc > 3 ? std::atoll(argv[3]) : 2048;
    const int64_t cal_rows = argc > 4 ? std::atoll(argv[4]) : 256;
    const double bits = argc > 5 ? std::atof(argv[5]) : 3.0;
    constexpr int64_t kCall = 512;
    if (ctx < 2 * kCall || ctx % kCall != 0 || cal_rows < 2 || cal_rows >= kCall || bits <= 0) {
      std::fprintf(stderr, "CTX must be a multiple of 512 >= 1024, CAL_ROWS in [2, 511], BITS > 0\n");
      return 2;
    }
    base::ThreadPool::set_global_threads(2);
    lm::LoadOptions options;
    options.threads = 2;
    const lm::LoadedModel loaded = lm::load(argv[1], options);
    std::ifstream file(argv[2]);
    if (!file) throw std::runtime_error(std::string("cannot read ") + argv[2]);
    std::stringstream text;
    text << file.rdbuf();
    std::vector<int32_t> tokens = loaded.tokenizer->encode(text.str(), true);
    if (static_cast<int64_t>(tokens.size()) < ctx) throw std::runtime_error("text shorter than CTX tokens");
    tokens.resize(static_cast<std::size_t>(ctx));
    lm::CacheList caches = lm::make_prompt_cache(*loaded.model);
    std::vector<RecordingCache*> recorders;
    for (auto& cache : caches) {
      auto recorder = std::make_shared<RecordingCache>(cache, ctx - kCall);
      recorders.push_back(recorder.get());
      cache = recorder;
    }
    std::vector<float> logits;
    for (int64_t i = 0; i < ctx; i += kCall) {
      const std::vector<int32_t> chunk(tokens.begin() + i, tokens.begin() + i + kCall);
      loaded.model->forward(chunk, caches, logits);
    }
    std::printf(
        "layer head | keys: in-sample holdout q-weighted | values: in-sample holdout   (dB over Hadamard, %.2g bits)\n",
        bits);
    Gains key_sum, value_sum;
    int64_t count = 0;
    for (std::size_t layer = 0; layer < recorders.size(); ++layer) {
      const RecordingCache& r = *recorders[layer];
      if (r.last_q.empty())
        throw std::runtime_error("the host passed no queries (layer " + std::to_string(layer) + ")");
      for (int64_t h = 0; h < r.heads; ++h) {
        const Gains k = gains_of({r.first_k, r.first_rows, r.last_k, r.last_rows, r.key_dim}, &r.last_q, r.heads,
                                 r.query_heads, h, cal_rows, bits);
        const Gains v = gains_of({r.first_v, r.first_rows, r.last_v, r.last_rows, r.value_dim}, nullptr, r.heads,
                                 r.query_heads, h, cal_rows, bits);
        std::printf("%5zu %4lld | %6.2f %6.2f %6.2f | %6.2f %6.2f\n", layer, static_cast<long long>(h), k.in_sample,
                    k.holdout, k.weighted, v.in_sample, v.holdout);
        key_sum.in_sample += k.in_sample, key_sum.holdout += k.holdout, key_sum.weighted += k.weighted;
        value_sum.in_sample += v.in_sample, value_sum.holdout += v.holdout;
        ++count;
      }
    }
    const double n = static_cast<double>(count);
    std::printf("mean       | %6.2f %6.2f %6.2f | %6.2f %6.2f\n", key_sum.in_sample / n, key_sum.holdout / n,
                key_sum.weighted / n, value_sum.in_sample / n, value_sum.holdout / n);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
  return 0;
}
