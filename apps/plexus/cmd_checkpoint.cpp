// `plexus checkpoint inspect|convert`: the command line. What a checkpoint holds is printed by
// checkpoint_inspect.cpp; the conversion between a GPT and Megatron's hybrid layouts is
// checkpoint_convert.cpp (the pairing of layers: checkpoint_rename.cpp).
#include <filesystem>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "checkpoint_convert.hpp"
#include "checkpoint_inspect.hpp"
#include "hf_export.hpp"
#include "hf_import.hpp"
#include "plexus/cli.hpp"
#include "plexus/commands.hpp"
#include "plexus/core/checkpoint/checkpoint_dir.hpp"

namespace plexus::cli {
namespace {

namespace fs = std::filesystem;
namespace ck = checkpoint;

constexpr const char* kHelp =
    R"(usage: plexus checkpoint inspect DIR [--json] [--verify] [--plugin-path DIR]...
       plexus checkpoint convert SRC DST --direction gpt-to-hybrid|hybrid-to-gpt
                                 [--hybrid-layer-pattern PATTERN] [--plugin-path DIR]...
       plexus checkpoint export SRC OUT --format hf
       plexus checkpoint import HF_DIR OUT --format hf [--seq-length N]

DIR and SRC are a checkpoint directory (runs/NAME/checkpoints/step_00000100), or a run's
checkpoints directory or the run directory, meaning the newest complete checkpoint in it. A
partial or damaged checkpoint is refused naming the file.

inspect: the step and the rest of state.json (data position, ...), the model (its decoder in
         the words of the saved config's stack, whose plugin is found as a run finds it; the
         hidden size, heads, sequence, vocabulary), every tensor of model.safetensors by decoder
         layer (name, shape, dtype, bytes) with the totals and the layers stored there, and the
         optimizer file's tensor count and bytes. --json prints all of it, the whole run config
         and the decoder's layers included. A stack that cannot be loaded leaves the decoder
         "unknown", saying why; the tensors are listed all the same.
         --verify also reads every tensor: its bytes against the checksum recorded when it
         was written, its values for NaN and infinities; and the files against each other
         (the step in state.json and in each file, the tensor counts). It prints what it
         checked and exits with status 1 naming every bad tensor and file when anything is
         wrong (plexus-train verifies the same before it resumes, and refuses such a
         checkpoint). Without --verify, inspect shows a damaged checkpoint as it is.

convert: writes SRC as a new checkpoint DST in another decoder layout of the same layers,
         paired as Megatron-LM's tools/checkpoint/gpt_hybrid_conversion.py pairs them, by layer
         component: the i-th layer of a component (the attention of GPT layer i: the i-th '*'
         of the pattern; its MLP: the i-th '-') is the i-th of that component in the other.
           gpt-to-hybrid  a GPT (or "[*-]" x L) to --hybrid-layer-pattern, by default the
                          ungrouped "*-" x L, whose layers are stored under their own index
           hybrid-to-gpt  a pattern of '*' and '-' layers to the GPT
         Parameters and AdamW moments are renamed; the step, the data position and the run
         config (but model.pattern and model.num_layers) are kept, so DST resumes exactly
         with the converted model (the command prints the settings). Refused: a layer whose
         component no GPT layer is made of ('M', ...), multi-token prediction, numbers of layers
         no GPT has (unequal numbers of '*' and '-'), and an existing DST (nothing is ever
         replaced; DST appears complete or not at all).

