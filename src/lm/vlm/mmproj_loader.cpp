// load_mmproj: llama.cpp's `mmproj` GGUF (general.architecture = "clip") -> vision tower +
// projector. Metadata keys and tensor names are llama.cpp's (tools/mtmd/clip-impl.h):
//   clip.projector_type ("mlp" when absent, as llama.cpp assumes for old LLaVA files),
//   clip.has_vision_encoder, clip.use_gelu, clip.vision.{image_size, patch_size,
//   embedding_length, feed_forward_length, block_count, attention.head_count,
//   attention.layer_norm_epsilon, image_mean, image_std, feature_layer};
//   v.patch_embd.weight [P, P, 3, D] (+ .bias), v.class_embd, v.position_embd.weight,
//   v.pre_ln.*, v.post_ln.*, v.blk.N.{attn_q, attn_k, attn_v, attn_out, ln1, ln2, ffn_up,
//   ffn_down}.{weight, bias}; the LLaVA projector mm.0.* and mm.2.*; the Idefics3 / SmolVLM
//   connector mm.model.fc.weight with clip.vision.projector.scale_factor.
#include <filesystem>
#include <string>

#include "base/error.h"
#include "lm/gguf/gguf_file.h"
#include "lm/vlm/vision_language_model.h"
#include "lm/weights/dequantize.h"

