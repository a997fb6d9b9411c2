// `veloxquant generate --mmproj P --image F`: the CLI answers about the LLaVA fixture's test
// image exactly as transformers' greedy decoding does (tests/fixtures/reference/hf/llava_tiny.*,
// tools/reference/hf/make_llava.py), reports image tokens and the language model's KV bytes,
// and names the problem for a missing or corrupt image or mmproj.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "lm/load.h"
#include "support/cli_run.h"

namespace {

namespace fs = std::filesystem;
using test_support::run_cli;

const fs::path kHf = fs::path(VQ_SOURCE_DIR) / "tests/fixtures/reference/hf";
const std::string kModel = (kHf / "llava_tiny.gguf").string();
const std::string kMmproj = (kHf / "llava_tiny.mmproj.gguf").string();
const std::string kImage = (kHf / "llava_tiny.png").string();

nlohmann::json fixture() {
  std::ifstream in(kHf / "llava_tiny.json");
  return nlohmann::json::parse(in);
}

std::string base_args(const std::string& extra = "") {
  return "generate --model " + kModel + " --mmproj " + kMmproj + " --image " + kImage +
         " --prompt 'Once upon a time, there was a' --threads 1 " + extra;
}

TEST(GenerateImageCommand, AnswersLikeTransformersGreedy) {
  const nlohmann::json meta = fixture();
  ASSERT_EQ(meta.at("prompt").get<std::string>(), "Once upon a time, there was a");
  const auto greedy = meta.at("greedy").get<std::vector<int32_t>>();
  // transformers' tokens as text, through the model's own tokenizer.
  const lm::LoadedModel text = lm::load(kModel);
  std::string expected;
  int32_t previous = -1;
  for (int32_t t : greedy) {
    expected += text.tokenizer->decode_token(previous, t);
    previous = t;
  }
  const auto r = run_cli(base_args("-n " + std::to_string(greedy.size())));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, expected + "\n");
  EXPECT_NE(r.err.find("images 1 (16 image tok)"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("prompt 25 tok"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("gen 12 tok"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("language-model KV"), std::string::npos) << r.err;
}

TEST(GenerateImageCommand, SmolVlmAnswersLikeTransformersGreedy) {
  std::ifstream in(kHf / "smolvlm_tiny.json");
  const nlohmann::json meta = nlohmann::json::parse(in);
  const auto greedy = meta.at("greedy").get<std::vector<int32_t>>();
  const std::string model = (kHf / "smolvlm_tiny.gguf").string();
  const lm::LoadedModel text = lm::load(model);
  std::string expected;
  int32_t previous = -1;
  for (int32_t t : greedy) {
    expected += text.tokenizer->decode_token(previous, t);
    previous = t;
  }
  const auto r = run_cli("generate --model " + model + " --mmproj " + (kHf / "smolvlm_tiny.mmproj.gguf").string() +
                         " --image " + kImage + " --prompt '" + meta.at("prompt").get<std::string>() +
                         "' --threads 1 -n " + std::to_string(greedy.size()));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, expected + "\n");
  EXPECT_NE(r.err.find("images 1 (16 image tok)"), std::string::npos) << r.err;
}

TEST(GenerateImageCommand, CompressedCacheOnTheLanguageModel) {
  const auto r = run_cli(base_args("-n 4 --method turboquant_rvq --bits 4"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("Wired 2 layer cache(s) with 'turboquant_rvq' on the language model"), std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("[turboquant_rvq]"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("(1.00x smaller)"), std::string::npos) << r.err;
}

TEST(GenerateImageCommand, TwoImagesAtTheirMarkers) {
  const auto r = run_cli("generate --model " + kModel + " --mmproj " + kMmproj + " --image " + kImage + " --image " +
                         kImage + " --prompt 'A <image> and a <__media__> picture' -n 2 --threads 1");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("images 2 (32 image tok)"), std::string::npos) << r.err;
  const auto bad = run_cli("generate --model " + kModel + " --mmproj " + kMmproj + " --image " + kImage +
                           " --prompt 'A <image> and a <image>' -n 2");
  EXPECT_EQ(bad.exit_code, 2) << bad.err;
  EXPECT_NE(bad.err.find("2 image marker(s)"), std::string::npos) << bad.err;
}

TEST(GenerateImageCommand, MmprojWithoutAnImageIsATextPrompt) {
  // The same tokens as the text model alone: no image rows, nothing spliced.
  const std::string args = " --prompt 'Once upon a time' -n 5 --threads 1";
  const auto with = run_cli("generate --model " + kModel + " --mmproj " + kMmproj + args);
  const auto without = run_cli("generate --model " + kModel + args);
  ASSERT_EQ(with.exit_code, 0) << with.err;
  ASSERT_EQ(without.exit_code, 0) << without.err;
  EXPECT_EQ(with.out, without.out);
  EXPECT_NE(with.err.find("images 0 (0 image tok)"), std::string::npos) << with.err;
}

TEST(GenerateImageCommand, ClearErrorsForBadInputs) {
  const fs::path tmp = fs::temp_directory_path() / "vq_generate_image_cli";
  fs::create_directories(tmp);
  const std::string corrupt = (tmp / "corrupt.jpg").string();
  std::ofstream(corrupt, std::ios::binary) << "\xFF\xD8\xFF\xE0 this is not a jpeg";

  auto r = run_cli("generate --model " + kModel + " --image " + kImage + " --prompt hi");
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("--image needs --mmproj"), std::string::npos) << r.err;

  r = run_cli("generate --model " + kModel + " --mmproj " + kMmproj + " --image " + (tmp / "nope.png").string() +
              " --prompt hi");
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("nope.png' does not exist"), std::string::npos) << r.err;

  r = run_cli("generate --model " + kModel + " --mmproj " + kMmproj + " --image " + corrupt + " --prompt hi");
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("corrupt.jpg' cannot be decoded"), std::string::npos) << r.err;

  r = run_cli("generate --model " + kModel + " --mmproj " + (tmp / "none.gguf").string() + " --image " + kImage +
              " --prompt hi");
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("none.gguf' does not exist"), std::string::npos) << r.err;

  r = run_cli("generate --model " + kModel + " --mmproj " + corrupt + " --image " + kImage + " --prompt hi");
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("is not a GGUF file"), std::string::npos) << r.err;

  r = run_cli("generate --model " + kModel + " --mmproj " + kModel + " --image " + kImage + " --prompt hi");
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("expected 'clip'"), std::string::npos) << r.err;

  r = run_cli(base_args("--save-prompt-cache " + (tmp / "p.bin").string()));
  EXPECT_EQ(r.exit_code, 2) << r.err;
}

}  // namespace
