// The LLaVA path (CLIP tower + MLP projector + llama) against transformers'
// LlavaForConditionalGeneration: tools/reference/hf/make_llava.py built a tiny random-weight
// model, wrote it as llama.cpp users hold one (text GGUF + mmproj GGUF) with a test PNG, and
// recorded transformers' float32 logits for BOS + 16 image rows + a prompt and its greedy
// continuation. Matrices were rounded to f16 before transformers ran, so both sides compute the
// same function from the same numbers; what is left is float rounding in a different order.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "lm/generate.h"
#include "lm/vlm/image.h"
#include "lm/vlm/vision_language_model.h"
#include "lm/vlm/vlm_generate.h"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const fs::path kDir = fs::path(VQ_SOURCE_DIR) / "tests/fixtures/reference/hf";

struct Fixture {
  json meta;
  std::vector<float> logits;
  std::string text_gguf, mmproj, image;

  Fixture() {
    std::ifstream in(kDir / "llava_tiny.json");
    meta = json::parse(in);
    text_gguf = (kDir / meta.at("text_gguf").get<std::string>()).string();
    mmproj = (kDir / meta.at("mmproj_gguf").get<std::string>()).string();
    image = (kDir / meta.at("image").get<std::string>()).string();
    const std::size_t count = meta.at("tokens").size() * meta.at("vocab_size").get<std::size_t>();
    logits.resize(count);
    std::ifstream lin(kDir / meta.at("logits_file").get<std::string>(), std::ios::binary);
    lin.read(reinterpret_cast<char*>(logits.data()), static_cast<std::streamsize>(count * sizeof(float)));
    EXPECT_EQ(lin.gcount(), static_cast<std::streamsize>(count * sizeof(float)));
  }
};

// The reference settings: f32 KV cache and f32 activations everywhere.
lm::LoadedVisionLanguageModel load_reference(const Fixture& f) {
  lm::LoadOptions options;
  options.kv_type = lm::KVCacheType::F32;
  options.i16_activations = false;
  options.threads = 1;
  return lm::load_vision_language_model(f.text_gguf, f.mmproj, options);
}

// Input embeddings of the whole prompt: token rows, image rows at the image positions.
std::vector<float> prompt_embeddings(const lm::VisionLanguageModel& model, const lm::VlmPrompt& prompt) {
  const int64_t dim = model.config().dim;
  std::vector<float> out(prompt.tokens.size() * static_cast<std::size_t>(dim));
  model.language_model()->embed_tokens(prompt.tokens, out.data());
  for (std::size_t t = 0; t < prompt.tokens.size(); ++t) {
    if (prompt.image_row[t] >= 0) {
      std::copy_n(prompt.image_rows.begin() + prompt.image_row[t] * dim, dim,
                  out.begin() + static_cast<std::ptrdiff_t>(t * dim));
    }
  }
  return out;
}

TEST(LlavaReference, PngDecodesToTheGeneratorsPixels) {
  Fixture f;
  const lm::RgbImage image = lm::load_image(f.image);
  ASSERT_EQ(image.width, 32);
  ASSERT_EQ(image.height, 32);
  // make_llava.py's test_image(): the yellow disc around (20, 11), the dark bar in rows 24..27.
  EXPECT_EQ(image.at(20, 11, 0), 250);
  EXPECT_EQ(image.at(20, 11, 1), 240);
  EXPECT_EQ(image.at(20, 11, 2), 30);
  EXPECT_EQ(image.at(10, 25, 2), 90);
  EXPECT_EQ(image.at(0, 0, 0), 0);     // the red ramp starts at 0 ...
  EXPECT_EQ(image.at(31, 0, 0), 255);  // ... and ends at 255
  // The tower's normalisation equals the generator's pixel_values at (0, 0).
  auto loaded = load_reference(f);
  const lm::ClipVisionConfig& c = loaded.model->vision_tower().config();
  const std::vector<float> chw = lm::normalize_to_chw(image, c.image_mean, c.image_std);
  const auto first = f.meta.at("pixel_values_first").get<std::vector<float>>();
  for (int ch = 0; ch < 3; ++ch) EXPECT_NEAR(chw[static_cast<std::size_t>(ch) * 32 * 32], first[ch], 1e-6f);
}