namespace lm {

namespace {

std::vector<float> read_vector(const gguf::GgufFile& file, const std::string& name, bool required) {
  const gguf::TensorInfo* t = file.find_tensor(name);
  if (!t) {
    if (required) file.tensor(name);  // throws, naming the file and the tensor
    return {};
  }
  if (t->type != GgmlType::F32 && t->type != GgmlType::F16 && t->type != GgmlType::BF16) {
    throw base::Unsupported("mmproj '" + file.path() + "': tensor '" + name + "' has type " + ggml_type_name(t->type) +
                            " (expected F32, F16 or BF16)");
  }
  std::vector<float> v(static_cast<std::size_t>(t->numel()));
  dequantize_row(t->type, file.tensor_data(*t), v.data(), t->numel());
  return v;
}

int positive_int(const gguf::GgufFile& file, const std::string& key) {
  const int64_t v = file.require_int(key);
  if (v <= 0 || v > (int64_t{1} << 24)) {
    throw base::FormatError("mmproj '" + file.path() + "': metadata '" + key + "' = " + std::to_string(v) +
                            " is out of range");
  }
  return static_cast<int>(v);
}

void read_triple(const gguf::GgufFile& file, const std::string& key, float out[3]) {
  const gguf::Value* v = file.find(key);
  if (!v) return;  // llama.cpp's default: 0.5 / 0.5
  if (!v->is_array() || v->numbers.size() != 3) {
    throw base::FormatError("mmproj '" + file.path() + "': metadata '" + key + "' must be 3 floats (R, G, B)");
  }
  for (int c = 0; c < 3; ++c) out[c] = static_cast<float>(v->numbers[c]);
}

// The 4-D patch convolution [P, P, 3, D] as a [D rows, 3 * P * P cols] matrix: each output
// channel's kernel is contiguous in (channel, y, x) order.
WeightMatrix patch_matrix(const gguf::GgufFile& file) {
  const gguf::TensorInfo& t = file.tensor("v.patch_embd.weight");
  if (t.ne.size() != 4) {
    throw base::FormatError("mmproj '" + file.path() + "': tensor 'v.patch_embd.weight' has " +
                            std::to_string(t.ne.size()) + " dimensions, expected 4 (patch, patch, 3, width)");
  }
  return WeightMatrix::view(t.type, t.ne[3], t.ne[0] * t.ne[1] * t.ne[2], file.tensor_data(t), file.mapping(),
                            "v.patch_embd.weight");
}

}  // namespace

VisionModules load_mmproj(const std::string& path, int threads) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) throw base::FormatError("mmproj file '" + path + "' does not exist");
  if (!std::filesystem::is_regular_file(path, ec)) throw base::FormatError("mmproj path '" + path + "' is not a file");
  if (!gguf::GgufFile::has_magic(path)) throw base::FormatError("mmproj file '" + path + "' is not a GGUF file");
  const auto file = gguf::GgufFile::open(path);
  const std::string arch = file->get_string("general.architecture").value_or("");
  if (arch != "clip") {
    throw base::FormatError("mmproj file '" + path + "' has general.architecture '" + arch +
                            "', expected 'clip' (is this the text model?)");
  }
  if (!file->get_bool("clip.has_vision_encoder").value_or(false)) {
    throw base::Unsupported("mmproj file '" + path +
                            "' has no vision encoder (audio-only projectors are not supported)");
  }
  const std::string projector_type = file->get_string("clip.projector_type").value_or("mlp");
  if (projector_type != "mlp" && projector_type != "idefics3") {
    throw base::Unsupported("mmproj file '" + path + "': projector type '" + projector_type +
                            "' is not supported (supported: mlp — LLaVA; idefics3 — SmolVLM, Idefics3)");
  }
  const bool idefics3 = projector_type == "idefics3";

  try {
    ClipVisionConfig c;
    c.image_size = positive_int(*file, "clip.vision.image_size");
    c.patch_size = positive_int(*file, "clip.vision.patch_size");
    c.dim = positive_int(*file, "clip.vision.embedding_length");
    c.ffn_dim = positive_int(*file, "clip.vision.feed_forward_length");
    c.n_heads = positive_int(*file, "clip.vision.attention.head_count");
    c.n_layers = positive_int(*file, "clip.vision.block_count");
    c.norm_eps = static_cast<float>(file->get_float("clip.vision.attention.layer_norm_epsilon").value_or(1e-6));
    // llama.cpp: use_gelu -> ggml_gelu (the tanh form), else quick GELU (CLIP ViT-L's).
    c.activation =
        file->get_bool("clip.use_gelu").value_or(false) ? VisionActivation::kGeluTanh : VisionActivation::kQuickGelu;
    if (const gguf::Value* layers = file->find("clip.vision.feature_layer")) {
      if (!layers->is_array() || layers->integers.empty()) {
        throw base::FormatError("metadata 'clip.vision.feature_layer' must be a non-empty integer array");
      }
      for (int64_t k : layers->integers) c.feature_layers.push_back(static_cast<int>(k));
    } else if (!idefics3) {
      c.skip_last_blocks = 1;  // LLaVA's second-to-last hidden state
    }
    // SigLIP towers (idefics3) run every block then the post-norm; images are fitted and
    // padded to the square input, as llama.cpp does (no tiling).
    if (idefics3) c.fit = ImageFit::kResizeAndPad;
    read_triple(*file, "clip.vision.image_mean", c.image_mean);
    read_triple(*file, "clip.vision.image_std", c.image_std);

    ClipVisionWeights w;
    w.patch = patch_matrix(*file);
    w.patch_bias = read_vector(*file, "v.patch_embd.bias", false);
    w.class_embedding = read_vector(*file, "v.class_embd", false);
    w.position = file->weight("v.position_embd.weight");
    w.pre_ln_w = read_vector(*file, "v.pre_ln.weight", false);
    w.pre_ln_b = read_vector(*file, "v.pre_ln.bias", false);
    w.post_ln_w = read_vector(*file, "v.post_ln.weight", false);
    w.post_ln_b = read_vector(*file, "v.post_ln.bias", false);
    w.layers.resize(static_cast<std::size_t>(c.n_layers));
    for (int l = 0; l < c.n_layers; ++l) {
      const std::string b = "v.blk." + std::to_string(l) + ".";
      ClipLayerWeights& lw = w.layers[l];
      lw.ln1_w = read_vector(*file, b + "ln1.weight", true);
      lw.ln1_b = read_vector(*file, b + "ln1.bias", false);
      lw.ln2_w = read_vector(*file, b + "ln2.weight", true);
      lw.ln2_b = read_vector(*file, b + "ln2.bias", false);
      lw.wq = file->weight(b + "attn_q.weight");
      lw.wk = file->weight(b + "attn_k.weight");
      lw.wv = file->weight(b + "attn_v.weight");
      lw.wo = file->weight(b + "attn_out.weight");
      lw.bq = read_vector(*file, b + "attn_q.bias", false);
      lw.bk = read_vector(*file, b + "attn_k.bias", false);
      lw.bv = read_vector(*file, b + "attn_v.bias", false);
      lw.bo = read_vector(*file, b + "attn_out.bias", false);
      lw.fc1 = file->weight(b + "ffn_up.weight");
      lw.fc2 = file->weight(b + "ffn_down.weight");
      lw.b1 = read_vector(*file, b + "ffn_up.bias", false);
      lw.b2 = read_vector(*file, b + "ffn_down.bias", false);
      // Older LLaVA conversions named CLIP's fc1 'ffn_down' and fc2 'ffn_up'; the shapes tell
      // (fc1 reads the tower's width), as llama.cpp decides.
      if (lw.fc1.cols != c.dim && lw.fc2.cols == c.dim) {
        std::swap(lw.fc1, lw.fc2);
        std::swap(lw.b1, lw.b2);
      }
    }
    VisionModules out;
    const int side = c.patches_per_side();
    // One pool for the tower and the projector (they never run at the same time).
    const auto pool = std::make_shared<base::ThreadPool>(threads);
    out.tower = std::make_shared<ClipVisionTower>(std::move(c), std::move(w), pool);
    if (idefics3) {
      const int64_t scale = file->get_int("clip.vision.projector.scale_factor").value_or(2);
      if (scale <= 0 || scale > 64) {
        throw base::FormatError("metadata 'clip.vision.projector.scale_factor' = " + std::to_string(scale) +
                                " is out of range");
      }
      out.projector = std::make_shared<PixelShuffleProjector>(file->weight("mm.model.fc.weight"),
                                                              static_cast<int>(scale), side, pool);
      return out;
    }
    out.projector =
        std::make_shared<MlpProjector>(file->weight("mm.0.weight"), read_vector(*file, "mm.0.bias", false),
                                       file->find_tensor("mm.2.weight") ? file->weight("mm.2.weight") : WeightMatrix{},
                                       read_vector(*file, "mm.2.bias", false), pool);
    return out;
  } catch (const base::FormatError& e) {
    const std::string what = e.what();
    if (what.find(path) != std::string::npos) throw;
    throw base::FormatError("mmproj '" + path + "': " + what);
  }
}

}  // namespace lm
