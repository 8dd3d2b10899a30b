// `plexus data prepare|inspect`: text files to a token dataset in Megatron-LM's indexed format
// (PREFIX.bin + PREFIX.idx), and a look inside any such dataset.
//
// Choices made by prepare (also in its --help):
// - Inputs, their UTF-8 check and their documents (paragraphs, or one per file): see
//   text_corpus.hpp. The dataset's own PREFIX.bin/.idx are never read as input.
// - The tokenizer: the byte tokenizer (one token per byte, no end-of-document token,
//   tokenizer.hpp), or with --tokenizer a byte-level BPE tokenizer.json (bpe_tokenizer.hpp).
//   A BPE tokenizer's end-of-document token (<|endoftext|>, <|end_of_text|>, ...; --eod names
//   another, --no-eod leaves it out) ends every document, as Megatron's preprocess_data.py
//   --append-eod does, so a training window that spans two documents sees where one ends.
// - The dtype: by default Megatron's DType.optimal_dtype, uint16 for a vocabulary under 65500,
//   else int32; uint8 (at most 256 tokens) halves a byte dataset and Megatron reads it too.
// - With --tokenizer the tokenizer.json is copied beside the dataset as PREFIX.tokenizer.json,
//   so the dataset carries what decodes it (plexus data inspect uses it; data.tokenizer may
//   name it). Preparing a byte dataset removes a PREFIX.tokenizer.json left by an earlier one.
// - The tokenizer's fingerprint goes to PREFIX.tokenizer-fingerprint.json (with the byte tokenizer
//   too), tied to the .idx by its hash: plexus-train refuses a data.tokenizer that is not the
//   tokenizer the dataset was prepared with, even one of the same size (tokenizer_fingerprint.hpp).
// - Any error leaves no output behind: the writer works on temporary files and renames them
//   only at the end.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <limits>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <boost/json.hpp>

#include "plexus/cli.hpp"
#include "plexus/commands.hpp"
#include "plexus/core/checkpoint/atomic_file.hpp"
#include "plexus/core/data/bpe_tokenizer.hpp"
#include "plexus/core/data/indexed_dataset.hpp"
#include "plexus/core/data/tokenizer.hpp"
#include "plexus/core/data/tokenizer_fingerprint.hpp"
#include "plexus/data_digits.hpp"
#include "plexus/data_samples.hpp"
#include "plexus/text_corpus.hpp"

namespace plexus::cli {
namespace {

namespace fs = std::filesystem;

constexpr const char* kHelp =
    R"(usage: plexus data prepare --input FILE_OR_DIR... --output-prefix PREFIX [options]
       plexus data inspect PREFIX [--json] [--chars N] [--first-tokens N] [--tokenizer FILE]
       plexus data samples [--config FILE] [--set KEY=VALUE]... [--split train|valid] [--first N] [--json]
       plexus data digits --output-prefix PREFIX [--csv FILE]

prepare: tokenizes UTF-8 text files into PREFIX.bin and PREFIX.idx, Megatron-LM's indexed
         dataset format, readable by Megatron as by Plexus. The tokenizer is the byte
         tokenizer (token = byte, vocabulary 256, no end-of-document token), or with
         --tokenizer a byte-level BPE tokenizer.json (Hugging Face's format, as GPT-2 and
         Llama 3 ship, or made by `plexus tokenizer train`); its end-of-document token, if it
         has one (<|endoftext|>, <|end_of_text|>, </s>, ...), is appended to every document
         (--eod TOKEN picks another, --no-eod none) and the file is copied to
         PREFIX.tokenizer.json. The dtype is uint16 for a vocabulary under 65500, else int32
         (Megatron's rule), unless --dtype says otherwise. PREFIX.tokenizer-fingerprint.json
         records which tokenizer it was (plexus-train refuses a data.tokenizer that is not it).
         Each file is split into documents at blank lines (paragraphs), or is one document
         with --document-per-file. Directories are walked recursively in sorted order;
         names that start with '.' are skipped, and so are non-regular entries and binary
         files (a NUL byte or invalid UTF-8), with a warning each; a binary file named on
         the command line is an error. Nothing is written unless everything succeeds.
inspect: prints a dataset's dtype, sequence, document and token counts and the start of its
         text, decoded with PREFIX.tokenizer.json or --tokenizer when the ids are not bytes
         (else the ids). Reads any Megatron indexed dataset with an integer dtype.
samples: the samples a run config's data section serves (data.path's blend, data.split), built
         as plexus-train builds them, and the first of them (`plexus data samples --help`).
digits:  scikit-learn's 8x8 handwritten digits as a multimodal dataset (images paired with
         "<image> this digit is <word>") for MIMO training (`plexus data digits --help`).
)";

