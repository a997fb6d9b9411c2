#include "lm/tokenizer/tokenizer_piece_index.h"

#include <functional>

namespace lm {

namespace {
uint32_t hash_of(std::string_view s) { return static_cast<uint32_t>(std::hash<std::string_view>{}(s)); }
}  // namespace

PieceIndex::PieceIndex(const std::vector<std::string>& pieces) {
  size_t size = 16;
  while (size < 2 * pieces.size()) size *= 2;
  slots_.assign(size, -1);
  hashes_.assign(size, 0);
  mask_ = size - 1;
  for (size_t id = 0; id < pieces.size(); ++id) {
    const uint32_t h = hash_of(pieces[id]);
    for (size_t slot = h & mask_;; slot = (slot + 1) & mask_) {
      if (slots_[slot] < 0) {
        slots_[slot] = static_cast<int32_t>(id);
        hashes_[slot] = h;
        break;
      }
      if (hashes_[slot] == h && pieces[static_cast<size_t>(slots_[slot])] == pieces[id])
        break;  // duplicate: keep the first
    }
  }
}

int32_t PieceIndex::find(const std::vector<std::string>& pieces, std::string_view piece) const {
  if (slots_.empty()) return -1;
  const uint32_t h = hash_of(piece);
  for (size_t slot = h & mask_;; slot = (slot + 1) & mask_) {
    const int32_t id = slots_[slot];
    if (id < 0) return -1;
    if (hashes_[slot] == h && pieces[static_cast<size_t>(id)] == piece) return id;
  }
}

}  // namespace lm
