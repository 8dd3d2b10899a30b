// Plexus and Hugging Face's `tokenizers` (the real library, pinned by scripts/python-env.sh) read
// each other's tokenizer.json and encode the same texts to the same ids:
//   (a) a tokenizer Plexus trained, loaded by tokenizers;
//   (b) tokenizers' own byte-level BPEs (ByteLevelBPETokenizer; BpeTrainer with a prefix space,
//       with Llama 3's Split regex and ignore_merges, with a \p{Lu}/\p{Ll}/\p{M} regex, with
//       GPT-2's regex as an explicit Split), loaded by Plexus;
//   (c) a tokenizer.json laid out as GPT-2's (ByteLevel with the GPT-2 regex, "a b" merges,
//       <|endoftext|> last).
// The texts: contractions, whitespace runs, numbers, punctuation, non-ASCII letters, emoji, CJK,
// special tokens and 600 random mixes (tests/reference/tokenizers_interop.py). Plexus's decode
// must equal tokenizers' decode of the same ids, and the pre-tokenized pieces must be equal too,
// also over every code point for the three split regexes (GPT-2's, Llama 3's, and one with
// \p{Lu}/\p{Ll}/\p{M}), which checks the Unicode classes against tokenizers' Oniguruma. Needs the environment
// of scripts/python-env.sh (<repo>/.venv, or PLEXUS_VENV); without it the suite reports itself skipped.
#define BOOST_TEST_MODULE tokenizers_interop
#include <boost/test/unit_test.hpp>

#include <boost/json.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>

#include "run_process.hpp"
#include "skip_module.hpp"
#include "temp_dir.hpp"
#include "venv_python.hpp"

using plexus::test::quote;
using plexus::test::run_process;
namespace fs = std::filesystem;

namespace {

const std::string kPlexus = std::string(PLEXUS_BUILD_DIR) + "/bin/plexus";
const std::string kScript = std::string(PLEXUS_SOURCE_DIR) + "/tests/reference/tokenizers_interop.py";

std::string python() {
  return plexus::test::venv_python("PLEXUS_VENV", ".venv").string();
}

bool has_tokenizers() {
  return plexus::test::python_runs(python(), "import tokenizers");
}

// One working directory with the corpus and the texts, made once.
struct Shared {
  plexus::test::TempDir dir;
  fs::path corpus, texts, sweep;
  Shared() {
    std::string text;
    const char* lines[] = {
        "The quick brown fox jumps over the lazy dog. It's a dog's life, isn't it?",
        "We'll see: 3 dogs, 12 cats and 1024 birds were counted on 2024-06-11.",
        "Caf\u00e9 cr\u00e8me br\u00fbl\u00e9e \u2014 na\u00efve fa\u00e7ade; \u00dcber \u00c4rger \u00d6l.",
        "\u4e2d\u6587\u7684\u53e5\u5b50\u3002\u65e5\u672c\u8a9e\u306e\u6587\u3002\ud55c\uad6d\uc5b4 "
        "\ubb38\uc7a5.",
        "\u041f\u0440\u0438\u0432\u0435\u0442, \u043c\u0438\u0440! \u0393\u03b5\u03b9\u03ac "
        "\u03c3\u03bf\u03c5. \U0001f389\U0001f680",
        "    indented code(x) -> y  # comment\n\tTabbed line",
    };
    for (int i = 0; i < 60; ++i)
      for (const char* line : lines) text += std::string(line) + " " + std::to_string(i * 7) + "\n";
    corpus = dir.write("corpus.txt", text);
    texts = dir.path() / "texts.jsonl";
    sweep = dir.path() / "sweep.jsonl";
    for (const auto& [command, file] : {std::pair{"texts", texts}, std::pair{"sweep", sweep}}) {
      const auto made =
          run_process(quote(python()) + " " + quote(kScript) + " " + command + " " + quote(file.string()));
      BOOST_TEST_REQUIRE(made.status == 0, made.output);
    }
  }
};

Shared& shared() {
  static Shared s;
  return s;
}

// Plexus's pre-tokenized pieces of every text of `texts` must be tokenizers'.
void check_pieces(const fs::path& tokenizer, const fs::path& texts) {
  const fs::path pieces =
      shared().dir.path() / (tokenizer.stem().string() + "." + texts.stem().string() + ".pieces");
  const auto split =
      run_process(kPlexus + " tokenizer encode --pieces --tokenizer " + quote(tokenizer.string()) +
                  " --jsonl " + quote(texts.string()) + " > " + quote(pieces.string()));
  BOOST_TEST_REQUIRE(split.status == 0, split.output);
  const auto same =
      run_process(quote(python()) + " " + quote(kScript) + " pieces " + quote(tokenizer.string()) + " " +
                  quote(texts.string()) + " " + quote(pieces.string()));
  BOOST_TEST(same.status == 0, tokenizer.stem().string()
                                   << " pieces of " << texts.filename().string() << ": " << same.output);
}

// Plexus encodes and decodes every text with `tokenizer`; tokenizers must agree on all of it.
void check_agreement(const fs::path& tokenizer, bool exact) {
  const fs::path dir = shared().dir.path();
  const std::string stem = tokenizer.stem().string();
  const fs::path ids = dir / (stem + ".ids.jsonl"), decoded = dir / (stem + ".decoded.jsonl");
  const auto encoded =
      run_process(kPlexus + " tokenizer encode --tokenizer " + quote(tokenizer.string()) + " --jsonl " +
                  quote(shared().texts.string()) + " > " + quote(ids.string()));
  BOOST_TEST_REQUIRE(encoded.status == 0, encoded.output);
  const auto back = run_process(kPlexus + " tokenizer decode --tokenizer " + quote(tokenizer.string()) +
                                " --jsonl " + quote(ids.string()) + " > " + quote(decoded.string()));
  BOOST_TEST_REQUIRE(back.status == 0, back.output);
  const auto compared =
      run_process(quote(python()) + " " + quote(kScript) + " compare " + quote(tokenizer.string()) + " " +
                  quote(shared().texts.string()) + " " + quote(ids.string()) + " " + quote(decoded.string()) +
                  (exact ? " exact" : ""));
  BOOST_TEST(compared.status == 0, stem << ": " << compared.output);
  const auto summary = boost::json::parse(compared.output).as_object();
  BOOST_TEST(summary.at("texts").as_int64() > 600);
  BOOST_TEST_MESSAGE(stem << ": " << compared.output);
  check_pieces(tokenizer, shared().texts);
}

fs::path train_with_tokenizers(const std::string& kind) {
  const fs::path out = shared().dir.path() / ("hf_" + kind + ".json");
  const auto trained = run_process(quote(python()) + " " + quote(kScript) + " train " + kind + " " +
                                   quote(shared().corpus.string()) + " " + quote(out.string()));
  BOOST_TEST_REQUIRE(trained.status == 0, trained.output);
  return out;
}

}  // namespace

