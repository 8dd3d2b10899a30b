// `plexus bench`: times the primitives of "mhc" fusion backends (docs/mhc-backend.md) on one
// device and size, side by side, and checks each against a reference backend on the same
// inputs. Per row: the median and spread of repeated runs, the bytes the call must move at
// least, the GB/s that implies and its fraction of a streaming copy measured in the same
// process, and FLOP/s where the work is arithmetic. A backend author gets speed and
// correctness in one command; docs/performance.md has the formulas and results.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <boost/json.hpp>

#include "plexus/bench_check.hpp"
#include "plexus/bench_measure.hpp"
#include "plexus/bench_workload.hpp"
#include "plexus/cli.hpp"
#include "plexus/commands.hpp"
#include "plexus/core/config.hpp"
#include "plexus/core/device.hpp"
#include "plexus/core/host_services.hpp"
#include "plexus/core/mhc_backend.hpp"
#include "plexus/core/plugin_host.hpp"
#include "plexus/tensor.h"

namespace plexus::cli {
namespace {

using bench::Direction;

constexpr const char* kHelp =
    R"(usage: plexus bench --backend NAME[,NAME...] [options]

Times the primitives of "mhc" fusion backends (docs/mhc-backend.md) on random inputs of the
given size, on one device: warm-up runs, then repeated runs; per row the median and the spread
(min, max; p10 and p90 in the JSON), the bytes moved per call, GB/s and its fraction of this
machine's copy bandwidth (a streaming copy measured in-process on the same threads or GPU, at
the size of x; its best rate), and GFLOP/s where it applies ("~": a rough count). Every backend sees the same
inputs. With a check backend, each timed backend's outputs and gradients are compared with
it, tensor by tensor (max|ours - ref| / max|ref|).

primitives: proj_rms, mappings, aggregate, post_res; all (the four, default); sublayer (the
whole connection around an identity F: proj_rms, mappings, aggregate, post_res forward, then
their backwards in reverse, as the engine runs them).

bytes per call: every tensor argument of every call once, an accumulated gradient twice (read
and written). Per primitive, s = activation bytes, m = mapping bytes, W = n*n + 2n:
  proj_rms   fwd T(nC s + (W+1) m) + nCW m       bwd T(3nC s + (W+1) m) + 3nCW m
  mappings   fwd T(2W+1) m + (W+3) m             bwd T(3W+2) m + 3(W+3) m
  aggregate  fwd T((n+1)C s + n m)               bwd T((3n+1)C s + 2n m)
  post_res   fwd T((2n+1)C s + (n*n+n) m) + C s  bwd T((4n+2)C s + 2(n*n+n) m) + 3C s
  sublayer   the sum of its calls
FLOPs: proj_rms 2 T nC W forward (its GEMM), twice that backward; mappings roughly
T(4K n*n + 3n*n + 3W + 8n) forward and T(12K n*n + 5n*n + 11W + 16n) backward (Sinkhorn's
row and column sums and divisions, K times; exp and division count one); sublayer the two.

exit status: 0; 1 on a usage or backend error; 2 when a check exceeds the tolerance (the
worst tensor is named).
)";

struct Options {
  std::vector<std::string> backends;
  std::string primitive = "all", direction = "both", device = "cpu", dtype = "f32", check, json;
  int64_t tokens = 4096, streams = 4, hidden = 512;
  int32_t iterations = 20;
  double eps = 1e-6;
  std::optional<double> tolerance;
  bool transposed = false;
  int warmup = 3, repeats = 20;
  std::vector<std::string> plugins;
  PluginOptions plugin_options;
};

constexpr uint64_t kSeed = 20240611;

