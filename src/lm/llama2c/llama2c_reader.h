#pragma once
// Reader for llama2.c checkpoints in the legacy "version 0" fp32 layout (run.c's format):
//   7 × int32 header: dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len
//   (a negative vocab_size means the classifier is NOT shared with the token embedding),
//   then f32 tensors in this order: token_embedding[vocab, dim], rms_att[L, dim],
//   wq[L, dim(out), dim], wk[L, kv_dim, dim], wv[L, kv_dim, dim], wo[L, dim, dim],
//   rms_ffn[L, dim], w1[L, hidden, dim], w2[L, dim, hidden], w3[L, hidden, dim],
//   rms_final[dim], freq_cis_real[seq_len, head_dim/2], freq_cis_imag[same] (unused),
//   and wcls[vocab, dim] only when unshared.
// Matrices are row-major [out, in], which is exactly a WeightMatrix of type F32 with
// rows = out, so the weights are used straight from the memory map.
#include <cstdint>
#include <string>

#include "lm/arch/llama_weights.h"
#include "lm/model.h"

namespace lm {

struct Llama2cHeader {
  int32_t dim = 0, hidden_dim = 0, n_layers = 0, n_heads = 0, n_kv_heads = 0, vocab_size = 0, seq_len = 0;
};

struct Llama2cCheckpoint {
  ModelConfig config;
  LlamaHyperParams hyper;
  LlamaWeights weights;
  bool shared_classifier = true;
};

// Reads and validates the header: sizes positive, heads divide dim, kv heads divide heads,
// and the file exactly as long as the header implies (base::FormatError otherwise, naming the
// path and the sizes). llama2.c's newer exports (magic "ak42") throw base::Unsupported.
Llama2cCheckpoint read_llama2c_checkpoint(const std::string& path);

// True when the file starts with a plausible version-0 llama2.c header (all seven ints in
// range, heads dividing dim); the reader then checks the size the header implies.
bool looks_like_llama2c(const std::string& path);

}  // namespace lm