  plexus checkpoint inspect runs/gpt/checkpoints/step_00000500
  plexus checkpoint inspect --verify runs/gpt
  plexus checkpoint convert runs/gpt/checkpoints/step_00000500 runs/hybrid-start --direction gpt-to-hybrid
  plexus-train --config gpt.json --set 'model.pattern=*-*-*-*-' --set model.num_layers=8 --resume runs/hybrid-start
)";

// The checkpoint a DIR argument means: DIR itself when it has checkpoint files (or is no
// directory of checkpoints either); otherwise the newest complete checkpoint of DIR as a
// checkpoints root, or of DIR/checkpoints. A root with only unfinished checkpoints is refused
// naming one and why.
fs::path resolve_checkpoint(const fs::path& dir) {
  std::error_code ec;
  if (fs::exists(dir / ck::kCompleteMarker, ec) || fs::exists(dir / ck::kModelFile, ec)) return dir;
  std::vector<ck::SkippedEntry> unfinished;
  for (const fs::path& root : {dir, dir / "checkpoints"}) {
    if (!fs::is_directory(root, ec)) continue;
    const ck::CheckpointScan scan = ck::scan_checkpoints(root);
    if (!scan.complete.empty()) {
      std::cerr << "plexus checkpoint: " << dir.string() << " holds checkpoints: using the newest, "
                << scan.complete.back().dir.string() << "\n";
      return scan.complete.back().dir;
    }
    for (const ck::SkippedEntry& entry : scan.skipped)
      if (entry.path.filename().string().starts_with("step_") ||
          entry.path.filename().string().starts_with(".step_"))
        unfinished.push_back(entry);
  }
  if (!unfinished.empty())
    throw CheckpointError(dir, "holds no complete checkpoint (" + unfinished.front().path.string() + ": " +
                                   unfinished.front().reason + ")");
  return dir;  // load_checkpoint says what is wrong with it
}

int inspect(const std::vector<std::string>& paths, bool json, bool verify, const PluginOptions& plugins) {
  if (paths.size() != 1) {
    std::cerr << "plexus checkpoint: error: inspect takes one directory\n\n" << kHelp;
    return 1;
  }
  // Loaded as it is, so that a damaged checkpoint can still be looked at; --verify then reports
  // every problem rather than the load stopping at the first file.
  const ck::LoadedCheckpoint loaded =
      ck::load_checkpoint(resolve_checkpoint(paths[0]), ck::ReadMode::map, ck::Verify::structure);
  std::optional<ck::CheckpointCheck> check;
  if (verify) check = ck::verify_checkpoint(loaded);
  print_inspection(loaded, json, {plugins.dirs(), plugins.allow_world_writable}, std::cout,
                   check ? &*check : nullptr);
  if (!check || check->ok()) return 0;
  const std::vector<std::string> problems = check->problems();
  std::cerr << "plexus checkpoint: error: " << loaded.dir.string() << " failed verification ("
            << problems.size() << (problems.size() == 1 ? " problem" : " problems") << "):\n";
  for (const std::string& p : problems) std::cerr << "  " << p << "\n";
  return 1;
}

int convert(const std::vector<std::string>& paths, const std::string& direction, const std::string& pattern,
            const PluginOptions& plugins) {
  if (paths.size() != 2) {
    std::cerr << "plexus checkpoint: error: convert takes SRC and DST\n\n" << kHelp;
    return 1;
  }
  ConvertRequest request;
  request.source = resolve_checkpoint(paths[0]);
  request.destination = paths[1];
  if (direction == "gpt-to-hybrid") {
    request.direction = Direction::gpt_to_hybrid;
  } else if (direction == "hybrid-to-gpt") {
    request.direction = Direction::hybrid_to_gpt;
  } else {
    std::cerr << "plexus checkpoint: error: --direction "
              << (direction.empty() ? "is required" : "'" + direction + "'")
              << ": expected gpt-to-hybrid or hybrid-to-gpt\n";
    return 1;
  }
  request.pattern = pattern;
  request.plugins = {plugins.dirs(), plugins.allow_world_writable};
  const ConvertResult r = convert_checkpoint(request);
  std::cout << "converted " << request.source.string() << " (step " << r.step << ", " << r.from << ") to "
            << r.destination.string() << " (" << r.to << "): " << r.model_tensors << " parameter tensors and "
            << r.optimizer_tensors << " optimizer tensors, " << r.renamed << " of them renamed\n"
            << "resume it with: --set 'model.pattern=" << r.pattern
            << "' --set model.num_layers=" << r.num_layers << " --resume " << r.destination.string() << "\n";
  return 0;
}

// export and import: two directories and --format hf; false (having said why) otherwise.
bool hf_arguments(const char* action, const char* what, const std::vector<std::string>& paths,
                  const std::string& format) {
  if (paths.size() != 2) {
    std::cerr << "plexus checkpoint: error: " << action << " takes " << what << "\n\n" << kHelp;
    return false;
  }
  if (format != "hf") {
    std::cerr << "plexus checkpoint: error: --format "
              << (format.empty() ? "is required" : "'" + format + "'") << ": expected hf\n";
    return false;
  }
  return true;
}

int export_model(const std::vector<std::string>& paths, const std::string& format) {
  if (!hf_arguments("export", "SRC and OUT", paths, format)) return 1;
  const fs::path source = resolve_checkpoint(paths[0]);
  const HfExportResult r = export_hf(source, paths[1]);
  std::cout << "exported " << source.string() << " (step " << r.step << ") to " << paths[1] << ": "
            << r.tensors << " tensors of a " << r.architecture << (r.tokenizer ? ", the tokenizer" : "")
            << "\n";
  for (const std::string& what : r.dropped)
    std::cout << "left out: " << what << " (transformers' model has no place for them)\n";
  std::cout << "load it with: transformers.AutoModelForCausalLM.from_pretrained(\"" << paths[1] << "\")\n";
  return 0;
}

int import_model(const std::vector<std::string>& paths, const std::string& format, int64_t seq_length) {
  if (!hf_arguments("import", "HF_DIR and OUT", paths, format)) return 1;
  const HfImportResult r = import_hf(paths[0], paths[1], seq_length);
  std::cout << "imported " << paths[0] << " to " << paths[1] << ": " << r.tensors
            << " tensors of a GPT at step 0, Adam's moments zero\nresume it with: plexus-train";
  for (const std::string& setting : r.model_settings) std::cout << " --set '" << setting << "'";
  std::cout << " --resume " << paths[1] << "\n";
  return 0;
}

}  // namespace