std::vector<std::string> split_names(const std::vector<std::string>& values) {
  std::vector<std::string> names;
  for (const std::string& value : values) {
    std::stringstream in(value);
    std::string name;
    while (std::getline(in, name, ',')) {
      name.erase(0, name.find_first_not_of(" \t"));
      name.erase(name.find_last_not_of(" \t") + 1);
      if (!name.empty() && std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
    }
  }
  return names;
}

DLDataType parse_dtype(const std::string& text) {
  if (text == "f32" || text == "float32") return plx_dtype_f32();
  if (text == "f64" || text == "float64") return plx_dtype_f64();
  if (text == "bf16" || text == "bfloat16") return plx_dtype_bf16();
  throw po::error("--dtype " + text + ": expected f32, f64 or bf16");
}

std::string one_of(const std::string& word, const std::vector<std::string>& valid) {
  std::string text;
  if (const auto near = config::nearest(word, valid)) text = " (did you mean '" + *near + "'?)";
  text += "; expected one of:";
  for (const std::string& v : valid) text += " " + v;
  return text;
}

void validate(const Options& o) {
  if (o.backends.empty()) throw po::error("the option --backend is required (e.g. --backend mhc_fused)");
  for (const auto& [value, name] : {std::pair{o.tokens, "--tokens"},
                                    {o.streams, "--streams"},
                                    {o.hidden, "--hidden"},
                                    {int64_t{o.iterations}, "--sinkhorn-iterations"},
                                    {int64_t{o.repeats}, "--repeats"}})
    if (value < 1)
      throw po::error(std::string(name) + " must be a positive integer, not " + std::to_string(value));
  if (o.warmup < 0) throw po::error("--warmup must be 0 or more, not " + std::to_string(o.warmup));
  if (!(o.eps > 0.0) || !std::isfinite(o.eps)) throw po::error("--eps must be a finite number > 0");
  if (o.tolerance && !(*o.tolerance > 0.0)) throw po::error("--tolerance must be a number > 0");
  std::vector<std::string> primitives = bench::workload_names();
  primitives.insert(primitives.end() - 1, "all");
  if (std::find(primitives.begin(), primitives.end(), o.primitive) == primitives.end())
    throw po::error("unknown primitive '" + o.primitive + "'" + one_of(o.primitive, primitives));
  const std::vector<std::string> directions{"forward", "backward", "both"};
  if (std::find(directions.begin(), directions.end(), o.direction) == directions.end())
    throw po::error("--direction " + o.direction + one_of(o.direction, directions));
}

std::string direction_word(const std::string& text) {
  return text == "fwd" ? "forward" : text == "bwd" ? "backward" : text;
}

// ---- loading the backends ----

// The plugin names in the search path (libplexus_NAME.so -> NAME).
std::vector<std::string> plugin_names(const std::vector<std::filesystem::path>& search_path) {
  std::vector<std::string> names;
  for (const auto& dir : search_path)
    for (const auto& file : plugin_files_in(dir)) {
      const std::string stem = file.stem().string();
      if (stem.rfind("libplexus_", 0) == 0) names.push_back(stem.substr(10));
    }
  return names;
}

// Loads the --plugin libraries, then for each backend none of them provides the plugin named
// like it. An unknown name is refused naming the nearest backend loaded or plugin in the path.
void load_backends(PluginHost& host, const Options& o, const std::vector<std::string>& names) {
  const auto search_path = plugin_search_path(o.plugin_options.dirs());
  LoadOptions load_options;
  load_options.allow_world_writable = o.plugin_options.allow_world_writable;
  for (const std::string& plugin : o.plugins) host.load(resolve_plugin(plugin, search_path), load_options);
  for (const std::string& name : names) {
    if (host.find(PLX_KIND_FUSION_BACKEND, name) != nullptr) continue;
    std::filesystem::path file;
    try {
      file = resolve_plugin(name, search_path);
    } catch (const PluginError& e) {
      std::vector<std::string> known = plugin_names(search_path);
      for (const Component* c : host.components())
        if (c->kind == PLX_KIND_FUSION_BACKEND) known.push_back(c->name);
      const auto near = config::nearest(name, known);
      throw std::runtime_error("unknown backend '" + name + "'" +
                               (near ? " (did you mean '" + *near + "'?)" : std::string()) + ": " + e.what());
    }
    host.load(file, load_options);
    host.get(PLX_KIND_FUSION_BACKEND, name);  // the plugin named like it must provide it
  }
}

// ---- rows, table and JSON ----

struct Row {
  std::string backend, primitive;
  Direction direction = Direction::forward;
  bench::Stats stats;
  double bytes = 0, flops = 0;
  bool flops_estimated = false;
  std::optional<bench::CheckResult> check;
  bool reference = false;  // this backend is the check backend
  double gb_per_s() const { return bytes / (stats.median * 1e6); }
  double gflop_per_s() const { return flops / (stats.median * 1e6); }
};

// A number with 4 significant digits, without an exponent (the table's ms, MB, GB/s).
std::string num(double v) {
  if (!std::isfinite(v)) return "-";
  const int magnitude = v > 0 ? static_cast<int>(std::floor(std::log10(v))) : 0;
  const int decimals = std::clamp(3 - magnitude, 0, 6);
  char buffer[64];
  std::snprintf(buffer, sizeof(buffer), "%.*f", decimals, v);
  return buffer;
}

// "13.9 KiB", "32.0 MiB".
std::string size_text(std::size_t bytes) {
  char buffer[32];
  const double b = static_cast<double>(bytes);
  if (b >= 1024.0 * 1024.0 * 1024.0)
    std::snprintf(buffer, sizeof(buffer), "%.1f GiB", b / (1024.0 * 1024.0 * 1024.0));
  else if (b >= 1024.0 * 1024.0)
    std::snprintf(buffer, sizeof(buffer), "%.1f MiB", b / (1024.0 * 1024.0));
  else
    std::snprintf(buffer, sizeof(buffer), "%.1f KiB", b / 1024.0);
  return buffer;
}

std::string sci(double v) {
  if (!std::isfinite(v)) return "inf";
  char buffer[32];
  std::snprintf(buffer, sizeof(buffer), "%.1e", v);
  return buffer;
}

void print_table(const std::vector<Row>& rows, double copy_gb_per_s, std::ostream& out) {
  std::vector<std::vector<std::string>> cells{{"backend", "primitive", "direction", "median ms", "min ms",
                                               "max ms", "MB/call", "GB/s", "of copy", "GFLOP/s", "check"}};
  for (const Row& r : rows) {
    std::string check = "-";
    if (r.reference) check = "reference";
    if (r.check) check = sci(r.check->worst_value) + " " + r.check->worst;
    char percent[16];
    std::snprintf(percent, sizeof(percent), "%.0f%%", 100.0 * r.gb_per_s() / copy_gb_per_s);
    cells.push_back({r.backend, r.primitive, bench::direction_name(r.direction), num(r.stats.median),
                     num(r.stats.min), num(r.stats.max), num(r.bytes / 1e6), num(r.gb_per_s()), percent,
                     r.flops > 0 ? (r.flops_estimated ? "~" : "") + num(r.gflop_per_s()) : "-", check});
  }
  std::vector<std::size_t> width(cells[0].size(), 0);
  for (const auto& line : cells)
    for (std::size_t i = 0; i < line.size(); ++i) width[i] = std::max(width[i], line[i].size());
  for (const auto& line : cells) {
    std::string text;
    for (std::size_t i = 0; i < line.size(); ++i) {
      const std::string pad(width[i] - line[i].size(), ' ');
      const bool left = i < 3 || i + 1 == line.size();  // names and the check: left; numbers: right
      text += (i > 0 ? "  " : "") + (left ? line[i] + (i + 1 == line.size() ? "" : pad) : pad + line[i]);
    }
    out << text << "\n";
  }
}

boost::json::value finite_or_null(double v) {
  return std::isfinite(v) ? boost::json::value(v) : nullptr;
}

boost::json::object stats_json(const bench::Stats& s) {
  boost::json::array samples;
  for (double ms : s.samples_ms) samples.emplace_back(ms);
  return {{"median_ms", s.median}, {"min_ms", s.min}, {"max_ms", s.max},
          {"p10_ms", s.p10},       {"p90_ms", s.p90}, {"samples_ms", std::move(samples)}};
}

std::string shell_quote(const std::string& arg) {
  if (!arg.empty() && arg.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
                                            "_-+=/.,:@%") == std::string::npos)
    return arg;
  std::string quoted = "'";
  for (char c : arg) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return quoted + "'";
}

