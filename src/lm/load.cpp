#include "lm/load.h"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "base/error.h"
#include "lm/arch/gemma2_hparams.h"
#include "lm/arch/gemma3_hparams.h"
#include "lm/arch/lfm2_load.h"
#include "lm/arch/llama_model.h"
#include "lm/arch/moe_gguf.h"
#include "lm/arch/phi3_weights.h"
#include "lm/arch/sliding_window_hparams.h"
#include "lm/gguf/gguf_file.h"
#include "lm/weights/float_tensor.h"
#include "lm/llama2c/llama2c_reader.h"
#include "lm/weights/dequantize.h"

namespace lm {

namespace {

// Architectures that share the llama block; they differ in RoPE pairing and in optional
// tensors (qwen2: q/k/v biases; qwen3: per-head q/k RMSNorm; gemma3: q/k RMSNorm, sandwich
// norms, GeGLU and local/global layers, lm/arch/gemma3_hparams.h; phi3: fused QKV and gate/up
// tensors, lm/arch/phi3_weights.h; gemma2: soft-capping and local/global layers,
// lm/arch/gemma2_hparams.h).
bool is_llama_family(const std::string& arch) {
  return arch == "llama" || arch == "qwen2" || arch == "qwen3" || arch == "gemma2" || arch == "gemma3" ||
         arch == "phi3" || moe_architecture_supported(arch);
}

std::vector<float> read_optional_vector(const gguf::GgufFile& file, const std::string& name) {
  return file.find_tensor(name) ? read_float_tensor(file, name) : std::vector<float>{};
}

int32_t metadata_int(const gguf::GgufFile& file, const std::string& key) {
  const int64_t v = file.require_int(key);
  if (v <= 0 || v > (int64_t{1} << 30)) {
    throw base::FormatError("GGUF file '" + file.path() + "': metadata '" + key + "' = " + std::to_string(v) +
                            " is out of range");
  }
  return static_cast<int32_t>(v);
}

// --ctx overrides the file's context length, downwards only: positions past what the model was
// trained for are not meaningful (the eval commands refuse them too).
void apply_context_length(const LoadOptions& options, int64_t& context_length) {
  if (!options.context_length) return;
  if (context_length > 0 && *options.context_length > context_length) {
    throw base::InvalidArgument("ctx " + std::to_string(*options.context_length) +
                                " exceeds the model's context length " + std::to_string(context_length));
  }
  context_length = *options.context_length;
}

// The file's own tokenizer, or the one --tokenizer names (a GGUF or a llama2.c tokenizer file).
std::shared_ptr<Tokenizer> gguf_model_tokenizer(const gguf::GgufFile& file, int vocab_size,
                                                const LoadOptions& options) {
  TokenizerVocab vocab;
  if (options.tokenizer_path) {
    if (gguf::GgufFile::has_magic(*options.tokenizer_path)) {
      vocab = read_gguf_vocab(*gguf::GgufFile::open(*options.tokenizer_path));
    } else {
      vocab = read_llama2c_tokenizer(*options.tokenizer_path, vocab_size);
    }
  } else {
    vocab = read_gguf_vocab(file);
  }
  return make_tokenizer(std::move(vocab));
}

LoadedModel load_gguf(const std::string& path, const LoadOptions& options) {
  const auto file = gguf::GgufFile::open(path);
  const std::string arch = file->get_string("general.architecture").value_or("");
  if (arch.empty()) throw base::FormatError("GGUF file '" + path + "' lacks general.architecture");
  if (arch == "lfm2") {  // hybrid conv/attention layers, lm/arch/lfm2_load.h
    std::shared_ptr<LlamaModel> model = load_lfm2_model(*file, options);
    return {model, gguf_model_tokenizer(*file, model->config().vocab_size, options)};
  }
  if (!is_llama_family(arch)) {
    throw base::Unsupported(
        "GGUF file '" + path + "': architecture '" + arch +
        "' is not supported (supported: llama, qwen2, qwen3, gemma2, gemma3, phi3, qwen3moe, lfm2)");
  }
  const std::string p = arch + ".";
  if (file->find_tensor("blk.0.ffn_gate_inp.weight") && !moe_architecture_supported(arch)) {
    throw base::Unsupported("GGUF file '" + path + "': mixture-of-experts " + arch + " models are not supported");
  }
  if (file->find_tensor("rope_freqs.weight")) {
    throw base::Unsupported("GGUF file '" + path + "': per-frequency RoPE factors (rope_freqs) are not supported");
  }
  if (auto scaling = file->get_string(p + "rope.scaling.type"); scaling && *scaling != "none") {
    throw base::Unsupported("GGUF file '" + path + "': RoPE scaling '" + *scaling + "' is not supported");
  }

  ModelConfig c;
  c.architecture = arch;
  c.name = file->get_string("general.name").value_or(std::filesystem::path(path).stem().string());
  c.n_layers = metadata_int(*file, p + "block_count");
  c.dim = metadata_int(*file, p + "embedding_length");
  c.hidden_dim = metadata_int(*file, p + "feed_forward_length");
  c.n_heads = metadata_int(*file, p + "attention.head_count");
  c.n_kv_heads =
      file->find(p + "attention.head_count_kv") ? metadata_int(*file, p + "attention.head_count_kv") : c.n_heads;
  c.head_dim =
      file->find(p + "attention.key_length") ? metadata_int(*file, p + "attention.key_length") : c.dim / c.n_heads;
  if (auto vlen = file->get_int(p + "attention.value_length"); vlen && *vlen != c.head_dim) {
    throw base::Unsupported("GGUF file '" + path + "': value head size " + std::to_string(*vlen) +
                            " differs from key head size " + std::to_string(c.head_dim));
  }
  c.context_length = file->get_int(p + "context_length").value_or(0);
  c.rope_theta = static_cast<float>(file->get_float(p + "rope.freq_base").value_or(10000.0));
  c.norm_eps = static_cast<float>(file->get_float(p + "attention.layer_norm_rms_epsilon").value_or(1e-5));

  LlamaHyperParams hyper;
  hyper.rope_style = arch == "llama" ? kernels::RopeStyle::kNormal : kernels::RopeStyle::kNeox;
  hyper.rope_dim = file->find(p + "rope.dimension_count") ? metadata_int(*file, p + "rope.dimension_count") : 0;
  if (hyper.rope_dim < 0 || hyper.rope_dim > c.head_dim || hyper.rope_dim % 2 != 0) {
    // Rotated in pairs, within one head: anything else was clamped silently before.
    throw base::FormatError("GGUF file '" + path + "': " + p + "rope.dimension_count " +
                            std::to_string(hyper.rope_dim) + " must be even and at most the head size " +
                            std::to_string(c.head_dim));
  }
  if (arch == "gemma3") apply_gemma3_hparams(*file, c, hyper);
  if (arch == "gemma2") apply_gemma2_hparams(*file, c, hyper);
  if (arch == "llama" || arch == "phi3") apply_uniform_sliding_window(*file, arch, c, hyper);  // Mistral, Phi-3
  if (arch == "phi3") check_phi3_supported(*file);

  LlamaWeights w;
  w.token_embedding = file->weight("token_embd.weight");
  c.vocab_size = static_cast<int>(w.token_embedding.rows);
  if (auto v = file->get_int(p + "vocab_size"); v && *v != c.vocab_size) {
    throw base::FormatError("GGUF file '" + path + "': " + p + "vocab_size " + std::to_string(*v) +
                            " disagrees with token_embd.weight rows " + std::to_string(c.vocab_size));
  }
  w.output_norm = read_float_tensor(*file, "output_norm.weight");
  // Tied head (SmolLM2, stories260K's llama2.c origin) when output.weight is absent.
  w.output = file->find_tensor("output.weight") ? file->weight("output.weight") : w.token_embedding;
  w.layers.resize(static_cast<std::size_t>(c.n_layers));
  for (int l = 0; l < c.n_layers; ++l) {
    const std::string b = "blk." + std::to_string(l) + ".";
    LlamaLayerWeights& lw = w.layers[l];
    if (arch == "phi3") {  // fused attn_qkv and gate/up
      read_phi3_layer(*file, c, b, lw);
      continue;
    }
    lw.attn_norm = read_float_tensor(*file, b + "attn_norm.weight");
    lw.wq = file->weight(b + "attn_q.weight");
    lw.wk = file->weight(b + "attn_k.weight");
    lw.wv = file->weight(b + "attn_v.weight");
    lw.wo = file->weight(b + "attn_output.weight");
    lw.bq = read_optional_vector(*file, b + "attn_q.bias");
    lw.bk = read_optional_vector(*file, b + "attn_k.bias");
    lw.bv = read_optional_vector(*file, b + "attn_v.bias");
    lw.q_norm = read_optional_vector(*file, b + "attn_q_norm.weight");
    lw.k_norm = read_optional_vector(*file, b + "attn_k_norm.weight");
    lw.attn_post_norm = read_optional_vector(*file, b + "post_attention_norm.weight");
    lw.ffn_norm = read_float_tensor(*file, b + "ffn_norm.weight");
    lw.ffn_post_norm = read_optional_vector(*file, b + "post_ffw_norm.weight");
    if (file->find_tensor(b + "ffn_gate_inp.weight")) {  // routed experts (lm/arch/moe_gguf.h)
      lw.moe = load_moe_layer(*file, arch, b);
      continue;
    }
    lw.w_gate = file->weight(b + "ffn_gate.weight");
    lw.w_up = file->weight(b + "ffn_up.weight");
    lw.w_down = file->weight(b + "ffn_down.weight");
  }
  apply_context_length(options, c.context_length);

  LoadedModel out;
  try {
    out.model = std::make_shared<LlamaModel>(
        c, hyper, std::move(w), LlamaRuntimeOptions{options.kv_type, options.threads, options.i16_activations});
  } catch (const base::FormatError& e) {
    throw base::FormatError("GGUF file '" + path + "': " + e.what());
  }

  out.tokenizer = gguf_model_tokenizer(*file, c.vocab_size, options);
  return out;
}

std::string find_llama2c_tokenizer(const std::string& model_path, int vocab_size, const LoadOptions& options) {
  if (options.tokenizer_path) return *options.tokenizer_path;
  const auto dir = std::filesystem::path(model_path).parent_path();
  for (const std::string& name : {std::string("tokenizer.bin"), "tok" + std::to_string(vocab_size) + ".bin"}) {
    const auto candidate = dir / name;
    if (std::filesystem::is_regular_file(candidate)) return candidate.string();
  }
  throw base::FormatError("llama2.c checkpoint '" + model_path +
                          "' needs a tokenizer file: none of tokenizer.bin, tok" + std::to_string(vocab_size) +
                          ".bin is next to it; pass one with --tokenizer");
}

LoadedModel load_llama2c(const std::string& path, const LoadOptions& options) {
  Llama2cCheckpoint ck = read_llama2c_checkpoint(path);
  apply_context_length(options, ck.config.context_length);
  const std::string tokenizer_path = find_llama2c_tokenizer(path, ck.config.vocab_size, options);
  LoadedModel out;
  out.model =
      std::make_shared<LlamaModel>(ck.config, ck.hyper, std::move(ck.weights),
                                   LlamaRuntimeOptions{options.kv_type, options.threads, options.i16_activations});
  out.tokenizer = make_tokenizer(read_llama2c_tokenizer(tokenizer_path, ck.config.vocab_size));
  return out;
}

}  // namespace

TokenizerVocab read_gguf_vocab(const gguf::GgufFile& file) {
  TokenizerVocab vocab;
  const auto fail = [&](const std::string& what) {
    return base::FormatError("GGUF file '" + file.path() + "': " + what);
  };
  vocab.model = file.get_string("tokenizer.ggml.model").value_or("");
  if (vocab.model.empty()) throw fail("no tokenizer (tokenizer.ggml.model is missing)");
  vocab.pre = file.get_string("tokenizer.ggml.pre").value_or("default");
  const gguf::Value* tokens = file.find("tokenizer.ggml.tokens");
  if (!tokens || !tokens->is_array() || tokens->array_type != gguf::ValueType::STRING) {
    throw fail("tokenizer.ggml.tokens is missing or not an array of strings");
  }
  vocab.tokens = tokens->strings;
  const std::size_t n = vocab.tokens.size();
  if (const gguf::Value* scores = file.find("tokenizer.ggml.scores")) {
    if (!scores->is_array() || scores->array_size() != n || !gguf::is_float_type(scores->array_type)) {
      throw fail("tokenizer.ggml.scores must be " + std::to_string(n) + " floats");
    }
    vocab.scores.assign(scores->numbers.begin(), scores->numbers.end());
  }
  if (const gguf::Value* types = file.find("tokenizer.ggml.token_type")) {
    if (!types->is_array() || types->array_size() != n || !gguf::is_integer_type(types->array_type)) {
      throw fail("tokenizer.ggml.token_type must be " + std::to_string(n) + " integers");
    }
    vocab.token_types.reserve(n);
    for (int64_t t : types->integers) vocab.token_types.push_back(static_cast<TokenType>(t));
  }
  if (const gguf::Value* merges = file.find("tokenizer.ggml.merges")) {
    if (!merges->is_array() || merges->array_type != gguf::ValueType::STRING) {
      throw fail("tokenizer.ggml.merges must be an array of strings");
    }
    vocab.merges = merges->strings;
  }
  // Token ids: llama.cpp writes u32 -1 for "none"; anything outside the vocabulary is absent.
  const auto id = [&](const std::string& key) -> std::optional<int32_t> {
    const auto v = file.get_int(key);
    if (!v || *v < 0 || *v >= static_cast<int64_t>(n)) return std::nullopt;
    return static_cast<int32_t>(*v);
  };
  vocab.bos_id = id("tokenizer.ggml.bos_token_id");
  vocab.eos_id = id("tokenizer.ggml.eos_token_id");
  vocab.unk_id = id("tokenizer.ggml.unknown_token_id");
  vocab.pad_id = id("tokenizer.ggml.padding_token_id");
  vocab.eot_id = id("tokenizer.ggml.eot_token_id");
  const bool spm = vocab.model == "llama";
  vocab.add_bos = file.get_bool("tokenizer.ggml.add_bos_token").value_or(spm);
  vocab.add_space_prefix = file.get_bool("tokenizer.ggml.add_space_prefix").value_or(spm);
  vocab.chat_template = file.get_string("tokenizer.chat_template").value_or("");
  return vocab;
}

LoadedModel load(const std::string& path, const LoadOptions& options) {
  if (options.threads < 0) {
    throw base::InvalidArgument("threads must be >= 0 (0 = all cores), got " + std::to_string(options.threads));
  }
  if (options.context_length && *options.context_length <= 0) {
    throw base::InvalidArgument("context length must be positive, got " + std::to_string(*options.context_length));
  }
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) throw base::FormatError("model file '" + path + "' does not exist");
  if (!std::filesystem::is_regular_file(path, ec)) throw base::FormatError("model path '" + path + "' is not a file");
  if (gguf::GgufFile::has_magic(path)) return load_gguf(path, options);
  {
    std::ifstream in(path, std::ios::binary);
    char magic[4] = {};
    in.read(magic, 4);
    if (in && std::memcmp(magic, "24ka", 4) == 0)
      return load_llama2c(path, options);  // "ak42" LE: reader names version
  }
  if (looks_like_llama2c(path)) return load_llama2c(path, options);
  throw base::FormatError("model file '" + path +
                          "' is neither GGUF (no 'GGUF' magic) nor a llama2.c checkpoint (header and size disagree)");
}

}  // namespace lm
