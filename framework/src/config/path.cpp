// Config path syntax: building paths for messages and parsing them back.
#include "internal.hpp"

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

#include <algorithm>
#include <charconv>

namespace plexus::config {

namespace {

// Characters that would make a dotted path ambiguous or unreadable. Bytes of
// multi-byte UTF-8 characters are fine: non-ASCII keys print as themselves.
bool plain_key_char(char c) {
  const auto u = static_cast<unsigned char>(c);
  if (u <= 0x20 || u == 0x7f) return false;
  return c != '.' && c != '[' && c != ']' && c != '"' && c != '=';
}

bool plain_key(std::string_view key) {
  return !key.empty() && std::all_of(key.begin(), key.end(), plain_key_char);
}

bool all_digits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

std::optional<std::size_t> to_index(std::string_view digits) {
  std::size_t value = 0;
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
  if (ec != std::errc() || end != digits.data() + digits.size()) return std::nullopt;
  return value;
}

// End of a JSON string literal starting at text[start] == '"': the position
// just past its closing quote, or npos if it is unterminated.
std::size_t end_of_quoted(std::string_view text, std::size_t start) {
  for (std::size_t i = start + 1; i < text.size(); ++i) {
    if (text[i] == '\\') {
      ++i;  // skip the escaped character, whatever it is
    } else if (text[i] == '"') {
      return i + 1;
    }
  }
  return std::string_view::npos;
}

// Parses one bracket group at text[i] == '['; advances i past it.
std::string parse_bracket(std::string_view text, std::size_t& i, detail::PathStep& step) {
  if (i + 1 < text.size() && text[i + 1] == '"') {
    const std::size_t end = end_of_quoted(text, i + 1);
    if (end == std::string_view::npos) return "unterminated quoted key";
    if (end >= text.size() || text[end] != ']') return "expected ']' after quoted key";
    boost::system::error_code ec;
    const boost::json::value key = boost::json::parse(text.substr(i + 1, end - i - 1), ec);
    if (ec || !key.is_string())
      return "invalid quoted key " + detail::printable(text.substr(i + 1, end - i - 1), 60);
    step.kind = detail::PathStep::Kind::key;
    step.key = std::string(key.get_string());
    i = end + 1;
    return {};
  }
  const std::size_t close = text.find(']', i);
  const std::string_view inside =
      close == std::string_view::npos ? text.substr(i + 1) : text.substr(i + 1, close - i - 1);
  if (close == std::string_view::npos || !all_digits(inside)) {
    return "malformed index '[" + detail::printable(inside, 40) +
           (close == std::string_view::npos ? "" : "]") +
           "' (expected [<non-negative integer>] or [\"<key>\"])";
  }
  const auto index = to_index(inside);
  if (!index) return "index [" + detail::printable(inside, 40) + "] is too large";
  step.kind = detail::PathStep::Kind::index;
  step.index = *index;
  i = close + 1;
  return {};
}

}  // namespace

std::string join_path(std::string_view base, std::string_view key) {
  std::string out(base);
  if (plain_key(key)) {
    if (!out.empty()) out += '.';
    out += key;
  } else {
    out += '[';
    out += boost::json::serialize(boost::json::string_view(key.data(), key.size()));
    out += ']';
  }
  return out;
}

std::string index_path(std::string_view base, std::size_t index) {
  std::string out(base);
  out += '[';
  out += std::to_string(index);
  out += ']';
  return out;
}

namespace detail {

ParsedPath parse_path(std::string_view path) {
  ParsedPath out;
  if (path.empty()) {
    out.error = "empty path";
    return out;
  }
  std::size_t i = 0;
  // A path may start with a bracket (the form join_path gives keys at the
  // root); after a '.' a name is required.
  bool name_required = path.front() != '[';
  while (true) {
    if (name_required) {
      const std::size_t start = i;
      while (i < path.size() && path[i] != '.' && path[i] != '[' && path[i] != ']') ++i;
      const std::string_view name = path.substr(start, i - start);
      if (name.empty()) {
        out.error = "empty path segment";
        return out;
      }
      PathStep step;
      step.key = std::string(name);
      if (all_digits(name)) {
        if (const auto index = to_index(name)) {
          step.kind = PathStep::Kind::numeric;
          step.index = *index;
        }
      }
      out.steps.push_back(std::move(step));
    }
    while (i < path.size() && path[i] == '[') {
      PathStep step;
      if (std::string error = parse_bracket(path, i, step); !error.empty()) {
        out.error = std::move(error);
        return out;
      }
      out.steps.push_back(std::move(step));
    }
    if (i == path.size()) return out;
    if (path[i] != '.') {
      out.error = "unexpected '" + detail::printable(path.substr(i, 1), 1) + "'";
      return out;
    }
    ++i;
    name_required = true;
  }
}

std::size_t find_assignment(std::string_view text) {
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '=') return i;
    if (text[i] == '[' && i + 1 < text.size() && text[i + 1] == '"') {
      const std::size_t end = end_of_quoted(text, i + 1);
      if (end == std::string_view::npos) return std::string_view::npos;
      i = end - 1;
    }
  }
  return std::string_view::npos;
}

}  // namespace detail
}  // namespace plexus::config
