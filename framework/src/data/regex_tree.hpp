// The parsed form of a split regex, between regex_parse.cpp and regex_emit.cpp.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "data/split_regex.hpp"

namespace plexus::data {

struct RegexNode {
  enum Kind : uint8_t { empty, char_class, concat, alternation, repeat, lookahead } kind = empty;
  int32_t class_index = -1;         // char_class
  std::vector<RegexNode> children;  // concat, alternation: the parts; repeat, lookahead: one
  int32_t min = 0, max = 0;         // repeat; max < 0: unbounded
  bool greedy = true;               // repeat
  bool negative = false;            // lookahead
};

struct RegexTree {
  RegexNode root;
  std::vector<CharClass> classes;
};

// Throws RegexError naming the construct and its byte offset.
RegexTree parse_regex(std::string_view pattern);

// Whether the node can match without consuming anything.
bool nullable(const RegexNode& node);

}  // namespace plexus::data