fs::path tokenizer_sidecar(const fs::path& prefix) {
  fs::path path = prefix;
  path += ".tokenizer.json";
  return path;
}

// Megatron's DType.optimal_dtype, and whether a dtype holds every id of a vocabulary.
data::TokenDtype optimal_dtype(int64_t vocab_size) {
  return vocab_size < 65500 ? data::TokenDtype::uint16 : data::TokenDtype::int32;
}

// The end-of-document token prepare appends: --eod's, the tokenizer's own, or none.
std::optional<int32_t> choose_eod(const data::Tokenizer& tokenizer, const std::string& eod, bool no_eod) {
  if (no_eod) return std::nullopt;
  if (eod.empty()) return tokenizer.end_of_document();
  const auto* bpe = dynamic_cast<const data::BpeTokenizer*>(&tokenizer);
  const auto id = bpe != nullptr ? bpe->token_id(eod) : std::nullopt;
  if (!id) throw po::error("--eod '" + eod + "': the tokenizer has no such token");
  return id;
}

// Copies the tokenizer file beside the dataset through a temporary file: `commit` renames it
// into place once the dataset is.
class SidecarCopy {
 public:
  SidecarCopy(const fs::path& source, fs::path target) : target_(std::move(target)) {
    temporary_ = target_;
    temporary_ += ".tmp";
    std::error_code ec;
    fs::copy_file(source, temporary_, fs::copy_options::overwrite_existing, ec);
    if (ec) throw DataError(target_.string(), "cannot write " + target_.string() + ": " + ec.message());
  }
  ~SidecarCopy() {
    std::error_code ec;
    if (!committed_) fs::remove(temporary_, ec);
  }
  SidecarCopy(const SidecarCopy&) = delete;
  SidecarCopy& operator=(const SidecarCopy&) = delete;
  void commit() {
    std::error_code ec;
    fs::rename(temporary_, target_, ec);
    if (ec) throw DataError(target_.string(), "cannot rename " + temporary_.string() + " to " + target_.string() + ": " + ec.message());
    committed_ = true;
  }

 private:
  fs::path target_, temporary_;
  bool committed_ = false;
};

// ---------------------------------------------------------------------------- prepare ---

