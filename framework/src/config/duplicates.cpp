// Detecting duplicate keys, which JSON parsers (Boost.JSON included) accept by
// silently keeping the last value: an edit to the first occurrence would
// then have no effect, a confusing way to lose a setting.
#include "internal.hpp"

#include <boost/json/basic_parser_impl.hpp>

#include <algorithm>
#include <limits>
#include <unordered_set>

namespace plexus::config::detail {

namespace {

using boost::json::string_view;
using boost::system::error_code;

// A boost::json::basic_parser handler that records keys per object and
// stops at the first repeated one. It builds no values.
class DuplicateFinder {
 public:
  static constexpr std::size_t max_object_size = std::numeric_limits<std::size_t>::max();
  static constexpr std::size_t max_array_size = std::numeric_limits<std::size_t>::max();
  static constexpr std::size_t max_key_size = std::numeric_limits<std::size_t>::max();
  static constexpr std::size_t max_string_size = std::numeric_limits<std::size_t>::max();

  static bool on_document_begin(error_code& /*ec*/) { return true; }
  static bool on_document_end(error_code& /*ec*/) { return true; }
  bool on_array_begin(error_code& /*ec*/) { return open(false); }
  bool on_array_end(std::size_t /*n*/, error_code& /*ec*/) { return close(); }
  bool on_object_begin(error_code& /*ec*/) { return open(true); }
  bool on_object_end(std::size_t /*n*/, error_code& /*ec*/) { return close(); }
  static bool on_string_part(string_view /*s*/, std::size_t /*n*/, error_code& /*ec*/) { return true; }
  bool on_string(string_view /*s*/, std::size_t /*n*/, error_code& /*ec*/) { return scalar(); }
  bool on_key_part(string_view s, std::size_t /*n*/, error_code& /*ec*/) {
    key_.append(s.data(), s.size());
    return true;
  }
  bool on_key(string_view s, std::size_t /*n*/, error_code& ec) {
    key_.append(s.data(), s.size());
    Frame& frame = stack_.back();
    if (!frame.keys.insert(key_).second) {
      duplicate_ = join_path(frame.path, key_);
      duplicate_key_ = key_;
      // Any error stops the parser; the caller reports duplicate_ instead.
      ec = boost::json::error::syntax;
      return false;
    }
    frame.key = std::move(key_);
    key_.clear();
    return true;
  }
  static bool on_number_part(string_view /*s*/, error_code& /*ec*/) { return true; }
  bool on_int64(std::int64_t /*i*/, string_view /*s*/, error_code& /*ec*/) { return scalar(); }
  bool on_uint64(std::uint64_t /*u*/, string_view /*s*/, error_code& /*ec*/) { return scalar(); }
  bool on_double(double /*d*/, string_view /*s*/, error_code& /*ec*/) { return scalar(); }
  bool on_bool(bool /*b*/, error_code& /*ec*/) { return scalar(); }
  bool on_null(error_code& /*ec*/) { return scalar(); }
  static bool on_comment_part(string_view /*s*/, error_code& /*ec*/) { return true; }
  static bool on_comment(string_view /*s*/, error_code& /*ec*/) { return true; }

  // Path of the repeated key, if one was found.
  [[nodiscard]] const std::optional<std::string>& duplicate() const { return duplicate_; }
  [[nodiscard]] const std::string& duplicate_key() const { return duplicate_key_; }

 private:
  struct Frame {
    bool object = false;
    std::string path;
    std::unordered_set<std::string> keys;  // objects only
    std::string key;                       // objects: key of the value being parsed
    std::size_t index = 0;                 // arrays: index of the value being parsed
  };

  // Path of the value about to be parsed, for the message.
  [[nodiscard]] std::string child_path() const {
    if (stack_.empty()) return {};
    const Frame& f = stack_.back();
    return f.object ? join_path(f.path, f.key) : index_path(f.path, f.index);
  }
  bool open(bool object) {
    Frame frame;
    frame.object = object;
    frame.path = child_path();
    stack_.push_back(std::move(frame));
    return true;
  }
  bool close() {
    stack_.pop_back();
    return scalar();
  }
  // A value finished: the enclosing array moves on to its next index.
  bool scalar() {
    if (!stack_.empty() && !stack_.back().object) ++stack_.back().index;
    return true;
  }

  std::vector<Frame> stack_;
  std::string key_;
  std::optional<std::string> duplicate_;
  std::string duplicate_key_;
};

}  // namespace

void check_duplicate_keys(std::string_view text, std::string_view origin) {
  boost::json::basic_parser<DuplicateFinder> parser(loader_parse_options());
  error_code ec;
  const std::size_t stop = parser.write_some(false, text.data(), text.size(), ec);
  const auto& duplicate = parser.handler().duplicate();
  if (!duplicate) return;  // no duplicate (other errors were reported by the real parse)
  // The parser stops on the key's closing quote; point at its opening quote
  // instead. (An escaped quote right before it could fool this; the location
  // is then merely off by a few columns.)
  std::size_t at = std::min(stop, text.size());
  if (at < text.size() && text[at] == '"') {
    for (std::size_t j = at; j > 0; --j) {
      if (text[j - 1] == '"' && (j < 2 || text[j - 2] != '\\')) {
        at = j - 1;
        break;
      }
    }
  }
  throw ConfigError(*duplicate, source_location(text, at, origin) + ": duplicate key " +
                                    quote_key(parser.handler().duplicate_key()) +
                                    " (JSON keeps only the last value; remove one of them)" +
                                    source_excerpt(text, at));
}

}  // namespace plexus::config::detail