// ---- the command ----

// Options parsed and checked, and what follows from them.
struct Setup {
  Options o;
  bench::Problem problem;
  std::vector<std::string> workloads;
  std::vector<Direction> directions;
  std::string check;  // "none": no check
  double tolerance = 0;
  bool checking() const { return check != "none"; }
};

// The parsed command line, or nullopt after printing the help.
std::optional<Setup> parse(const std::vector<std::string>& args) {
  Setup s;
  Options& o = s.o;
  bool help = false;
  std::vector<std::string> backend_values;
  po::options_description options("options");
  auto add = options.add_options();
  add("backend", po::value(&backend_values)->composing(),
      "fusion backend(s) to time: repeatable, or a comma list (e.g. mhc_fused,mhc_native)");
  add("primitive", po::value(&o.primitive)->default_value(o.primitive),
      "proj_rms, mappings, aggregate, post_res, all or sublayer");
  add("direction", po::value(&o.direction)->default_value(o.direction),
      "forward, backward or both (fwd, bwd)");
  add("device", po::value(&o.device)->default_value(o.device), "cpu, cuda or cuda:N");
  add("tokens", po::value(&o.tokens)->default_value(o.tokens), "T (batch x sequence)");
  add("streams", po::value(&o.streams)->default_value(o.streams), "n, the residual streams");
  add("hidden", po::value(&o.hidden)->default_value(o.hidden), "C, the hidden size");
  add("sinkhorn-iterations", po::value(&o.iterations)->default_value(o.iterations), "K");
  add("dtype", po::value(&o.dtype)->default_value(o.dtype),
      "activation dtype f32, f64 or bf16 (mappings: f64 with f64, else f32)");
  add("eps", po::value(&o.eps)->default_value(o.eps, "1e-6"), "the norm's and the Sinkhorn clamps' eps");
  add("transposed", po::bool_switch(&o.transposed), "mix with H_res transposed");
  add("warmup", po::value(&o.warmup)->default_value(o.warmup), "untimed runs before the timed ones");
  add("repeats", po::value(&o.repeats)->default_value(o.repeats), "timed runs per row");
  add("check", po::value(&o.check),
      "reference backend to compare outputs and gradients with, or none (default: mhc_native when another "
      "backend is timed)");
  add("tolerance", po::value<double>()->notifier([&](double v) { o.tolerance = v; }),
      "largest max relative difference a check accepts (default 1e-4 for f32, 1e-10 for f64, 1e-2 for bf16)");
  add("json", po::value(&o.json), "write every row, the machine, sizes and command line here");
  add("plugin", po::value(&o.plugins)->composing(),
      "plugin to load, by name or path (repeatable; default: the ones named like the backends)");
  add("help,h", po::bool_switch(&help), "this help");
  o.plugin_options.add_to(options);
  po::variables_map vm;
  po::store(po::command_line_parser(args).options(options).run(), vm);
  po::notify(vm);
  if (help) {
    std::cout << kHelp << "\n" << options;
    return std::nullopt;
  }
  o.backends = split_names(backend_values);
  o.direction = direction_word(o.direction);
  validate(o);

  bench::Problem& p = s.problem;
  p.tokens = o.tokens;
  p.streams = o.streams;
  p.hidden = o.hidden;
  p.iterations = o.iterations;
  p.eps = o.eps;
  p.transposed = o.transposed;
  p.activation = parse_dtype(o.dtype);
  p.device = device::parse(o.device);
  device::require(p.device);  // a clear error without CUDA or without a GPU, before anything runs

  if (o.primitive == "all")
    s.workloads.assign(std::begin(kMhcPrimitives), std::end(kMhcPrimitives));
  else
    s.workloads.push_back(o.primitive);
  if (o.direction != "backward") s.directions.push_back(Direction::forward);
  if (o.direction != "forward") s.directions.push_back(Direction::backward);

  s.check = o.check;
  if (s.check.empty()) {
    const bool other =
        std::any_of(o.backends.begin(), o.backends.end(), [](const auto& b) { return b != "mhc_native"; });
    s.check = other ? "mhc_native" : "none";
  }
  const bool f64 = p.activation.bits == 64, bf16 = p.activation.code == kDLBfloat;
  s.tolerance = o.tolerance.value_or(f64 ? 1e-10 : bf16 ? 1e-2 : 1e-4);
  return s;
}

