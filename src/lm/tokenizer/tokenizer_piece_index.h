#pragma once
// Piece -> id lookup over a vocabulary the caller owns: an open-addressing table of ids (4
// bytes a slot, twice the vocabulary's size rounded up to a power of two), compared against
// the vocabulary's own strings. A node-based map of 262k pieces (Gemma 3) cost one
// allocation and one string copy per piece at load and as many frees at exit — a third of a
// short `generate` run; this is two flat vectors and no copies. Ids, not views, are stored,
// so the index stays valid when its owner (and the strings) move.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace lm {

class PieceIndex {
 public:
  PieceIndex() = default;
  // Indexes pieces[0..n); for a duplicated piece the first id wins.
  explicit PieceIndex(const std::vector<std::string>& pieces);
  // The id of `piece` in the same `pieces` the index was built from, or -1.
  int32_t find(const std::vector<std::string>& pieces, std::string_view piece) const;

 private:
  std::vector<int32_t> slots_;    // -1: empty
  std::vector<uint32_t> hashes_;  // per slot, so most mismatches skip the string compare
  size_t mask_ = 0;
};

}  // namespace lm