TEST(LlavaReference, JpegDecodesCloseToThePng) {
  // llava_tiny.jpg is the same pixels through cjpeg (quality 90, no chroma subsampling): the
  // decoder must give the image back within JPEG's loss.
  Fixture f;
  const lm::RgbImage png = lm::load_image(f.image);
  const lm::RgbImage jpg = lm::load_image((kDir / "llava_tiny.jpg").string());
  ASSERT_EQ(jpg.width, png.width);
  ASSERT_EQ(jpg.height, png.height);
  double sum = 0.0;
  int worst = 0;
  for (std::size_t i = 0; i < png.pixels.size(); ++i) {
    const int d = std::abs(static_cast<int>(png.pixels[i]) - static_cast<int>(jpg.pixels[i]));
    sum += d;
    worst = std::max(worst, d);
  }
  const double mean = sum / static_cast<double>(png.pixels.size());
  std::cout << "[jpeg] mean |jpg - png| = " << mean << ", max " << worst << "\n";
  EXPECT_LT(mean, 4.0);
  EXPECT_LT(worst, 64);
  EXPECT_NEAR(jpg.at(20, 11, 0), 250, 12);  // inside the yellow disc
  EXPECT_NEAR(jpg.at(20, 11, 2), 30, 12);
}

TEST(LlavaReference, PromptLayoutMatchesTransformers) {
  Fixture f;
  auto loaded = load_reference(f);
  const lm::VlmPrompt prompt =
      lm::build_vlm_prompt(*loaded.model, *loaded.tokenizer, f.meta.at("prompt"), {lm::load_image(f.image)});
  const auto expected = f.meta.at("tokens").get<std::vector<int32_t>>();
  const int32_t image_id = f.meta.at("image_token_id");
  ASSERT_EQ(prompt.tokens.size(), expected.size());
  EXPECT_EQ(prompt.image_tokens, f.meta.at("n_image_tokens").get<int64_t>());
  EXPECT_EQ(loaded.model->tokens_per_image(), 16);
  for (std::size_t t = 0; t < expected.size(); ++t) {
    if (expected[t] == image_id) {
      EXPECT_GE(prompt.image_row[t], 0) << "position " << t;
    } else {
      EXPECT_EQ(prompt.tokens[t], expected[t]) << "position " << t;
      EXPECT_EQ(prompt.image_row[t], -1) << "position " << t;
    }
  }
}

TEST(LlavaReference, LogitsMatchTransformers) {
  Fixture f;
  auto loaded = load_reference(f);
  const lm::VlmPrompt prompt =
      lm::build_vlm_prompt(*loaded.model, *loaded.tokenizer, f.meta.at("prompt"), {lm::load_image(f.image)});
  const std::vector<float> emb = prompt_embeddings(*loaded.model, prompt);
  lm::CacheList caches = loaded.model->language_model()->native_make_cache();
  std::vector<float> last, all;
  loaded.model->forward_embeddings(emb.data(), static_cast<int64_t>(prompt.tokens.size()), caches, last, &all);
  ASSERT_EQ(all.size(), f.logits.size());
  double max_abs = 0.0, max_ref = 0.0;
  for (std::size_t i = 0; i < all.size(); ++i) {
    max_abs = std::max(max_abs, static_cast<double>(std::fabs(all[i] - f.logits[i])));
    max_ref = std::max(max_ref, static_cast<double>(std::fabs(f.logits[i])));
  }
  const double spread = f.meta.at("f32_vs_f64").at("max_abs").get<double>();
  std::cout << "[llava] max |lm - transformers| = " << max_abs << " over logits up to " << max_ref
            << " (transformers f32 vs f64: " << spread << ")\n";
  // Stated tolerance: 1e-4 absolute on logits of magnitude ~10 (measured 1.2e-5, about transformers'
  // own f32-vs-f64 spread of 1.2e-5), far below what one wrong tensor, a mishandled class token or the
  // wrong feature layer does (those move logits by whole units; another image moves them by 13).
  EXPECT_LT(max_abs, 1e-4);
  // Every position's top-1 agrees.
  const std::size_t vocab = f.meta.at("vocab_size");
  for (std::size_t t = 0; t < prompt.tokens.size(); ++t) {
    const auto row = [&](const std::vector<float>& v) {
      return std::max_element(v.begin() + t * vocab, v.begin() + (t + 1) * vocab) - (v.begin() + t * vocab);
    };
    EXPECT_EQ(row(all), row(f.logits)) << "position " << t;
  }
}