PLEXUS_SKIP_MODULE_UNLESS(
    has_tokenizers(),
    "no Python environment with `tokenizers` (run scripts/python-env.sh, or set PLEXUS_VENV)")

BOOST_AUTO_TEST_CASE(a_tokenizer_plexus_trained_encodes_alike_in_tokenizers) {
  const fs::path out = shared().dir.path() / "plexus_trained.json";
  const auto trained =
      run_process(kPlexus + " tokenizer train --input " + quote(shared().corpus.string()) +
                  " --vocab-size 1200 --special '<|endoftext|>' --special '<|begin_of_text|>' --output " +
                  quote(out.string()));
  BOOST_TEST_REQUIRE(trained.status == 0, trained.output);
  check_agreement(out, true);
  check_pieces(out, shared().sweep);  // GPT-2's regex over every code point
}

BOOST_AUTO_TEST_CASE(tokenizers_own_byte_level_bpes_encode_alike_in_plexus) {
  for (const std::string kind : {"bytelevel", "llama3", "o200k", "gpt2split"}) {
    const fs::path tokenizer = train_with_tokenizers(kind);
    check_agreement(tokenizer, true);
    if (kind == "llama3" || kind == "o200k") check_pieces(tokenizer, shared().sweep);
  }
  // A prefix space changes the decoded text (" Hello"), the same way on both sides.
  check_agreement(train_with_tokenizers("prefix"), false);
}

BOOST_AUTO_TEST_CASE(a_gpt2_format_tokenizer_json_encodes_alike) {
  const fs::path out = shared().dir.path() / "gpt2_format.json";
  const auto made = run_process(quote(python()) + " " + quote(kScript) + " gpt2 " +
                                quote(shared().corpus.string()) + " " + quote(out.string()));
  BOOST_TEST_REQUIRE(made.status == 0, made.output);
  const auto inspected = run_process(kPlexus + " tokenizer inspect --json " + quote(out.string()));
  BOOST_TEST_REQUIRE(inspected.status == 0, inspected.output);
  const auto info = boost::json::parse(inspected.output).as_object();
  BOOST_TEST(info.at("vocab_size").as_int64() > 400);
  // <|endoftext|>, the last id, as in GPT-2
  BOOST_TEST(info.at("end_of_document").as_int64() == info.at("vocab_size").as_int64() - 1);
  check_agreement(out, true);
}

BOOST_AUTO_TEST_CASE(the_committed_unicode_tables_are_generated_from_the_pinned_unicode_version) {
  const auto check =
      run_process(quote(python()) + " " +
                  quote(std::string(PLEXUS_SOURCE_DIR) + "/scripts/gen_unicode_tables.py") + " --check");
  BOOST_TEST(check.status == 0, check.output);
}
