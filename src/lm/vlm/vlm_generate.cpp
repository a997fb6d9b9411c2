#include "lm/vlm/vlm_generate.h"

#include <algorithm>
#include <optional>
#include <tuple>

#include "base/error.h"

namespace lm {

namespace {

// Next marker of either kind at or after `from`: position and length (npos when none).
std::pair<std::size_t, std::size_t> next_marker(const std::string& text, std::size_t from) {
  const std::size_t media = text.find(kMediaMarker, from), image = text.find(kImageMarker, from);
  if (media == std::string::npos && image == std::string::npos) return {std::string::npos, 0};
  if (image == std::string::npos || (media != std::string::npos && media < image)) return {media, kMediaMarker.size()};
  return {image, kImageMarker.size()};
}

// The id of `piece` when the tokenizer encodes it as exactly that one token.
std::optional<int32_t> single_token(const Tokenizer& tokenizer, const std::string& piece) {
  const std::vector<int32_t> ids = tokenizer.encode(piece, false);
  if (ids.size() == 1 && tokenizer.token_text(ids[0]) == piece) return ids[0];
  return std::nullopt;
}

}  // namespace

ImageWrapping image_wrapping(const std::string& projector_kind, const Tokenizer& tokenizer) {
  ImageWrapping wrap;
  if (projector_kind != "idefics3") return wrap;
  const auto around = single_token(tokenizer, "<fake_token_around_image>");
  const auto global = single_token(tokenizer, "<global-img>");
  if (!around || !global) return wrap;
  wrap.before = {*around, *global};
  wrap.after = {*around};
  return wrap;
}

VlmPrompt build_vlm_prompt(const VisionLanguageModel& model, const Tokenizer& tokenizer, const std::string& text,
                           const std::vector<RgbImage>& images, bool add_bos) {
  // The text pieces between markers; piece i is followed by image i.
  std::vector<std::string> pieces;
  std::size_t from = 0;
  for (auto [pos, len] = next_marker(text, 0); pos != std::string::npos; std::tie(pos, len) = next_marker(text, from)) {
    pieces.push_back(text.substr(from, pos - from));
    from = pos + len;
  }
  const std::size_t markers = pieces.size();
  pieces.push_back(text.substr(from));
  if (markers == 0) {
    pieces.insert(pieces.begin(), images.size(), std::string());  // images first, then the text
  } else if (markers != images.size()) {
    throw base::InvalidArgument("the prompt has " + std::to_string(markers) + " image marker(s) (" +
                                std::string(kMediaMarker) + " or " + std::string(kImageMarker) + ") for " +
                                std::to_string(images.size()) + " image(s)");
  }

  VlmPrompt prompt;
  if (add_bos) {
    const auto bos = tokenizer.bos_id();
    if (bos) {
      prompt.tokens.push_back(*bos);
      prompt.image_row.push_back(-1);
    }
  }
  const int64_t dim = model.config().dim;
  const ImageWrapping wrap = image_wrapping(model.projector().kind(), tokenizer);
  const auto push_text_tokens = [&prompt](const std::vector<int32_t>& ids) {
    for (int32_t t : ids) {
      prompt.tokens.push_back(t);
      prompt.image_row.push_back(-1);
    }
  };
  for (std::size_t i = 0; i < pieces.size(); ++i) {
    if (!pieces[i].empty()) push_text_tokens(tokenizer.encode(pieces[i], false));
    if (i < images.size()) {
      push_text_tokens(wrap.before);
      const std::vector<float> rows = model.embed_image(images[i]);
      const int64_t n = static_cast<int64_t>(rows.size()) / dim;
      for (int64_t r = 0; r < n; ++r) {
        prompt.tokens.push_back(kImagePlaceholderId);
        prompt.image_row.push_back(prompt.image_tokens + r);
      }
      prompt.image_rows.insert(prompt.image_rows.end(), rows.begin(), rows.end());
      prompt.image_tokens += n;
      ++prompt.images;
      push_text_tokens(wrap.after);
    }
  }
  return prompt;
}

GenerationStats stream_generate(const VisionLanguageModel& model, const Tokenizer& tokenizer, const VlmPrompt& prompt,
                                GenerateOptions options, const std::function<bool(const GenerationChunk&)>& on_token) {
  if (prompt.tokens.empty()) throw base::InvalidArgument("the image prompt is empty");
  if (prompt.image_row.size() != prompt.tokens.size()) {
    throw base::InvalidArgument("the image prompt's row map does not match its tokens");
  }
  const Model& text = *model.language_model();
  const int64_t dim = text.config().dim;
  options.prompt_embeddings = [&](std::size_t begin, std::size_t end, std::vector<float>& out) {
    const std::vector<int32_t> ids(prompt.tokens.begin() + static_cast<std::ptrdiff_t>(begin),
                                   prompt.tokens.begin() + static_cast<std::ptrdiff_t>(end));
    out.resize(ids.size() * static_cast<std::size_t>(dim));
    text.embed_tokens(ids, out.data());
    for (std::size_t t = begin; t < end; ++t) {
      const int64_t row = prompt.image_row[t];
      if (row < 0) continue;
      std::copy_n(prompt.image_rows.begin() + row * dim, dim,
                  out.begin() + static_cast<std::ptrdiff_t>((t - begin) * dim));
    }
  };
  return lm::stream_generate(text, tokenizer, prompt.tokens, options, on_token);
}

}  // namespace lm
