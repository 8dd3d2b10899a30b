// Reading a text corpus for `plexus data prepare` and `plexus tokenizer train`: the input
// files (named or found in directories), their UTF-8 check, and their documents.
//
// - Inputs are named files or directories. Directories are walked recursively, entries in
//   byte-wise sorted path order; names starting with '.' (.git, editor files) are skipped,
//   as are entries that are neither regular files nor directories (sockets, fifos, broken
//   links: a warning each). Symbolic links to files are followed; links to directories are
//   not (no cycles). A file reached twice is read once. Paths in `exclude` (a command's own
//   outputs) are never read.
// - Input must be UTF-8 text. A file that contains a NUL byte or is not valid UTF-8 is
//   binary: named on the command line it is an error; found by walking a directory it is
//   skipped with a warning (a corpus directory often holds an image or an archive). A
//   leading UTF-8 byte order mark is dropped. A file that cannot be read is always an error.
// - Documents are paragraphs: runs of non-blank lines, separated by blank (empty or
//   whitespace-only) lines; a paragraph's lines are joined with '\n' and CRLF becomes LF.
//   With document_per_file each file is one document, its text unchanged. Documents with
//   fewer than min_doc_chars characters (UTF-8 code points) are dropped, and so are
//   documents that are only whitespace.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace plexus::cli {

// The offset of the first byte that is not part of well-formed UTF-8 (no overlongs, no
// surrogates, nothing above U+10FFFF), or npos.
std::size_t invalid_utf8_at(std::string_view text);

struct InputFile {
  std::filesystem::path path;
  bool named = false;  // given on the command line (not found by walking a directory)
};

struct CorpusOptions {
  std::string program;  // "plexus data", for warnings
  std::size_t min_doc_chars = 1;
  bool document_per_file = false;
};

struct CorpusStats {
  std::size_t files_read = 0, skipped = 0, documents = 0;
  uint64_t text_bytes = 0;
};

// The files to read, in order. Throws DataError for a missing input or an unreadable directory.
std::vector<InputFile> collect_inputs(const std::vector<std::string>& inputs,
                                      const std::set<std::filesystem::path>& exclude,
                                      const CorpusOptions& options, CorpusStats& stats);

// Calls `document` with each document of each file, in order.
void for_each_document(const std::vector<InputFile>& files, const CorpusOptions& options, CorpusStats& stats,
                       const std::function<void(std::string_view)>& document);

// Why a corpus gave no documents: "(N files read, M skipped; no document had ...)".
std::string no_documents_message(const std::vector<InputFile>& files, const CorpusOptions& options,
                                 const CorpusStats& stats);

}  // namespace plexus::cli