int prepare(const std::vector<std::string>& args) {
  std::vector<std::string> inputs;
  std::string output_prefix, dtype_name = "auto", tokenizer_file, eod;
  CorpusOptions corpus{"plexus data"};
  bool no_eod = false, help = false;
  po::options_description options("prepare options");
  options.add_options()("input", po::value(&inputs)->multitoken()->composing(),
                        "text file or directory to read (repeatable; several may follow one --input)")(
      "output-prefix", po::value(&output_prefix), "write PREFIX.bin and PREFIX.idx")(
      "tokenizer", po::value(&tokenizer_file), "a byte-level BPE tokenizer.json (default: the byte tokenizer)")(
      "eod", po::value(&eod), "the token appended to each document (default: the tokenizer's end-of-document token)")(
      "no-eod", po::bool_switch(&no_eod), "append no end-of-document token")(
      "dtype", po::value(&dtype_name)->default_value(dtype_name),
      "token dtype: auto (uint16 below 65500 tokens, else int32), uint8, uint16 or int32")(
      "min-doc-chars", po::value(&corpus.min_doc_chars)->default_value(corpus.min_doc_chars),
      "drop documents with fewer characters (UTF-8 code points)")(
      "document-per-file", po::bool_switch(&corpus.document_per_file), "each file is one document (default: each paragraph)")(
      "help,h", po::bool_switch(&help), "this help");
  po::variables_map vm;
  po::store(po::command_line_parser(args).options(options).run(), vm);
  po::notify(vm);
  if (help) {
    std::cout << kHelp << "\n" << options;
    return 0;
  }
  if (inputs.empty()) throw po::error("give at least one --input FILE_OR_DIR");
  if (output_prefix.empty()) throw po::error("give --output-prefix PREFIX");
  const std::string lower = output_prefix.size() >= 4 ? output_prefix.substr(output_prefix.size() - 4) : "";
  if (lower == ".bin" || lower == ".idx")
    throw po::error("--output-prefix is a prefix: '" + output_prefix + "' would write " + output_prefix + ".bin and " +
                    output_prefix + ".idx (drop the extension)");
  const std::unique_ptr<data::Tokenizer> tokenizer = data::open_tokenizer(tokenizer_file);
  if (tokenizer_file.empty() && !eod.empty()) throw po::error("--eod needs --tokenizer: the byte tokenizer has no such token");
  const std::optional<int32_t> eod_id = choose_eod(*tokenizer, eod, no_eod);
  const int64_t vocab = tokenizer->vocab_size();
  const std::optional<data::TokenDtype> dtype =
      dtype_name == "auto" ? std::optional(optimal_dtype(vocab)) : data::dtype_from_name(dtype_name);
  if (!dtype || (*dtype != data::TokenDtype::uint8 && *dtype != data::TokenDtype::uint16 &&
                 *dtype != data::TokenDtype::int32))
    throw po::error("--dtype must be uint8, uint16 or int32, not '" + dtype_name +
                    "' (or auto, the default: uint16 below 65500 tokens, else int32)");
  if (data::dtype_max(*dtype) < vocab - 1)
    throw po::error("--dtype " + std::string(data::dtype_name(*dtype)) + " cannot hold the ids of a tokenizer of " +
                    std::to_string(vocab) + " tokens (its largest is " + std::to_string(data::dtype_max(*dtype)) +
                    "); use --dtype auto");

  const fs::path prefix(output_prefix);
  std::set<fs::path> outputs;
  for (const fs::path& file : {data::bin_path(prefix), data::idx_path(prefix), tokenizer_sidecar(prefix),
                               data::fingerprint_path(prefix)}) {
    std::error_code ec;
    const fs::path canonical = fs::weakly_canonical(file, ec);
    outputs.insert(ec ? fs::absolute(file) : canonical);
  }
  CorpusStats stats;
  const std::vector<InputFile> files = collect_inputs(inputs, outputs, corpus, stats);

  data::IndexedDatasetWriter writer(prefix, *dtype);  // fails now if the location is unwritable
  std::optional<SidecarCopy> sidecar;
  if (!tokenizer_file.empty()) sidecar.emplace(tokenizer_file, tokenizer_sidecar(prefix));
  std::vector<int32_t> tokens;
  const auto start = std::chrono::steady_clock::now();
  for_each_document(files, corpus, stats, [&](std::string_view document) {
    tokens.clear();
    tokenizer->encode_append(document, tokens);
    if (eod_id) tokens.push_back(*eod_id);
    writer.add_document(std::span<const int32_t>(tokens));
  });
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (writer.document_count() == 0)
    throw DataError(output_prefix,
                    "no documents to write " + no_documents_message(files, corpus, stats) + "; nothing was written");
  writer.finalize();
  std::error_code ec;
  if (sidecar) {
    sidecar->commit();
  } else {
    fs::remove(tokenizer_sidecar(prefix), ec);  // an earlier dataset's; it does not describe this one
  }
  // The tokenizer's fingerprint, tied to the .idx just written, so that plexus-train can refuse
  // another tokenizer of the same size (tokenizer_fingerprint.hpp). Written atomically; should
  // it fail, a record of an earlier dataset under this prefix no longer matches the new .idx
  // and is ignored with a warning.
  {
    const data::MappedFile idx(data::idx_path(prefix));
    checkpoint::write_file_atomically(data::fingerprint_path(prefix),
                                      data::fingerprint_record(*tokenizer, tokenizer_file, idx.bytes()));
  }
  std::string tokenizer_text = "byte tokenizer, vocabulary 256";
  if (!tokenizer_file.empty()) {
    tokenizer_text = "BPE " + tokenizer_file + ", vocabulary " + std::to_string(vocab);
    const auto* bpe = dynamic_cast<const data::BpeTokenizer*>(tokenizer.get());
    tokenizer_text += eod_id ? ", " + bpe->token_string(*eod_id).value_or("?") + " (id " + std::to_string(*eod_id) +
                                   ") ends each document"
                             : ", no end-of-document token";
  }
  char rate[64];
  std::snprintf(rate, sizeof rate, "%.2f s, %.1f MB/s", seconds,
                seconds > 0 ? static_cast<double>(stats.text_bytes) / seconds / 1e6 : 0.0);
  std::cout << "plexus data prepare: wrote " << data::bin_path(prefix).string() << ", "
            << data::idx_path(prefix).string() << (sidecar ? ", " + tokenizer_sidecar(prefix).string() : "")
            << " and " << data::fingerprint_path(prefix).string() << "\n"
            << "  files:      " << stats.files_read << " read, " << stats.skipped << " skipped\n"
            << "  documents:  " << writer.document_count()
            << (corpus.document_per_file ? " (one per file)" : " (paragraphs)") << "\n"
            << "  tokens:     " << writer.token_count() << " (" << tokenizer_text << "; dtype "
            << data::dtype_name(*dtype) << ")\n"
            << "  bytes:      " << writer.bin_bytes() << " in .bin, " << writer.idx_bytes()
            << " in .idx (from " << stats.text_bytes << " bytes of text)\n"
            << "  reading and encoding: " << rate << "\n";
  return 0;
}