TEST(LlavaReference, GreedyTokensEqualTransformers) {
  Fixture f;
  auto loaded = load_reference(f);
  const lm::VlmPrompt prompt =
      lm::build_vlm_prompt(*loaded.model, *loaded.tokenizer, f.meta.at("prompt"), {lm::load_image(f.image)});
  const auto expected = f.meta.at("greedy").get<std::vector<int32_t>>();
  lm::GenerateOptions options;
  options.max_tokens = static_cast<int>(expected.size());
  options.prefill_step_size = 7;  // image rows split across prefill chunks
  std::vector<int32_t> got;
  lm::stream_generate(*loaded.model, *loaded.tokenizer, prompt, options, [&](const lm::GenerationChunk& c) {
    if (c.token >= 0) got.push_back(c.token);
    return true;
  });
  EXPECT_EQ(got, expected);
}

TEST(LlavaReference, WithoutTheImageTheAnswerDiffers) {
  // Guards the test itself: the image must change the logits, or the checks above would pass
  // with a broken tower.
  Fixture f;
  auto loaded = load_reference(f);
  lm::RgbImage inverted = lm::load_image(f.image);
  for (auto& p : inverted.pixels) p = static_cast<uint8_t>(255 - p);
  const lm::VlmPrompt a =
      lm::build_vlm_prompt(*loaded.model, *loaded.tokenizer, f.meta.at("prompt"), {lm::load_image(f.image)});
  const lm::VlmPrompt b = lm::build_vlm_prompt(*loaded.model, *loaded.tokenizer, f.meta.at("prompt"), {inverted});
  double diff = 0.0;
  for (std::size_t i = 0; i < a.image_rows.size(); ++i)
    diff = std::max(diff, static_cast<double>(std::fabs(a.image_rows[i] - b.image_rows[i])));
  EXPECT_GT(diff, 0.1);
}

TEST(LlavaReference, MarkersPlaceImagesAndMustMatchTheImageCount) {
  Fixture f;
  auto loaded = load_reference(f);
  const lm::RgbImage image = lm::load_image(f.image);
  const lm::VlmPrompt p =
      lm::build_vlm_prompt(*loaded.model, *loaded.tokenizer, "Look<image> and <__media__>.", {image, image});
  EXPECT_EQ(p.images, 2);
  EXPECT_EQ(p.image_tokens, 32);
  // BOS, "Look" pieces, 16 image rows, " and" pieces, 16 image rows, "." pieces.
  EXPECT_EQ(p.image_row.front(), -1);
  EXPECT_EQ(p.image_row.back(), -1);
  const auto first_image = std::find_if(p.image_row.begin(), p.image_row.end(), [](int64_t r) { return r >= 0; });
  EXPECT_GT(first_image - p.image_row.begin(), 1);
  EXPECT_THROW(lm::build_vlm_prompt(*loaded.model, *loaded.tokenizer, "one <image>", {image, image}),
               base::InvalidArgument);
}

