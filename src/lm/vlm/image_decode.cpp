// The one translation unit that compiles stb_image (Debian's libstb-dev header; no vendored
// copy), restricted to the two formats the host accepts.
#define STB_IMAGE_IMPLEMENTATION
#define STBI_ONLY_PNG
#define STBI_ONLY_JPEG
#define STBI_NO_STDIO  // files are read by load_image, so errors can name the path
#define STBI_FAILURE_USERMSG
#include <stb_image.h>

#include <climits>
#include <cstdint>
#include <string>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "base/error.h"
#include "lm/vlm/image.h"

namespace lm {

namespace {
constexpr int kMaxImageSide = 16384;
constexpr int64_t kMaxImagePixels = int64_t{1} << 26;  // 64 M pixels: 192 MB decoded
}  // namespace

RgbImage decode_image(const std::vector<uint8_t>& bytes, const std::string& name) {
  if (bytes.empty()) throw base::FormatError("image '" + name + "' is empty");
  if (bytes.size() > static_cast<std::size_t>(INT_MAX)) throw base::FormatError("image '" + name + "' is too large");
  int width = 0, height = 0, channels = 0;
  // The header first: a small file may declare a huge image (a decompression bomb); refuse it
  // before anything is allocated. Every tower resizes to well under this.
  if (stbi_info_from_memory(bytes.data(), static_cast<int>(bytes.size()), &width, &height, &channels) &&
      (width > kMaxImageSide || height > kMaxImageSide || int64_t{width} * height > kMaxImagePixels)) {
    throw base::FormatError("image '" + name + "' is " + std::to_string(width) + "x" + std::to_string(height) +
                            " pixels; at most " + std::to_string(kMaxImageSide) + " per side and " +
                            std::to_string(kMaxImagePixels) + " in all are accepted");
  }
  stbi_uc* data = stbi_load_from_memory(bytes.data(), static_cast<int>(bytes.size()), &width, &height, &channels, 3);
  if (!data) {
    const char* reason = stbi_failure_reason();
    throw base::FormatError("image '" + name + "' cannot be decoded as PNG or JPEG (" +
                            std::string(reason ? reason : "unknown reason") + ")");
  }
  RgbImage image;
  image.width = width;
  image.height = height;
  image.pixels.assign(data, data + static_cast<std::size_t>(width) * height * 3);
  stbi_image_free(data);
  return image;
}

RgbImage load_image(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) throw base::FormatError("image file '" + path + "' does not exist");
  if (!std::filesystem::is_regular_file(path, ec)) throw base::FormatError("image path '" + path + "' is not a file");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw base::FormatError("cannot read image file '" + path + "'");
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return decode_image(bytes, path);
}

}  // namespace lm