// ---------------------------------------------------------------------------- inspect ---

// Text for a terminal: valid UTF-8 characters as they are, \n \t \\ \" escaped, other
// control characters and invalid bytes as \xNN. Each shown character or escape counts as one
// of `limit` characters; *more is set when the bytes run beyond them.
std::string printable(std::string_view bytes, std::size_t limit, bool* more) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  std::size_t shown = 0, i = 0;
  for (; i < bytes.size() && shown < limit; ++shown) {
    const auto c = static_cast<unsigned char>(bytes[i]);
    if (c >= 0x80) {
      const std::size_t length = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2;
      if (i + length <= bytes.size() && invalid_utf8_at(bytes.substr(i, length)) == std::string_view::npos) {
        out.append(bytes.substr(i, length));  // one whole, valid character
        i += length;
        continue;
      }
    }
    ++i;
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\\' || c == '"') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20 || c >= 0x7F) {
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    } else {
      out += static_cast<char>(c);
    }
  }
  *more = i < bytes.size();
  return out;
}

fs::path resolve_prefix(const std::string& given) {
  const fs::path prefix(given);
  std::error_code ec;
  if (fs::exists(data::idx_path(prefix), ec) || fs::exists(data::bin_path(prefix), ec)) return prefix;
  if (prefix.extension() == ".idx" || prefix.extension() == ".bin") {
    fs::path stripped = prefix;
    stripped.replace_extension();
    if (fs::exists(data::idx_path(stripped), ec)) return stripped;
  }
  return prefix;
}

// The entropy of the token frequencies, in nats: the loss of the best model that ignores context,
// so the baseline a trained model's validation loss should be clearly below.
double unigram_entropy(const data::TokenView& tokens) {
  std::unordered_map<int64_t, uint64_t> counts;
  std::vector<int64_t> chunk(1 << 16);
  for (std::size_t begin = 0; begin < tokens.size(); begin += chunk.size()) {
    const std::size_t n = std::min(chunk.size(), tokens.size() - begin);
    tokens.copy_to(begin, std::span<int64_t>(chunk.data(), n));
    for (std::size_t i = 0; i < n; ++i) ++counts[chunk[i]];
  }
  double entropy = 0;
  const auto total = static_cast<double>(tokens.size());
  for (const auto& [token, count] : counts) {
    const double p = static_cast<double>(count) / total;
    entropy -= p * std::log(p);
  }
  return entropy;
}

