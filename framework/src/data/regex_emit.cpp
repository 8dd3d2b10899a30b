// Compiles a RegexTree into the program of the backtracking matcher (regex_match.cpp). Each
// split instruction tries its first target before its second, which gives Oniguruma's order:
// alternatives left to right, greedy repeats longest first, lazy ones shortest first.
#include "data/regex_tree.hpp"

namespace plexus::data {
namespace {

// Counted repeats are expanded into copies; this bounds the program a pattern can make.
constexpr std::size_t kMaxInstructions = 100000;

class Emitter {
 public:
  explicit Emitter(RegexProgram& program) : code_(program.code) {}

  void emit(const RegexNode& node) {
    if (code_.size() > kMaxInstructions)
      throw RegexError("the pattern is too large once its repeats are expanded (more than " +
                       std::to_string(kMaxInstructions) + " instructions)");
    switch (node.kind) {
      case RegexNode::empty:
        break;
      case RegexNode::char_class:
        push(RegexInst::match_class, node.class_index);
        break;
      case RegexNode::concat:
        for (const RegexNode& child : node.children) emit(child);
        break;
      case RegexNode::alternation:
        alternation(node);
        break;
      case RegexNode::repeat:
        repeat(node);
        break;
      case RegexNode::lookahead: {
        const std::size_t look = push(RegexInst::lookahead, 0, node.negative ? 1 : 0);
        emit(node.children.front());
        push(RegexInst::match);
        code_[look].x = here();
        break;
      }
    }
  }

  void finish() { push(RegexInst::match); }

 private:
  int32_t here() const { return static_cast<int32_t>(code_.size()); }
  std::size_t push(RegexInst::Op op, int32_t x = 0, int32_t y = 0) {
    code_.push_back({op, x, y});
    return code_.size() - 1;
  }

  void alternation(const RegexNode& node) {
    std::vector<std::size_t> to_end;
    for (std::size_t i = 0; i + 1 < node.children.size(); ++i) {
      const std::size_t split = push(RegexInst::split);
      code_[split].x = here();
      emit(node.children[i]);
      to_end.push_back(push(RegexInst::jump));
      code_[split].y = here();
    }
    emit(node.children.back());
    for (const std::size_t jump : to_end) code_[jump].x = here();
  }

  // A split preferring `body` (greedy) or `skip` (lazy).
  void set_split(std::size_t split, int32_t body, int32_t skip, bool greedy) {
    code_[split].x = greedy ? body : skip;
    code_[split].y = greedy ? skip : body;
  }

  void repeat(const RegexNode& node) {
    const RegexNode& child = node.children.front();
    for (int32_t i = 0; i < node.min; ++i) emit(child);
    if (node.max < 0) {
      const std::size_t loop = push(RegexInst::split);
      emit(child);
      push(RegexInst::jump, static_cast<int32_t>(loop));
      set_split(loop, static_cast<int32_t>(loop + 1), here(), node.greedy);
      return;
    }
    // Optional copies, nested: once one is skipped, so are the rest.
    std::vector<std::size_t> splits;
    for (int32_t i = node.min; i < node.max; ++i) {
      splits.push_back(push(RegexInst::split));
      emit(child);
    }
    for (const std::size_t split : splits)
      set_split(split, static_cast<int32_t>(split + 1), here(), node.greedy);
  }

  std::vector<RegexInst>& code_;
};

}  // namespace

RegexProgram compile_regex(std::string_view pattern) {
  RegexTree tree = parse_regex(pattern);
  RegexProgram program;
  program.classes = std::move(tree.classes);
  Emitter emitter(program);
  emitter.emit(tree.root);
  emitter.finish();
  return program;
}

}  // namespace plexus::data