TEST(LlavaReference, BadFilesGiveClearErrors) {
  Fixture f;
  const fs::path tmp = fs::temp_directory_path() / "vq_llava_bad";
  fs::create_directories(tmp);
  const auto expect_format_error = [](auto&& call, const std::string& needle) {
    try {
      call();
      ADD_FAILURE() << "no error, expected one mentioning '" << needle << "'";
    } catch (const base::FormatError& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  expect_format_error([&] { lm::load_image((tmp / "missing.png").string()); }, "does not exist");
  const std::string corrupt = (tmp / "corrupt.png").string();
  {
    std::ofstream out(corrupt, std::ios::binary);
    out << "\x89PNG\r\n\x1a\n not really a png";
  }
  expect_format_error([&] { lm::load_image(corrupt); }, corrupt);
  // A truncated copy of the real PNG.
  const std::string truncated = (tmp / "truncated.png").string();
  {
    std::ifstream in(f.image, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::ofstream(truncated, std::ios::binary) << bytes.substr(0, bytes.size() / 2);
  }
  expect_format_error([&] { lm::load_image(truncated); }, "cannot be decoded");
  // A valid PNG header declaring 17000 x 17000 pixels (within stb_image's own limit): refused from the header, nothing
  // allocated.
  const std::string huge = (tmp / "huge.png").string();
  {
    std::ifstream in(f.image, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const auto put_be32 = [&](std::size_t at, uint32_t v) {
      for (int i = 0; i < 4; ++i) bytes[at + i] = static_cast<char>((v >> (24 - 8 * i)) & 0xFF);
    };
    put_be32(16, 17000);  // IHDR width
    put_be32(20, 17000);  // IHDR height (the chunk CRC no longer matches; stb does not check it)
    std::ofstream(huge, std::ios::binary) << bytes;
  }
  expect_format_error([&] { lm::load_image(huge); }, "at most 16384 per side");
  expect_format_error([&] { lm::load_mmproj((tmp / "missing.gguf").string()); }, "does not exist");
  expect_format_error([&] { lm::load_mmproj(corrupt); }, "not a GGUF");
  expect_format_error([&] { lm::load_mmproj(f.text_gguf); }, "expected 'clip'");
}

TEST(ImageResize, SameSizeIsIdentityAndShrinkingAverages) {
  lm::RgbImage img{4, 2, std::vector<uint8_t>(std::size_t{4} * 2 * 3)};
  for (std::size_t i = 0; i < img.pixels.size(); ++i) img.pixels[i] = static_cast<uint8_t>(i * 7);
  EXPECT_EQ(lm::resize_bicubic(img, 4, 2).pixels, img.pixels);
  // A constant image stays constant at any size (weights are normalised).
  lm::RgbImage flat{7, 5, std::vector<uint8_t>(std::size_t{7} * 5 * 3, 77)};
  for (const auto& [w, h] : {std::pair{3, 2}, std::pair{16, 11}, std::pair{1, 1}}) {
    const lm::RgbImage r = lm::resize_bicubic(flat, w, h);
    ASSERT_EQ(r.pixels.size(), static_cast<std::size_t>(w * h * 3));
    for (uint8_t p : r.pixels) EXPECT_EQ(p, 77);
  }
  // A 1-pixel checkerboard shrunk 4x is mid-grey (antialiasing: every source pixel counts).
  lm::RgbImage board{16, 16, std::vector<uint8_t>(std::size_t{16} * 16 * 3)};
  for (int y = 0; y < 16; ++y)
    for (int x = 0; x < 16; ++x)
      for (int c = 0; c < 3; ++c) board.pixels[(y * 16 + x) * 3 + c] = ((x + y) % 2) ? 255 : 0;
  const lm::RgbImage small = lm::resize_bicubic(board, 4, 4);
  for (uint8_t p : small.pixels) EXPECT_NEAR(p, 127.5, 12.0);
  // Shortest edge then centre crop: 64x32 -> 32x32 from the middle.
  lm::RgbImage wide{64, 32, std::vector<uint8_t>(std::size_t{64} * 32 * 3, 0)};
  for (std::size_t y = 0; y < 32; ++y)
    for (std::size_t x = 16; x < 48; ++x) wide.pixels[(y * 64 + x) * 3] = 200;
  const lm::RgbImage crop = lm::resize_shortest_edge_and_center_crop(wide, 16);
  EXPECT_EQ(crop.width, 16);
  EXPECT_EQ(crop.height, 16);
  EXPECT_EQ(crop.at(8, 8, 0), 200);
}

}  // namespace
