// Helpers shared by the config sources; not part of the public API.
#pragma once

#include "plexus/core/config.hpp"

#include <boost/json/parse_options.hpp>

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace plexus::config::detail {

// One step of a parsed config path.
struct PathStep {
  enum class Kind {
    key,      // a.b or ["b"]
    index,    // [3]
    numeric,  // .3: an index on arrays, a key on objects (decided while walking)
  };
  Kind kind = Kind::key;
  std::string key;        // key and numeric steps
  std::size_t index = 0;  // index and numeric steps
};

// A path split into steps, or a description of why it is malformed.
struct ParsedPath {
  std::vector<PathStep> steps;
  std::string error;  // empty on success
};

// Parses the path syntax documented in config.hpp. An empty path is an error.
ParsedPath parse_path(std::string_view path);

// Position of the '=' separating path and value in "path=value", skipping any
// '=' inside a ["quoted key"]; npos if there is none.
std::size_t find_assignment(std::string_view text);

// Number formatting for messages: 3, -3, 3.5, 4.0 (doubles always show they
// are doubles), 1e+06. Precondition: v is a number.
std::string format_number(const boost::json::value& v);

// A value as it would be written in a config, for "got -3" / "got \"relu\"":
// numbers and strings literally (long strings shortened), containers described.
std::string literal(const boost::json::value& v);

// A key in single quotes for messages, with control characters escaped and
// long keys shortened so garbage input cannot produce unreadable messages.
std::string quote_key(std::string_view key);

// Text shortened to about max_bytes for messages, cut at a UTF-8 boundary.
std::string shorten(std::string_view text, std::size_t max_bytes);

// User text made safe to embed in a message: shortened as above, control
// characters written as \xNN (a NUL would otherwise cut what() short).
std::string printable(std::string_view text, std::size_t max_bytes);

// Three-way numeric comparison of two JSON numbers (int64, uint64, double);
// exact for integers of either signedness.
int compare_numbers(const boost::json::value& a, const boost::json::value& b);

// Structural equality where numbers compare by value (1 == 1.0 == 1u), as
// users do not distinguish how a number was stored.
bool json_equal(const boost::json::value& a, const boost::json::value& b);

// Path of the first NaN or infinite double inside v (Boost.JSON turns 1e999
// into infinity), or nullopt.
std::optional<std::string> find_non_finite(const boost::json::value& v, const std::string& path);

// "<origin>:<line>:<column>" for a byte offset in text (1-based line and
// column, the column counted in UTF-8 characters as editors show it).
std::string source_location(std::string_view text, std::size_t offset, std::string_view origin);

// The line holding offset and a caret under it, each line indented, starting
// with a newline; empty when there is nothing useful to show.
std::string source_excerpt(std::string_view text, std::size_t offset);

// Throws ConfigError for the first key that appears twice in one object.
// Precondition: text parses with the given options.
void check_duplicate_keys(std::string_view text, std::string_view origin);

// The options config files are parsed with: comments and trailing commas allowed.
boost::json::parse_options loader_parse_options() noexcept;

}  // namespace plexus::config::detail
