#include "plexus/core/json_text.hpp"

#include <boost/json/serialize.hpp>

#include <charconv>
#include <cmath>
#include <string_view>
#include <system_error>

namespace plexus {
namespace {

void append_value(std::string& out, const boost::json::value& value, int indent, int depth);

void append_newline(std::string& out, int indent, int depth) {
  if (indent <= 0) return;
  out += '\n';
  out.append(static_cast<std::size_t>(indent * depth), ' ');
}

void append_object(std::string& out, const boost::json::object& object, int indent, int depth) {
  if (object.empty()) {
    out += "{}";
    return;
  }
  out += '{';
  bool first = true;
  for (const auto& [key, member] : object) {
    if (!first) out += ',';
    first = false;
    append_newline(out, indent, depth + 1);
    out += boost::json::serialize(boost::json::string_view(key.data(), key.size()));
    out += indent > 0 ? ": " : ":";
    append_value(out, member, indent, depth + 1);
  }
  append_newline(out, indent, depth);
  out += '}';
}

// Arrays of scalars stay on one line even when indented ([256, 1024]); arrays holding objects
// or arrays get one element per line.
void append_array(std::string& out, const boost::json::array& array, int indent, int depth) {
  bool nested = false;
  for (const auto& element : array) nested = nested || element.is_object() || element.is_array();
  const int element_indent = nested ? indent : 0;
  out += '[';
  bool first = true;
  for (const auto& element : array) {
    if (!first) out += (!nested && indent > 0) ? ", " : ",";
    first = false;
    if (nested) append_newline(out, indent, depth + 1);
    append_value(out, element, element_indent, depth + 1);
  }
  if (nested && !array.empty()) append_newline(out, indent, depth);
  out += ']';
}

void append_value(std::string& out, const boost::json::value& value, int indent, int depth) {
  switch (value.kind()) {
    case boost::json::kind::object: append_object(out, value.get_object(), indent, depth); return;
    case boost::json::kind::array: append_array(out, value.get_array(), indent, depth); return;
    case boost::json::kind::double_: out += json_number_text(value.get_double()); return;
    default: out += boost::json::serialize(value); return;
  }
}

}  // namespace

std::string json_number_text(double value) {
  // JSON has no infinities or NaN; Boost's own spelling of them is kept so nothing changes there.
  if (!std::isfinite(value)) return boost::json::serialize(boost::json::value(value));
  // Python's repr rule: positional notation for decimal exponents from -4 to 15, scientific
  // outside (0.0003, 123456.0, 1e-05, 1e+16); either way the fewest digits that read back.
  char buffer[400];
  const auto scientific = std::to_chars(buffer, buffer + sizeof buffer, value, std::chars_format::scientific);
  if (scientific.ec != std::errc{}) return boost::json::serialize(boost::json::value(value));
  const std::string_view sci(buffer, static_cast<std::size_t>(scientific.ptr - buffer));
  const int exponent = std::stoi(std::string(sci.substr(sci.find('e') + 1)));
  const std::string scientific_text(sci);
  if (exponent < -4 || exponent >= 16) return scientific_text;
  const auto fixed = std::to_chars(buffer, buffer + sizeof buffer, value, std::chars_format::fixed);
  if (fixed.ec != std::errc{}) return scientific_text;
  std::string text(buffer, fixed.ptr);
  if (text.find('.') != std::string::npos) return text;
  // An integral value keeps a fraction so it reads back as a double. Past 15 digits that extra
  // digit would take Boost.JSON's parser off its exact path, so such a value stays scientific.
  const std::size_t digits = text.size() - (text.front() == '-' ? 1 : 0);
  return digits < 16 ? text + ".0" : scientific_text;
}

std::string json_text(const boost::json::value& value, int indent) {
  std::string out;
  append_value(out, value, indent, 0);
  return out;
}

}  // namespace plexus