void print_header(const Setup& s, const bench::CopyBandwidth& copy, const std::string& cpu_name) {
  const bench::Problem& p = s.problem;
  const bool cpu = p.device.device_type == kDLCPU;
  std::cout << "plexus bench: T=" << p.tokens << " n=" << p.streams << " C=" << p.hidden << " W=" << p.width()
            << " K=" << p.iterations << ", " << dtype_name(p.activation) << " (mappings "
            << dtype_name(p.mapping()) << "), eps " << p.eps << (p.transposed ? ", transposed" : "")
            << ", on " << device::name(p.device) << "\n";
  std::cout << "machine: "
            << (cpu ? (cpu_name.empty() ? std::string("CPU") : cpu_name) + ", " +
                          std::to_string(copy.threads) + " threads"
                    : device::name(p.device))
            << "; copy bandwidth " << num(copy.gb_per_s) << " GB/s (best rate, read + write, 2 x "
            << size_text(copy.bytes) << " arrays" << (cpu ? ", memcpy per OpenMP thread" : ", device to device") << ")\n";
  std::cout << "timing: " << s.o.warmup << " warm-up runs, then the median, min and max of " << s.o.repeats
            << " runs; check: "
            << (s.checking() ? "against " + s.check + ", tolerance " + sci(s.tolerance) : std::string("none"))
            << "\n\n";
}

