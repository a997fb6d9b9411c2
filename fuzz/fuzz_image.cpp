// Image decoding (PNG / JPEG through stb_image) and the tower's preprocessing on arbitrary
// bytes: every outcome is an image or a typed error, never a crash or a sanitizer report.
#include <cstddef>
#include <cstdint>
#include <exception>
#include <vector>

#include "lm/vlm/image.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  try {
    const lm::RgbImage image = lm::decode_image(std::vector<uint8_t>(data, data + size), "fuzz input");
    const float mean[3] = {0.5f, 0.5f, 0.5f}, std[3] = {0.5f, 0.5f, 0.5f};
    (void)lm::normalize_to_chw(lm::resize_shortest_edge_and_center_crop(image, 16), mean, std);
    (void)lm::resize_to_fit_and_pad(image, 16);
  } catch (const std::exception&) {
  }
  return 0;
}
