// Reading config files and text into JSON values.
#include "internal.hpp"

#include <boost/json/parser.hpp>

#include <system_error>

#include "plexus/core/regular_file.hpp"

namespace plexus::config {

namespace detail {

boost::json::parse_options loader_parse_options() noexcept {
  boost::json::parse_options options;
  // Configs are written by hand: people comment out lines and leave commas.
  options.allow_comments = true;
  options.allow_trailing_commas = true;
  return options;
}

}  // namespace detail

namespace {

std::string file_problem(const std::filesystem::path& file, const std::string& why) {
  return "cannot read config file '" + file.string() + "': " + why;
}

std::string describe_file_type(std::filesystem::file_type type) {
  switch (type) {
    case std::filesystem::file_type::directory:
      return "it is a directory, not a file";
    case std::filesystem::file_type::fifo:
      return "it is a pipe, not a regular file";
    case std::filesystem::file_type::socket:
      return "it is a socket, not a regular file";
    case std::filesystem::file_type::block:
    case std::filesystem::file_type::character:
      return "it is a device, not a regular file";
    default:
      return "it is not a regular file";
  }
}

// A short reason for a syntax error: what the parser stopped at.
std::string unexpected_at(std::string_view text, std::size_t offset) {
  if (offset >= text.size()) return " (unexpected end of input)";
  const char c = text[offset];
  if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) >= 0x7f) return {};
  return std::string(" (unexpected '") + c + "')";
}

}  // namespace

boost::json::value load_file(const std::filesystem::path& file) {
  std::error_code ec;
  const std::filesystem::file_status status = std::filesystem::status(file, ec);
  if (status.type() == std::filesystem::file_type::not_found) {
    throw ConfigError("", file_problem(file, "no such file"));
  }
  if (ec) throw ConfigError("", file_problem(file, ec.message()));
  if (status.type() != std::filesystem::file_type::regular) {
    throw ConfigError("", file_problem(file, describe_file_type(status.type())));
  }

  // Opened without blocking and checked again: a FIFO put there since the status() above is refused
  // too, not waited on.
  std::string contents;
  try {
    contents = read_regular_file(file);
  } catch (const FileReadError& e) {
    throw ConfigError("", file_problem(file, e.what()));
  }
  return parse_text(contents, file.string());
}

boost::json::value parse_text(std::string_view text, std::string_view origin) {
  // Editors on Windows may save a byte order mark; it is not JSON.
  if (text.starts_with("\xEF\xBB\xBF")) text.remove_prefix(3);
  if (text.find_first_not_of(" \t\r\n") == std::string_view::npos) {
    throw ConfigError("", std::string(origin) + ": the document is empty (expected a JSON value)");
  }

  boost::json::parser parser({}, detail::loader_parse_options());
  boost::system::error_code ec;
  // On error the parser stops where the problem is; its return value is that offset.
  const std::size_t consumed = parser.write(text.data(), text.size(), ec);
  if (ec) {
    std::string message = detail::source_location(text, consumed, origin) + ": " + ec.message();
    if (ec == boost::json::error::syntax || ec == boost::json::error::extra_data) {
      message += unexpected_at(text, consumed);
    }
    throw ConfigError("", message + detail::source_excerpt(text, consumed));
  }
  boost::json::value root = parser.release();

  detail::check_duplicate_keys(text, origin);
  if (const auto where = detail::find_non_finite(root, "")) {
    throw ConfigError(*where, std::string(origin) + ": number is too large to represent");
  }
  return root;
}

}  // namespace plexus::config
