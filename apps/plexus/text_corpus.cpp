// Reading a text corpus: input files, the UTF-8 check, documents (text_corpus.hpp).
#include "plexus/text_corpus.hpp"

#include <algorithm>
#include <iostream>

#include "plexus/core/data/indexed_dataset.hpp"
#include "plexus/core/regular_file.hpp"

namespace plexus::cli {

namespace fs = std::filesystem;

// The offset of the first byte that is not part of well-formed UTF-8 (no overlongs, no
// surrogates, nothing above U+10FFFF), or npos.
std::size_t invalid_utf8_at(std::string_view text) {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const std::size_t n = text.size();
  std::size_t i = 0;
  while (i < n) {
    const unsigned char c = s[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    std::size_t length = 0;
    unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
    if (c >= 0xC2 && c <= 0xDF) {
      length = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      length = 3;
      if (c == 0xE0) lo = 0xA0;
      if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      length = 4;
      if (c == 0xF0) lo = 0x90;
      if (c == 0xF4) hi = 0x8F;
    } else {
      return i;
    }
    if (i + length > n) return i;
    if (s[i + 1] < lo || s[i + 1] > hi) return i;
    for (std::size_t k = 2; k < length; ++k)
      if (s[i + k] < 0x80 || s[i + k] > 0xBF) return i;
    i += length;
  }
  return std::string_view::npos;
}

namespace {

// Characters = UTF-8 code points (the text is valid UTF-8 by now).
std::size_t count_chars(std::string_view text) {
  return static_cast<std::size_t>(std::count_if(
      text.begin(), text.end(), [](char c) { return (static_cast<unsigned char>(c) & 0xC0) != 0x80; }));
}

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\f' || c == '\v';
}
bool is_blank(std::string_view text) {
  return std::all_of(text.begin(), text.end(), is_space);
}

std::vector<std::string> paragraphs(std::string_view text) {
  std::vector<std::string> out;
  std::string current;
  bool open = false;
  std::size_t at = 0;
  while (at <= text.size()) {
    std::size_t end = text.find('\n', at);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(at, end - at);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (is_blank(line)) {
      if (open) out.push_back(std::move(current));
      current.clear();
      open = false;
    } else {
      if (open) current += '\n';
      current += line;
      open = true;
    }
    at = end + 1;
  }
  if (open) out.push_back(std::move(current));
  return out;
}

// Why a file's bytes are not UTF-8 text, or "".
std::string binary_reason(std::string_view text) {
  const auto nul = text.find('\0');
  const auto bad = invalid_utf8_at(text);
  if (nul != std::string_view::npos && nul <= bad) return "a NUL byte at offset " + std::to_string(nul);
  if (bad != std::string_view::npos) return "invalid UTF-8 at byte offset " + std::to_string(bad);
  return "";
}

// Opened without blocking: an input that became a FIFO after collect_inputs checked it is
// refused, not waited on.
std::string read_file(const fs::path& file) {
  try {
    return read_regular_file(file);
  } catch (const FileReadError& e) {
    throw DataError(file.string(), "cannot read " + file.string() + ": " + e.what());
  }
}

// ------------------------------------------------------------------------ input files ---

void warn(const CorpusOptions& options, const std::string& message) {
  std::cerr << options.program << ": warning: " << message << "\n";
}

bool hidden(const fs::path& path) {
  const std::string name = path.filename().string();
  return !name.empty() && name[0] == '.';
}

}  // namespace

std::vector<InputFile> collect_inputs(const std::vector<std::string>& inputs,
                                      const std::set<fs::path>& exclude, const CorpusOptions& options,
                                      CorpusStats& stats) {
  std::vector<InputFile> files;
  std::set<fs::path> seen = exclude;
  const auto add = [&](const fs::path& path, bool named) {
    std::error_code ec;
    fs::path key = fs::weakly_canonical(path, ec);
    if (ec) key = fs::absolute(path);
    if (seen.insert(key).second) files.push_back({path, named});
  };
  for (const std::string& input : inputs) {
    const fs::path path(input);
    std::error_code ec;
    const fs::file_status status = fs::status(path, ec);
    if (!fs::exists(status)) throw DataError(input, "input " + input + ": no such file or directory");
    if (fs::is_regular_file(status)) {
      add(path, true);
      continue;
    }
    if (!fs::is_directory(status))
      throw DataError(input, "input " + input + ": not a regular file or directory");
    std::vector<fs::path> found;
    fs::recursive_directory_iterator it(path, fs::directory_options::none, ec);
    if (ec) throw DataError(input, "cannot read directory " + input + ": " + ec.message());
    for (const fs::recursive_directory_iterator end; it != end; it.increment(ec)) {
      if (ec) throw DataError(input, "cannot read directory " + input + ": " + ec.message());
      const fs::path entry = it->path();
      if (hidden(entry)) {
        if (it->is_directory(ec)) it.disable_recursion_pending();
        continue;
      }
      std::error_code status_ec;
      const fs::file_status entry_status = fs::status(entry, status_ec);  // follows links
      if (fs::is_directory(entry_status)) continue;
      if (fs::is_regular_file(entry_status)) {
        found.push_back(entry);
      } else {
        warn(options, "skipping " + entry.string() +
                          (fs::exists(entry_status) ? ": not a regular file" : ": a broken symbolic link"));
        ++stats.skipped;
      }
    }
    if (ec) throw DataError(input, "cannot read directory " + input + ": " + ec.message());
    std::sort(found.begin(), found.end(),
              [](const fs::path& a, const fs::path& b) { return a.string() < b.string(); });
    for (const fs::path& file : found) add(file, false);
  }
  return files;
}

void for_each_document(const std::vector<InputFile>& files, const CorpusOptions& options, CorpusStats& stats,
                       const std::function<void(std::string_view)>& document) {
  const auto add = [&](std::string_view text) {
    if (is_blank(text) || count_chars(text) < options.min_doc_chars) return;
    ++stats.documents;
    document(text);
  };
  for (const InputFile& file : files) {
    std::string text = read_file(file.path);
    if (const std::string why = binary_reason(text); !why.empty()) {
      if (file.named)
        throw DataError(file.path.string(), file.path.string() + ": not UTF-8 text (" + why + "); " +
                                                options.program + " reads UTF-8 text files");
      warn(options, "skipping " + file.path.string() + ": not UTF-8 text (" + why + ")");
      ++stats.skipped;
      continue;
    }
    ++stats.files_read;
    stats.text_bytes += text.size();
    std::string_view body(text);
    if (body.starts_with("\xEF\xBB\xBF")) body.remove_prefix(3);
    if (options.document_per_file) {
      add(body);
    } else {
      for (const std::string& paragraph : paragraphs(body)) add(paragraph);
    }
  }
}

std::string no_documents_message(const std::vector<InputFile>& files, const CorpusOptions& options,
                                 const CorpusStats& stats) {
  const std::string what = files.empty() ? "no input files were found"
                                         : std::to_string(stats.files_read) + " file" +
                                               (stats.files_read == 1 ? "" : "s") + " read";
  return "(" + what + ", " + std::to_string(stats.skipped) + " skipped; no document had at least " +
         std::to_string(options.min_doc_chars) + " non-blank character" +
         (options.min_doc_chars == 1 ? "" : "s") + ")";
}

}  // namespace plexus::cli
