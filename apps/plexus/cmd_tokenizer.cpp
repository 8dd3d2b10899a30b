// `plexus tokenizer train|encode|decode|inspect`: make a byte-level BPE tokenizer.json from
// text, and use or look inside one (Plexus's own or one a model ships).
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <limits>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <boost/json.hpp>

#include "plexus/cli.hpp"
#include "plexus/commands.hpp"
#include "plexus/core/data/bpe_tokenizer.hpp"
#include "plexus/core/data/bpe_trainer.hpp"
#include "plexus/core/data/indexed_dataset.hpp"
#include "plexus/text_corpus.hpp"

namespace plexus::cli {
namespace {

namespace fs = std::filesystem;

constexpr const char* kHelp =
    R"(usage: plexus tokenizer train --input FILE_OR_DIR... --vocab-size N --output tokenizer.json [options]
       plexus tokenizer encode --tokenizer FILE [TEXT...] [--input FILE] [--jsonl FILE] [--pieces]
       plexus tokenizer decode --tokenizer FILE ID... | --jsonl FILE
       plexus tokenizer inspect FILE [--json]

train:   learns a byte-level BPE from UTF-8 text files (read as `plexus data prepare` reads
         them: directories walked, documents at blank lines) and writes Hugging Face's
         tokenizer.json, which the `tokenizers` library and transformers load. Words are split
         by GPT-2's regex; the vocabulary is the 256 bytes (id = byte value), then the merges,
         most frequent pair first, then the special tokens (default <|endoftext|>, which
         `plexus data prepare` appends to every document).
encode:  the token ids of each TEXT argument (one line each), of a whole --input file, or of
         each line of a --jsonl file (a JSON string per line; a JSON array of ids per line
         out). --pieces prints the pre-tokenized pieces instead, in byte-level characters
         (as Hugging Face's pre_tokenize_str shows them).
decode:  the text of token ids (given as arguments, or a JSON array per line of --jsonl: a
         JSON string per line out, invalid UTF-8 as U+FFFD). Special tokens are included.
inspect: vocabulary size, merges, added tokens, pre-tokenizer, end-of-document token.
)";

std::string read_text_file(const std::string& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) throw DataError(file, file + ": cannot read");
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// Bytes as a JSON string: invalid UTF-8 bytes each become U+FFFD.
std::string json_text(std::string_view bytes) {
  std::string valid;
  std::size_t at = 0;
  while (at < bytes.size()) {
    const std::size_t bad = invalid_utf8_at(bytes.substr(at));
    if (bad == std::string_view::npos) {
      valid.append(bytes.substr(at));
      break;
    }
    valid.append(bytes.substr(at, bad));
    valid += "\xEF\xBF\xBD";
    at += bad + 1;
  }
  return boost::json::serialize(boost::json::value(valid));
}

// Each line of a JSON-lines file, parsed; errors name the file and line.
std::vector<boost::json::value> read_jsonl(const std::string& file) {
  std::istringstream lines(read_text_file(file));
  std::vector<boost::json::value> values;
  std::size_t number = 0;
  for (std::string line; std::getline(lines, line);) {
    ++number;
    if (line.empty()) continue;
    boost::system::error_code ec;
    values.push_back(boost::json::parse(line, ec));
    if (ec) throw DataError(file, file + ": line " + std::to_string(number) + ": not JSON: " + ec.message());
  }
  return values;
}

std::string ids_line(const std::vector<int32_t>& ids, bool json) {
  std::string line = json ? "[" : "";
  for (std::size_t i = 0; i < ids.size(); ++i) {
    if (i > 0) line += json ? ',' : ' ';
    line += std::to_string(ids[i]);
  }
  return json ? line + "]" : line;
}

std::string pieces_line(const data::BpeTokenizer& tokenizer, std::string_view text) {
  boost::json::array pieces;
  // Added tokens as they are; the rest in byte-level characters, as Hugging Face shows them.
  for (const data::BpeTokenizer::Piece& piece : tokenizer.pieces(text))
    pieces.emplace_back(boost::json::string(piece.added ? piece.bytes : data::byte_level_text(piece.bytes)));
  return boost::json::serialize(pieces);
}

// --------------------------------------------------------------------------------- train ---

int train(const std::vector<std::string>& args) {
  std::vector<std::string> inputs, specials;
  std::string output;
  int64_t vocab_size = 0;
  uint64_t min_frequency = 2;
  CorpusOptions corpus{"plexus tokenizer"};
  bool no_special = false, help = false;
  po::options_description options("train options");
  options.add_options()("input", po::value(&inputs)->multitoken()->composing(),
                        "text file or directory to learn from (repeatable)")(
      "vocab-size", po::value(&vocab_size),
      "tokens in the vocabulary: the 256 bytes, the merges, the special tokens")(
      "output", po::value(&output), "the tokenizer.json to write")(
      "special", po::value(&specials)->composing(), "a special token (repeatable; default <|endoftext|>)")(
      "no-special", po::bool_switch(&no_special), "no special tokens")(
      "min-frequency", po::value(&min_frequency)->default_value(min_frequency),
      "merge no pair seen fewer times")("min-doc-chars",
                                        po::value(&corpus.min_doc_chars)->default_value(corpus.min_doc_chars),
                                        "skip documents with fewer characters")(
      "document-per-file", po::bool_switch(&corpus.document_per_file),
      "each file is one document (default: each paragraph)")("help,h", po::bool_switch(&help), "this help");
  po::variables_map vm;
  po::store(po::command_line_parser(args).options(options).run(), vm);
  po::notify(vm);
  if (help) {
    std::cout << kHelp << "\n" << options;
    return 0;
  }
  if (inputs.empty()) throw po::error("give at least one --input FILE_OR_DIR");
  if (vocab_size <= 0) throw po::error("give --vocab-size N (at least 256 plus the special tokens)");
  if (output.empty()) throw po::error("give --output FILE (a tokenizer.json)");
  if (no_special && !specials.empty()) throw po::error("--no-special and --special contradict each other");
  if (!no_special && specials.empty()) specials.emplace_back("<|endoftext|>");

  data::BpeTrainer trainer({vocab_size, min_frequency, specials});
  std::set<fs::path> exclude;
  std::error_code ec;
  exclude.insert(fs::weakly_canonical(output, ec));
  CorpusStats stats;
  const std::vector<InputFile> files = collect_inputs(inputs, exclude, corpus, stats);
  const auto start = std::chrono::steady_clock::now();
  for_each_document(files, corpus, stats, [&](std::string_view document) { trainer.add_text(document); });
  if (stats.documents == 0)
    throw DataError(output, "no documents to learn from " + no_documents_message(files, corpus, stats));
  data::BpeTrainingSummary summary;
  const data::BpeTokenizer tokenizer = trainer.train(&summary);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  // Through a temporary file: an existing tokenizer.json is replaced only by a complete one.
  fs::path temporary = output;
  temporary += ".tmp";
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    out << tokenizer.to_json();
    out.close();
    if (!out) {
      fs::remove(temporary, ec);
      throw DataError(output, "cannot write " + output + " (temporary file " + temporary.string() + ")");
    }
  }
  fs::rename(temporary, output, ec);
  if (ec) {
    std::error_code ignored;
    fs::remove(temporary, ignored);
    throw DataError(output, "cannot rename " + temporary.string() + " to " + output + ": " + ec.message());
  }
  char timing[32];
  std::snprintf(timing, sizeof timing, "%.2f s", seconds);
  std::cout << "plexus tokenizer train: wrote " << output << "\n"
            << "  text:       " << stats.files_read << " files, " << stats.documents << " documents, "
            << stats.text_bytes << " bytes, " << summary.words << " words (" << summary.distinct_words
            << " distinct)\n"
            << "  vocabulary: " << tokenizer.vocab_size() << " tokens: 256 bytes, " << summary.merges
            << " merges, " << tokenizer.added_tokens().size() << " special\n";
  if (!summary.stopped_because.empty())
    std::cout << "  stopped before --vocab-size " << vocab_size << ": " << summary.stopped_because << "\n";
  std::cout << "  time:       " << timing << "\n";
  return 0;
}

// -------------------------------------------------------------------------------- encode ---

int encode(const std::vector<std::string>& args) {
  std::vector<std::string> texts;
  std::string tokenizer_file, input, jsonl;
  bool pieces = false, json = false, help = false;
  po::options_description options("encode options");
  options.add_options()("tokenizer", po::value(&tokenizer_file), "the tokenizer.json")(
      "input", po::value(&input), "encode this file's whole text")(
      "jsonl", po::value(&jsonl), "encode each line's JSON string; print a JSON array per line")(
      "pieces", po::bool_switch(&pieces), "print the pre-tokenized pieces instead of ids")(
      "json", po::bool_switch(&json), "print JSON arrays")("help,h", po::bool_switch(&help), "this help");
  po::options_description hidden;
  hidden.add_options()("text", po::value(&texts));
  po::options_description all;
  all.add(options).add(hidden);
  po::positional_options_description positional;
  positional.add("text", -1);
  po::variables_map vm;
  po::store(po::command_line_parser(args).options(all).positional(positional).run(), vm);
  po::notify(vm);
  if (help) {
    std::cout << kHelp << "\n" << options;
    return 0;
  }
  if (tokenizer_file.empty()) throw po::error("give --tokenizer FILE");
  if (texts.empty() == (input.empty() && jsonl.empty()) || (!input.empty() && !jsonl.empty()))
    throw po::error("give TEXT arguments, --input FILE or --jsonl FILE (one of them)");
  const data::BpeTokenizer tokenizer = data::BpeTokenizer::load(tokenizer_file);
  const auto one = [&](std::string_view text, bool as_json) {
    std::cout << (pieces ? pieces_line(tokenizer, text) : ids_line(tokenizer.encode(text), as_json)) << "\n";
  };
  if (!jsonl.empty()) {
    std::size_t line = 0;
    for (const boost::json::value& value : read_jsonl(jsonl)) {
      ++line;
      if (!value.is_string())
        throw DataError(jsonl, jsonl + ": line " + std::to_string(line) + ": expected a JSON string");
      one(value.get_string(), true);
    }
  } else if (!input.empty()) {
    one(read_text_file(input), json);
  } else {
    for (const std::string& text : texts) one(text, json);
  }
  return 0;
}

// -------------------------------------------------------------------------------- decode ---

int decode(const std::vector<std::string>& args) {
  std::vector<std::string> id_args;
  std::string tokenizer_file, jsonl;
  bool help = false;
  po::options_description options("decode options");
  options.add_options()("tokenizer", po::value(&tokenizer_file), "the tokenizer.json")(
      "jsonl", po::value(&jsonl), "decode each line's JSON array of ids; print a JSON string per line")(
      "help,h", po::bool_switch(&help), "this help");
  po::options_description hidden;
  hidden.add_options()("id", po::value(&id_args));
  po::options_description all;
  all.add(options).add(hidden);
  po::positional_options_description positional;
  positional.add("id", -1);
  po::variables_map vm;
  po::store(po::command_line_parser(args).options(all).positional(positional).run(), vm);
  po::notify(vm);
  if (help) {
    std::cout << kHelp << "\n" << options;
    return 0;
  }
  if (tokenizer_file.empty()) throw po::error("give --tokenizer FILE");
  if (id_args.empty() == jsonl.empty()) throw po::error("give token ids or --jsonl FILE (one of them)");
  const data::BpeTokenizer tokenizer = data::BpeTokenizer::load(tokenizer_file);
  if (!jsonl.empty()) {
    std::size_t line = 0;
    for (const boost::json::value& value : read_jsonl(jsonl)) {
      ++line;
      const std::string where = jsonl + ": line " + std::to_string(line);
      if (!value.is_array()) throw DataError(jsonl, where + ": expected a JSON array of token ids");
      std::vector<int32_t> ids;
      for (const boost::json::value& id : value.get_array()) {
        if (!id.is_int64()) throw DataError(jsonl, where + ": expected integer token ids");
        ids.push_back(static_cast<int32_t>(id.get_int64()));
      }
      std::cout << json_text(tokenizer.decode(ids)) << "\n";
    }
    return 0;
  }
  std::vector<int32_t> ids;
  for (const std::string& arg : id_args) {
    std::istringstream words(arg);
    for (std::string word; words >> word;) {
      std::size_t used = 0;
      long value = -1;
      try {
        value = std::stol(word, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (used != word.size() || value < 0 || value > std::numeric_limits<int32_t>::max())
        throw po::error("'" + word + "' is not a token id");
      ids.push_back(static_cast<int32_t>(value));
    }
  }
  std::cout << tokenizer.decode(ids) << "\n";
  return 0;
}

// ------------------------------------------------------------------------------- inspect ---

int inspect(const std::vector<std::string>& args) {
  std::vector<std::string> files;
  bool json = false, help = false;
  po::options_description options("inspect options");
  options.add_options()("json", po::bool_switch(&json), "print one JSON object")(
      "help,h", po::bool_switch(&help), "this help");
  po::options_description hidden;
  hidden.add_options()("file", po::value(&files));
  po::options_description all;
  all.add(options).add(hidden);
  po::positional_options_description positional;
  positional.add("file", -1);
  po::variables_map vm;
  po::store(po::command_line_parser(args).options(all).positional(positional).run(), vm);
  po::notify(vm);
  if (help) {
    std::cout << kHelp << "\n" << options;
    return 0;
  }
  if (files.size() != 1) throw po::error("give exactly one tokenizer.json");
  const data::BpeTokenizer tokenizer = data::BpeTokenizer::load(files.front());
  const auto eod = tokenizer.end_of_document();
  std::size_t specials = 0;
  for (const data::AddedToken& token : tokenizer.added_tokens()) specials += token.special ? 1 : 0;
  if (json) {
    boost::json::object doc{{"file", files.front()},
                            {"vocab_size", tokenizer.vocab_size()},
                            {"vocab_entries", tokenizer.vocab_entries()},
                            {"merges", tokenizer.merge_count()},
                            {"added_tokens", tokenizer.added_tokens().size()},
                            {"special_tokens", specials},
                            {"missing_bytes", tokenizer.missing_bytes()},
                            {"pre_tokenizer", tokenizer.pre_tokenizer_summary()}};
    doc["end_of_document"] = eod ? boost::json::value(*eod) : boost::json::value(nullptr);
    std::cout << boost::json::serialize(doc) << "\n";
    return 0;
  }
  std::cout << "tokenizer:       " << files.front() << " (byte-level BPE)\n"
            << "vocab_size:      " << tokenizer.vocab_size() << " (model.vocab_size must be at least this)\n"
            << "vocab entries:   " << tokenizer.vocab_entries() << ", merges " << tokenizer.merge_count()
            << ", added tokens " << tokenizer.added_tokens().size() << " (" << specials << " special)\n"
            << "pre-tokenizer:   " << tokenizer.pre_tokenizer_summary() << "\n"
            << "end of document: "
            << (eod ? tokenizer.token_string(*eod).value_or("?") + " (id " + std::to_string(*eod) + ")"
                    : "none")
            << "\n";
  if (tokenizer.missing_bytes() > 0)
    std::cout << "warning: model.vocab lacks " << tokenizer.missing_bytes()
              << " of the 256 byte tokens: text with those bytes loses them (or becomes unk_token)\n";
  return 0;
}

}  // namespace

int tokenizer_command(const std::vector<std::string>& args) {
  return run_guarded("plexus tokenizer", [&] {
    if (!args.empty() && (args[0] == "--help" || args[0] == "-h" || args[0] == "help")) {
      std::cout << kHelp;
      return 0;
    }
    const std::vector<std::string> rest(args.empty() ? args.end() : args.begin() + 1, args.end());
    if (!args.empty() && args[0] == "train") return train(rest);
    if (!args.empty() && args[0] == "encode") return encode(rest);
    if (!args.empty() && args[0] == "decode") return decode(rest);
    if (!args.empty() && args[0] == "inspect") return inspect(rest);
    std::cerr << "plexus tokenizer: error: expected 'train', 'encode', 'decode' or 'inspect'\n\n" << kHelp;
    return 1;
  });
}

}  // namespace plexus::cli