int inspect(const std::vector<std::string>& args) {
  std::vector<std::string> prefixes;
  std::string tokenizer_file;
  bool json = false, help = false;
  std::size_t chars = 200, first_tokens = 32;
  po::options_description options("inspect options");
  options.add_options()("json", po::bool_switch(&json), "print one JSON object (counts and the first token ids)")(
      "tokenizer", po::value(&tokenizer_file), "decode with this tokenizer.json (default: PREFIX.tokenizer.json if there)")(
      "chars", po::value(&chars)->default_value(chars), "how many characters of text to show")(
      "first-tokens", po::value(&first_tokens)->default_value(first_tokens), "how many token ids --json lists")(
      "help,h", po::bool_switch(&help), "this help");
  po::options_description hidden_options;
  hidden_options.add_options()("prefix", po::value(&prefixes));
  po::options_description all;
  all.add(options).add(hidden_options);
  po::positional_options_description positional;
  positional.add("prefix", -1);
  po::variables_map vm;
  po::store(po::command_line_parser(args).options(all).positional(positional).run(), vm);
  po::notify(vm);
  if (help) {
    std::cout << kHelp << "\n" << options;
    return 0;
  }
  if (prefixes.size() != 1) throw po::error("give exactly one dataset PREFIX (the path without .bin/.idx)");

  const data::IndexedDataset dataset(resolve_prefix(prefixes.front()));
  const data::TokenView tokens = dataset.tokens();
  if (json) {
    boost::json::object doc;
    doc["prefix"] = dataset.prefix().string();
    doc["dtype"] = std::string(data::dtype_name(dataset.dtype()));
    doc["dtype_code"] = static_cast<int>(dataset.dtype());
    doc["sequence_count"] = dataset.sequence_count();
    doc["document_count"] = dataset.document_count();
    doc["token_count"] = dataset.token_count();
    doc["multimodal"] = dataset.multimodal();
    doc["unigram_entropy_nats"] = unigram_entropy(tokens);
    boost::json::array first;
    for (std::size_t i = 0; i < std::min<std::size_t>(first_tokens, tokens.size()); ++i) first.push_back(tokens[i]);
    doc["first_tokens"] = std::move(first);
    std::cout << boost::json::serialize(doc) << "\n";
    return 0;
  }
  std::cout << "dataset:    " << dataset.prefix().string() << "\n"
            << "dtype:      " << data::dtype_name(dataset.dtype()) << " (code " << static_cast<int>(dataset.dtype())
            << ")" << (dataset.multimodal() ? ", multimodal (sequence modes ignored)" : "") << "\n"
            << "sequences:  " << dataset.sequence_count() << "\n"
            << "documents:  " << dataset.document_count() << "\n"
            << "tokens:     " << dataset.token_count() << "\n"
            << "unigram entropy: " << unigram_entropy(tokens)
            << " nats/token (the loss of a model that ignores context)\n";
  // A character is at most 4 bytes (and an escape stands for one), so 4 * chars tokens suffice.
  const std::size_t take = std::min<std::size_t>(tokens.size(), chars * 4);
  std::vector<int64_t> head(take);
  tokens.copy_to(0, head);
  const bool bytes = std::all_of(head.begin(), head.end(), [](int64_t t) { return t >= 0 && t <= 255; });
  std::error_code ec;
  if (tokenizer_file.empty() && !bytes && fs::exists(tokenizer_sidecar(dataset.prefix()), ec))
    tokenizer_file = tokenizer_sidecar(dataset.prefix()).string();
  if (bytes && tokenizer_file.empty()) {
    bool more = false;
    const std::string text = printable(data::ByteTokenizer().decode(std::span<const int64_t>(head)), chars, &more);
    std::cout << "text:       \"" << text << "\"" << (more || take < tokens.size() ? "..." : "") << "\n";
  } else if (!tokenizer_file.empty()) {
    const std::unique_ptr<data::Tokenizer> tokenizer = data::open_tokenizer(tokenizer_file);
    std::vector<int32_t> ids;  // a BPE token is at least a byte, so `take` tokens cover `chars` characters
    for (const int64_t t : head)
      ids.push_back(t >= 0 && t <= std::numeric_limits<int32_t>::max() ? static_cast<int32_t>(t) : -1);
    bool more = false;
    const std::string text = printable(tokenizer->decode_for_display(ids), chars, &more);
    std::cout << "tokenizer:  " << tokenizer_file << " (vocabulary " << tokenizer->vocab_size() << ")\n"
              << "text:       \"" << text << "\"" << (more || take < tokens.size() ? "..." : "") << "\n";
  } else {
    std::cout << "tokens are not bytes (made with another tokenizer; --tokenizer FILE decodes them); the first token ids:\n ";
    for (std::size_t i = 0; i < std::min<std::size_t>(take, 32); ++i) std::cout << " " << head[i];
    std::cout << (take > 32 ? " ..." : "") << "\n";
  }
  return 0;
}

}  // namespace

int data_command(const std::vector<std::string>& args) {
  return run_guarded("plexus data", [&] {
    if (!args.empty() && (args[0] == "--help" || args[0] == "-h" || args[0] == "help")) {
      std::cout << kHelp;
      return 0;
    }
    if (args.empty() ||
        (args[0] != "prepare" && args[0] != "inspect" && args[0] != "samples" && args[0] != "digits")) {
      std::cerr << "plexus data: error: expected 'prepare', 'inspect', 'samples' or 'digits'\n\n" << kHelp;
      return 1;
    }
    const std::vector<std::string> rest(args.begin() + 1, args.end());
    if (args[0] == "samples") return data_samples(rest);
    if (args[0] == "digits") return data_digits(rest);
    return args[0] == "prepare" ? prepare(rest) : inspect(rest);
  });
}

}  // namespace plexus::cli
