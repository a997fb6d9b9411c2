#include "lm/llama2c/llama2c_reader.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>

#include "base/error.h"
#include "lm/weights/mapped_file.h"

namespace lm {

namespace {

constexpr uint32_t kExportMagic = 0x616b3432;  // "ak42": llama2.c export.py version >= 1

// Number of f32 values a version-0 checkpoint with this header holds (-1 if inconsistent).
int64_t expected_floats(const Llama2cHeader& h, bool shared) {
  const int64_t dim = h.dim, hidden = h.hidden_dim, layers = h.n_layers, vocab = std::abs(int64_t{h.vocab_size});
  const int64_t head_dim = dim / h.n_heads;
  const int64_t kv_dim = head_dim * h.n_kv_heads;
  int64_t n = vocab * dim;             // token embedding
  n += layers * dim;                   // rms_att
  n += layers * dim * dim;             // wq
  n += 2 * layers * kv_dim * dim;      // wk, wv
  n += layers * dim * dim;             // wo
  n += layers * dim;                   // rms_ffn
  n += 3 * layers * hidden * dim;      // w1, w2, w3
  n += dim;                            // rms_final
  n += int64_t{h.seq_len} * head_dim;  // freq_cis real + imag (head_dim/2 each)
  if (!shared) n += vocab * dim;       // wcls
  return n;
}

std::string header_text(const Llama2cHeader& h) {
  return "dim=" + std::to_string(h.dim) + " hidden_dim=" + std::to_string(h.hidden_dim) +
         " n_layers=" + std::to_string(h.n_layers) + " n_heads=" + std::to_string(h.n_heads) +
         " n_kv_heads=" + std::to_string(h.n_kv_heads) + " vocab_size=" + std::to_string(h.vocab_size) +
         " seq_len=" + std::to_string(h.seq_len);
}

bool header_sane(const Llama2cHeader& h) {
  constexpr int32_t kMax = 1 << 20;
  const auto ok = [](int32_t v) { return v > 0 && v < kMax; };
  return ok(h.dim) && ok(h.hidden_dim) && ok(h.n_layers) && ok(h.n_heads) && ok(h.n_kv_heads) && h.vocab_size != 0 &&
         std::abs(h.vocab_size) < kMax && ok(h.seq_len) && h.dim % h.n_heads == 0 && h.n_heads % h.n_kv_heads == 0;
}

}  // namespace

bool looks_like_llama2c(const std::string& path) {
  std::error_code ec;
  const auto size = std::filesystem::file_size(path, ec);
  if (ec || size < sizeof(Llama2cHeader)) return false;
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return false;
  Llama2cHeader h;
  const bool read = std::fread(&h, sizeof h, 1, f) == 1;
  std::fclose(f);
  // The size is checked by the reader, which can then say "truncated" instead of "unknown".
  return read && header_sane(h);
}

Llama2cCheckpoint read_llama2c_checkpoint(const std::string& path) {
  auto file = MappedFile::open(path);
  const auto fail = [&](const std::string& what) -> void {
    throw base::FormatError("llama2.c checkpoint '" + path + "': " + what);
  };
  if (file->size() >= 4) {
    uint32_t magic;
    std::memcpy(&magic, file->data(), 4);
    if (magic == kExportMagic) {
      uint32_t version = 0;
      if (file->size() >= 8) std::memcpy(&version, file->data() + 4, 4);
      throw base::Unsupported("llama2.c checkpoint '" + path + "' is an export of version " + std::to_string(version) +
                              " (magic ak42); only the legacy version-0 fp32 layout is supported");
    }
  }
  if (file->size() < sizeof(Llama2cHeader)) {
    fail("truncated: " + std::to_string(file->size()) + " bytes, the header alone needs 28");
  }
  Llama2cHeader h;
  std::memcpy(&h, file->data(), sizeof h);
  if (!header_sane(h)) fail("implausible header (" + header_text(h) + ")");
  const bool shared = h.vocab_size > 0;
  const int64_t floats = expected_floats(h, shared);
  const uint64_t expected_bytes = static_cast<uint64_t>(floats) * 4 + sizeof(Llama2cHeader);
  if (file->size() < expected_bytes) {
    fail("truncated: header (" + header_text(h) + ") implies " + std::to_string(expected_bytes) + " bytes, file has " +
         std::to_string(file->size()));
  }
  if (file->size() > expected_bytes) {
    fail("header (" + header_text(h) + ") implies " + std::to_string(expected_bytes) + " bytes but the file has " +
         std::to_string(file->size()) + ": wrong dims or not a version-0 checkpoint");
  }

  Llama2cCheckpoint ck;
  ck.shared_classifier = shared;
  ModelConfig& c = ck.config;
  c.architecture = "llama";
  c.name = std::filesystem::path(path).stem().string();
  c.n_layers = h.n_layers;
  c.dim = h.dim;
  c.hidden_dim = h.hidden_dim;
  c.n_heads = h.n_heads;
  c.n_kv_heads = h.n_kv_heads;
  c.head_dim = h.dim / h.n_heads;
  c.vocab_size = std::abs(h.vocab_size);
  c.context_length = h.seq_len;
  c.rope_theta = 10000.0f;  // run.c hard-codes it
  c.norm_eps = 1e-5f;       // run.c hard-codes it
  ck.hyper.rope_style = kernels::RopeStyle::kNormal;

  // Walk the tensors in file order, handing out views into the mapping.
  const float* cursor = reinterpret_cast<const float*>(file->data() + sizeof(Llama2cHeader));
  const std::shared_ptr<const void> owner = file;
  const auto matrix = [&](int64_t rows, int64_t cols, const std::string& name) {
    WeightMatrix w = WeightMatrix::view(GgmlType::F32, rows, cols, cursor, owner, name);
    cursor += rows * cols;
    return w;
  };
  const auto vec = [&](int64_t n) {
    std::vector<float> v(cursor, cursor + n);
    cursor += n;
    return v;
  };
  const int64_t L = c.n_layers, dim = c.dim, hidden = c.hidden_dim, kv_dim = int64_t{c.head_dim} * c.n_kv_heads;
  LlamaWeights& w = ck.weights;
  w.layers.resize(static_cast<std::size_t>(L));
  w.token_embedding = matrix(c.vocab_size, dim, "token_embedding");
  for (int64_t l = 0; l < L; ++l) w.layers[l].attn_norm = vec(dim);
  const auto per_layer = [&](WeightMatrix LlamaLayerWeights::*member, int64_t rows, int64_t cols, const char* name) {
    for (int64_t l = 0; l < L; ++l)
      w.layers[l].*member = matrix(rows, cols, std::string(name) + "[" + std::to_string(l) + "]");
  };
  per_layer(&LlamaLayerWeights::wq, dim, dim, "wq");
  per_layer(&LlamaLayerWeights::wk, kv_dim, dim, "wk");
  per_layer(&LlamaLayerWeights::wv, kv_dim, dim, "wv");
  per_layer(&LlamaLayerWeights::wo, dim, dim, "wo");
  for (int64_t l = 0; l < L; ++l) w.layers[l].ffn_norm = vec(dim);
  per_layer(&LlamaLayerWeights::w_gate, hidden, dim, "w1");
  per_layer(&LlamaLayerWeights::w_down, dim, hidden, "w2");
  per_layer(&LlamaLayerWeights::w_up, hidden, dim, "w3");
  w.output_norm = vec(dim);
  cursor += int64_t{h.seq_len} * c.head_dim;  // freq_cis_real + freq_cis_imag: recomputed by rope()
  w.output = shared ? w.token_embedding : matrix(c.vocab_size, dim, "wcls");
  return ck;
}

}  // namespace lm