// Per workload, per backend: the check (before any timing, from zeroed outputs), then the timed
// runs of each direction. Backends alternate per primitive, so a change in the machine's load
// shows in all of them.
std::vector<Row> measure(const Setup& s, const std::map<std::string, std::unique_ptr<MhcBackend>>& backends) {
  std::vector<Row> rows;
  for (const std::string& name : s.workloads) {
    const auto w = bench::Workload::make(name, s.problem, kSeed);
    std::optional<bench::Snapshot> reference;  // the check backend's outputs, after the first timed backend's
    for (const std::string& backend_name : s.o.backends) {
      const MhcBackend& be = *backends.at(backend_name);
      std::map<Direction, bench::CheckResult> checks;
      if (s.checking() && backend_name != s.check) {
        const bench::Snapshot ours = bench::run_once(*w, be, s.directions);
        if (!reference) reference = bench::run_once(*w, *backends.at(s.check), s.directions);
        for (Direction d : s.directions) checks[d] = bench::compare(*w, d, ours, *reference);
      }
      for (Direction d : s.directions) {
        if (d == Direction::backward) {  // the sublayer's backward reads the forward's outputs
          w->run(Direction::forward, be);
          device::synchronize(s.problem.device);
        }
        Row row;
        row.backend = backend_name;
        row.primitive = name;
        row.direction = d;
        row.stats = bench::time_runs(s.o.warmup, s.o.repeats, s.problem.device, [&] { w->run(d, be); });
        row.bytes = w->bytes(d);
        row.flops = w->flops(d);
        row.flops_estimated = w->flops_estimated();
        row.reference = s.checking() && backend_name == s.check;
        if (const auto it = checks.find(d); it != checks.end()) row.check = it->second;
        rows.push_back(std::move(row));
      }
    }
  }
  return rows;
}

// The row with the largest difference, or nullptr without a check.
const Row* worst_row(const std::vector<Row>& rows) {
  const Row* worst = nullptr;
  for (const Row& r : rows)
    if (r.check && (worst == nullptr || !(r.check->worst_value <= worst->check->worst_value))) worst = &r;
  return worst;
}

std::string describe(const Row& r) {
  return r.backend + " " + r.primitive + " " + bench::direction_name(r.direction) + " " + r.check->worst +
         ": max relative difference " + sci(r.check->worst_value);
}

// The totals per backend, every tensor's difference and the check's verdict, after the table.
void print_summary(const Setup& s, const std::vector<Row>& rows) {
  const std::vector<std::string>& names = s.o.backends;
  if (rows.size() > names.size()) {
    std::map<std::string, double> total;
    for (const Row& r : rows) total[r.backend] += r.stats.median;
    std::cout << "\nsum of medians:";
    for (const std::string& b : names) {
      std::cout << (b == names.front() ? " " : "; ") << b << " " << num(total[b]) << " ms";
      if (b != names.front())
        std::cout << " (" << num(total[b] / total[names.front()]) << "x " << names.front() << "'s)";
    }
    std::cout << "\n";
  }
  const Row* worst = worst_row(rows);
  if (worst == nullptr) return;
  std::cout << "\ncheck against " << s.check << ", max|ours - ref| / max|ref| per tensor:\n";
  for (const Row& r : rows) {
    if (!r.check) continue;
    std::cout << "  " << r.backend << " " << r.primitive << " " << bench::direction_name(r.direction) << ":";
    for (const auto& [tensor, value] : r.check->tensors) std::cout << " " << tensor << " " << sci(value);
    std::cout << "\n";
  }
  if (worst->check->worst_value <= s.tolerance)
    std::cout << "check passed (worst " << describe(*worst) << ", tolerance " << sci(s.tolerance) << ")\n";
}