int checkpoint_command(const std::vector<std::string>& args) {
  return run_guarded("plexus checkpoint", [&] {
    PluginOptions plugin_options;
    std::string action, direction, pattern, format;
    int64_t seq_length = 0;
    std::vector<std::string> paths;
    bool json = false;
    bool verify = false;
    bool help = false;
    po::options_description options("options");
    options.add_options()("json", po::bool_switch(&json), "inspect: print JSON")(
        "verify", po::bool_switch(&verify),
        "inspect: verify every tensor (checksum, finite values) and the files' agreement; exit 1 naming what "
        "is bad")("direction", po::value(&direction), "convert: gpt-to-hybrid or hybrid-to-gpt")(
        "hybrid-layer-pattern", po::value(&pattern),
        "convert: the destination's pattern (gpt-to-hybrid; default \"*-\" x L), or the source's, checked "
        "(hybrid-to-gpt)")("format", po::value(&format),
                           "export, import: hf (a Hugging Face transformers model directory)")(
        "seq-length", po::value(&seq_length),
        "import: the run's model.seq_length (default: the model's max_position_embeddings)")(
        "help,h", po::bool_switch(&help), "this help");
    plugin_options.add_to(options);
    po::options_description hidden;
    hidden.add_options()("action", po::value(&action))("paths", po::value(&paths)->composing());
    po::options_description all;
    all.add(options).add(hidden);
    po::positional_options_description positional;
    positional.add("action", 1).add("paths", -1);
    po::variables_map vm;
    po::store(po::command_line_parser(args).options(all).positional(positional).run(), vm);
    po::notify(vm);
    if (help) {
      std::cout << kHelp << "\n" << options;
      return 0;
    }
    if (action == "inspect") return inspect(paths, json, verify, plugin_options);
    if (action == "convert") return convert(paths, direction, pattern, plugin_options);
    if (action == "export") return export_model(paths, format);
    if (action == "import") return import_model(paths, format, seq_length);
    std::cerr << "plexus checkpoint: error: expected 'inspect', 'convert', 'export' or 'import'\n\n" << kHelp;
    return 1;
  });
}

}  // namespace plexus::cli
