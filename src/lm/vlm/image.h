#pragma once
// lm::RgbImage — a decoded image (8-bit RGB, row-major, 3 bytes per pixel) and what a vision
// tower does to it before the patches: decoding PNG/JPEG (stb_image, Debian's libstb-dev),
// resizing, and normalising to the tower's channels-first float input.
#include <cstdint>
#include <string>
#include <vector>

namespace lm {

struct RgbImage {
  int width = 0;
  int height = 0;
  std::vector<uint8_t> pixels;  // height * width * 3

  uint8_t at(int x, int y, int c) const { return pixels[(static_cast<std::size_t>(y) * width + x) * 3 + c]; }
};

// Decodes a PNG or JPEG held in memory; `name` names it in errors. Grey and alpha channels are
// converted to RGB. Throws base::FormatError (not an image, truncated, corrupt: stb_image's
// reason included; more than 16384 pixels on a side or 2^26 in all) naming `name`.
RgbImage decode_image(const std::vector<uint8_t>& bytes, const std::string& name);

// Reads and decodes an image file. Throws base::FormatError for a missing, unreadable or
// corrupt file, naming the path.
RgbImage load_image(const std::string& path);

// Resamples to width x height with a separable bicubic filter (a = -0.5, the filter of PIL
// and so of transformers' image processors), widened by the scale factor when shrinking so
// every source pixel contributes (antialiasing); each pass rounds back to 8 bits as PIL does.
// The same size returns the image unchanged.
RgbImage resize_bicubic(const RgbImage& image, int width, int height);

// CLIP's resize-and-crop: shortest edge scaled to `size` (aspect kept), then the central
// size x size square.
RgbImage resize_shortest_edge_and_center_crop(const RgbImage& image, int size);

// llama.cpp's resize-and-pad: scaled (aspect kept, bicubic) to fit a size x size square,
// centred on black.
RgbImage resize_to_fit_and_pad(const RgbImage& image, int size);

// Channels-first floats, (pixel / 255 - mean[c]) / std[c]: [3, height, width].
std::vector<float> normalize_to_chw(const RgbImage& image, const float mean[3], const float std[3]);

}  // namespace lm
