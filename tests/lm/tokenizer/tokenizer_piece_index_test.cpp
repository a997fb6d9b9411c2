// PieceIndex (the SentencePiece tokenizer's piece -> id table) against a plain std::map.
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <string>
#include <vector>

#include "lm/tokenizer/tokenizer_piece_index.h"

TEST(PieceIndex, FindsEveryPieceFirstIdWinsAbsentIsMinusOne) {
  std::mt19937 rng(5);
  std::uniform_int_distribution<int> len(0, 20), ch('a', 'e');
  std::vector<std::string> pieces;
  for (int i = 0; i < 5000; ++i) {
    std::string p(static_cast<size_t>(len(rng)), ' ');
    for (char& c : p) c = static_cast<char>(ch(rng));
    pieces.push_back(p);  // short pieces over 5 letters: many duplicates, the empty one too
  }
  std::map<std::string, int32_t> first;
  for (size_t id = 0; id < pieces.size(); ++id) first.emplace(pieces[id], static_cast<int32_t>(id));
  ASSERT_LT(first.size(), pieces.size());  // the duplicates are there
  const lm::PieceIndex index(pieces);
  for (const auto& [piece, id] : first) EXPECT_EQ(index.find(pieces, piece), id) << piece;
  EXPECT_EQ(index.find(pieces, "zzz"), -1);
  EXPECT_EQ(index.find(pieces, std::string(30, 'a')), -1);
  const lm::PieceIndex none;
  EXPECT_EQ(none.find(pieces, "a"), -1);
  const std::vector<std::string> empty;
  EXPECT_EQ(lm::PieceIndex(empty).find(empty, ""), -1);
}