boost::json::object to_json(const Setup& s, const std::vector<std::string>& args,
                            const std::vector<Row>& rows, const bench::CopyBandwidth& copy,
                            const std::string& cpu_name) {
  std::string command = "plexus bench";
  boost::json::array argv;
  for (const std::string& a : args) {
    command += ' ' + shell_quote(a);
    argv.emplace_back(a);
  }
  boost::json::array json_rows;
  for (const Row& r : rows) {
    boost::json::object row{{"backend", r.backend},
                            {"primitive", r.primitive},
                            {"direction", bench::direction_name(r.direction)},
                            {"bytes", r.bytes},
                            {"gb_per_s", r.gb_per_s()},
                            {"copy_fraction", r.gb_per_s() / copy.gb_per_s},
                            {"flops", r.flops > 0 ? boost::json::value(r.flops) : nullptr},
                            {"gflop_per_s", r.flops > 0 ? boost::json::value(r.gflop_per_s()) : nullptr},
                            {"flops_estimated", r.flops > 0 && r.flops_estimated},
                            {"reference", r.reference}};
    for (auto& [key, value] : stats_json(r.stats)) row[key] = value;
    row["check"] = nullptr;
    if (r.check) {
      boost::json::object tensors;
      for (const auto& [tensor, value] : r.check->tensors) tensors[tensor] = finite_or_null(value);
      row["check"] = {{"against", s.check},
                      {"max_rel_diff", finite_or_null(r.check->worst_value)},
                      {"worst_tensor", r.check->worst},
                      {"passed", r.check->worst_value <= s.tolerance},
                      {"tensors", std::move(tensors)}};
    }
    json_rows.push_back(std::move(row));
  }
  const bench::Problem& p = s.problem;
  const Row* worst = worst_row(rows);
  boost::json::value check = nullptr;
  if (s.checking())
    check = {{"backend", s.check},
             {"tolerance", s.tolerance},
             {"passed", worst == nullptr || worst->check->worst_value <= s.tolerance},
             {"worst", worst != nullptr ? boost::json::value(describe(*worst)) : nullptr}};
  return {{"command", command},
          {"argv", std::move(argv)},
          {"sizes",
           {{"tokens", p.tokens},
            {"streams", p.streams},
            {"hidden", p.hidden},
            {"width", p.width()},
            {"sinkhorn_iterations", p.iterations},
            {"dtype", dtype_name(p.activation)},
            {"mapping_dtype", dtype_name(p.mapping())},
            {"eps", p.eps},
            {"transposed", p.transposed}}},
          {"device", device::name(p.device)},
          {"machine",
           {{"cpu", cpu_name},
            {"hardware_threads", std::thread::hardware_concurrency()},
            {"threads", p.device.device_type == kDLCPU ? boost::json::value(copy.threads) : nullptr},
            {"copy_bandwidth_gb_per_s", copy.gb_per_s},
            {"copy_bytes", copy.bytes},
            {"copy", stats_json(copy.stats)}}},
          {"warmup", s.o.warmup},
          {"repeats", s.o.repeats},
          {"check", std::move(check)},
          {"rows", std::move(json_rows)}};
}

int bench_main(const std::vector<std::string>& args) {
  const std::optional<Setup> parsed = parse(args);
  if (!parsed) return 0;
  const Setup& s = *parsed;

  PluginHost host;
  std::vector<std::string> needed = s.o.backends;
  if (s.checking() && std::find(needed.begin(), needed.end(), s.check) == needed.end())
    needed.push_back(s.check);
  load_backends(host, s.o, needed);
  ConfigHandle config(boost::json::object(), "mhc.options");
  std::map<std::string, std::unique_ptr<MhcBackend>> backends;
  for (const std::string& name : needed)
    backends[name] =
        std::make_unique<MhcBackend>(host.get(PLX_KIND_FUSION_BACKEND, name), s.problem.device, config.get());

  // The machine's reference: a copy of arrays the size of x, the largest tensor.
  const std::size_t x_bytes =
      static_cast<std::size_t>(s.problem.tokens * s.problem.streams * s.problem.hidden) *
      dtype_bytes(s.problem.activation);
  const bench::CopyBandwidth copy = bench::measure_copy(s.problem.device, x_bytes, s.o.repeats);
  const std::string cpu_name = bench::cpu_model();
  print_header(s, copy, cpu_name);

  const std::vector<Row> rows = measure(s, backends);
  print_table(rows, copy.gb_per_s, std::cout);
  print_summary(s, rows);
  if (!s.o.json.empty()) {
    std::ofstream file(s.o.json);
    file << boost::json::serialize(to_json(s, args, rows, copy, cpu_name)) << "\n";
    if (!file) throw std::runtime_error("cannot write " + s.o.json);
  }

  const Row* worst = worst_row(rows);
  if (worst != nullptr && !(worst->check->worst_value <= s.tolerance)) {
    std::cerr << "plexus bench: error: " << worst->backend << " differs from " << s.check
              << " beyond the tolerance " << sci(s.tolerance) << ": " << describe(*worst) << "\n";
    return 2;
  }
  return 0;
}

}  // namespace

int bench_command(const std::vector<std::string>& args) {
  return run_guarded("plexus bench", [&] { return bench_main(args); });
}

}  // namespace plexus::cli
