#include "cli/features_cmd.h"

#include <dirent.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "cli/home.h"
#include "core/text.h"
#include "net/client.h"

namespace infera::cli {
namespace {

using nlohmann::json;

struct Options {
  std::string url;
  std::string token;
  bool raw = false;
  size_t batch_rows = 10'000;
  bool precheck = true;
};

// One admin request; the status and the parsed body (null when it is not JSON). Exits 1 when the
// admin API cannot be reached.
std::pair<int, json> call(const Options& o, const std::string& method, const std::string& path,
                          const std::string& body = {}) {
  std::vector<net::HttpHeader> headers{{"content-type", "application/json"}};
  const std::string token = o.token.empty() ? localAdminToken(o.url) : o.token;
  if (!token.empty()) headers.push_back({"authorization", "Bearer " + token});
  auto r = net::fetchBlocking(o.url + path, method, body, headers, std::chrono::seconds(120));
  if (!r.ok()) {
    std::fprintf(stderr, "cannot reach the admin API at %s: %s\n", o.url.c_str(),
                 r.status().message().c_str());
    std::exit(1);
  }
  json j = json::parse(r->body, nullptr, false);
  return {r->status, j.is_discarded() ? json() : j};
}

[[noreturn]] void failWith(int status, const json& j) {
  std::string msg = j.dump();
  if (j.is_object() && j.contains("error") && j["error"].contains("message"))
    msg = j["error"]["message"];
  std::fprintf(stderr, "error %d: %s\n", status, msg.c_str());
  std::exit(1);
}

std::map<std::string, std::string> readRepository(const std::string& dir) {
  std::map<std::string, std::string> files;
  DIR* d = ::opendir(dir.c_str());
  if (!d) {
    std::fprintf(stderr, "cannot open feature repository directory %s\n", dir.c_str());
    std::exit(1);
  }
  while (dirent* e = ::readdir(d)) {
    const std::string n = e->d_name;
    if (n.empty() || n[0] == '.' || !(n.ends_with(".yaml") || n.ends_with(".yml"))) continue;
    std::ifstream in(dir + "/" + n);
    std::stringstream ss;
    ss << in.rdbuf();
    files[n] = ss.str();
  }
  ::closedir(d);
  if (files.empty()) {
    std::fprintf(stderr, "no *.yaml files in %s\n", dir.c_str());
    std::exit(1);
  }
  return files;
}

int planOrApply(const Options& o, const std::string& dir, bool apply) {
  const json body = {{"files", readRepository(dir)}};
  auto [status, j] =
      call(o, "POST", apply ? "/admin/features/apply" : "/admin/features/plan", body.dump());
  if (status != 200) failWith(status, j);
  if (o.raw) {
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  if (j["changes"].empty()) std::printf("no changes\n");
  for (const auto& c : j["changes"]) std::printf("%s\n", c.get<std::string>().c_str());
  for (const auto& b : j["breaking"]) std::printf("BREAKING: %s\n", b.get<std::string>().c_str());
  if (apply) std::printf("applied\n");
  return j["breaking"].empty() ? 0 : 1;
}

int showRegistry(const Options& o) {
  auto [status, j] = call(o, "GET", "/admin/features/registry");
  if (status != 200) failWith(status, j);
  if (o.raw) {
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  std::printf("project %s, store %s (~%lld keys, ~%lld bytes)\n",
              j["project"].get<std::string>().c_str(), j["store"].get<std::string>().c_str(),
              static_cast<long long>(j["store_stats"]["keys"].get<int64_t>()),
              static_cast<long long>(j["store_stats"]["bytes"].get<int64_t>()));
  for (const auto& v : j["views"]) {
    std::string keys;
    for (const auto& e : v["entities"])
      keys += (keys.empty() ? "" : ", ") + e["join_key"].get<std::string>();
    std::printf("view %s [%s] ttl %llds%s%s\n", v["name"].get<std::string>().c_str(), keys.c_str(),
                static_cast<long long>(v["ttl_s"].get<int64_t>()),
                v["source"].get<std::string>().empty()
                    ? ""
                    : (" source " + v["source"].get<std::string>()).c_str(),
                v["aggregated"].get<bool>() ? " (aggregations)" : "");
    for (const auto& f : v["features"]) {
      std::printf("  %-24s %s\n", f["name"].get<std::string>().c_str(),
                  f["type"].get<std::string>().c_str());
    }
  }
  for (const auto& s : j["feature_services"]) {
    std::printf("service %s: %zu features\n", s["name"].get<std::string>().c_str(),
                s["features"].size());
  }
  return 0;
}

// CSV (RFC 4180: quotes, "" escapes, newlines inside quotes). Cells are sent as strings (the server
// reads numbers and bools out of them as the column's type needs), empty cells as null, and a cell
// that is a JSON list as that list.
class CsvReader {
 public:
  explicit CsvReader(std::istream& in) : in_(in) {}
  bool next(std::vector<std::string>& cells, std::vector<bool>& quoted) {
    cells.clear();
    quoted.clear();
    std::string cell;
    bool in_quotes = false, was_quoted = false, any = false;
    char c;
    while (in_.get(c)) {
      any = true;
      if (in_quotes) {
        if (c == '"') {
          if (in_.peek() == '"') {
            in_.get(c);
            cell += '"';
          } else {
            in_quotes = false;
          }
        } else {
          cell += c;
        }
      } else if (c == '"') {
        in_quotes = true;
        was_quoted = true;
      } else if (c == ',') {
        cells.push_back(std::move(cell));
        quoted.push_back(was_quoted);
        cell.clear();
        was_quoted = false;
      } else if (c == '\n') {
        break;
      } else if (c != '\r') {
        cell += c;
      }
    }
    if (!any) return false;
    cells.push_back(std::move(cell));
    quoted.push_back(was_quoted);
    return true;
  }

 private:
  std::istream& in_;
};

json csvCell(const std::string& s, bool quoted) {
  if (s.empty() && !quoted) return nullptr;
  if (!s.empty() && s.front() == '[' && s.back() == ']') {
    json j = json::parse(s, nullptr, false);
    if (!j.is_discarded()) return j;
  }
  return s;
}

struct Progress {
  size_t total_bytes = 0;
  std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point last{};
  bool tty = ::isatty(2);
  void show(const char* phase, size_t rows, size_t bytes, bool done) {
    const auto now = std::chrono::steady_clock::now();
    if (!done && (!tty || now - last < std::chrono::milliseconds(100))) return;
    last = now;
    const double secs = std::chrono::duration<double>(now - start).count();
    const double frac =
        total_bytes ? static_cast<double>(bytes) / static_cast<double>(total_bytes) : 1.0;
    const int width = 30;
    const int filled = static_cast<int>(frac * width);
    std::string bar(static_cast<size_t>(filled), '#');
    bar.append(static_cast<size_t>(width - filled), '.');
    std::fprintf(stderr, "%s%-8s [%s] %3d%% %zu rows, %.0f rows/s%s", tty ? "\r" : "", phase,
                 bar.c_str(), static_cast<int>(frac * 100), rows,
                 secs > 0 ? static_cast<double>(rows) / secs : 0.0, done || !tty ? "\n" : "");
  }
};

// Reads FILE in batches of column-major frames and hands each to `send` (first data row, frame).
template <typename Send>
void forEachBatch(const std::string& file, size_t batch_rows, Progress& progress, const char* phase,
                  Send send) {
  std::ifstream in(file, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "cannot open %s\n", file.c_str());
    std::exit(1);
  }
  const bool jsonl =
      file.ends_with(".jsonl") || file.ends_with(".ndjson") || file.ends_with(".json");
  progress.start = std::chrono::steady_clock::now();
  size_t rows = 0, first = 1;
  std::vector<std::string> names;
  json frame = json::object();
  auto flush = [&] {
    if (frame.empty() || frame.begin()->empty()) return;
    send(first, frame);
    first = rows + 1;
    frame = json::object();
    for (const auto& n : names) frame[n] = json::array();
  };
  if (jsonl) {
    std::string line;
    while (std::getline(in, line)) {
      if (line.empty()) continue;
      json r = json::parse(line, nullptr, false);
      if (!r.is_object()) {
        std::fprintf(stderr, "row %zu: not a JSON object\n", rows + 1);
        std::exit(1);
      }
      for (const auto& [k, v] : r.items()) {
        if (!frame.contains(k)) {
          names.push_back(k);
          frame[k] = json::array();
          for (size_t i = 0; i < rows + 1 - first; ++i) frame[k].push_back(nullptr);
        }
      }
      for (const auto& n : names) frame[n].push_back(r.contains(n) ? r[n] : json());
      ++rows;
      if (rows + 1 - first >= batch_rows) flush();
      progress.show(phase, rows, static_cast<size_t>(in.tellg()), false);
    }
  } else {
    CsvReader csv(in);
    std::vector<std::string> cells;
    std::vector<bool> quoted;
    if (!csv.next(names, quoted)) {
      std::fprintf(stderr, "%s is empty\n", file.c_str());
      std::exit(1);
    }
    for (const auto& n : names) frame[n] = json::array();
    while (csv.next(cells, quoted)) {
      if (cells.size() == 1 && cells[0].empty()) continue;
      if (cells.size() != names.size()) {
        std::fprintf(stderr, "row %zu: %zu cells, the header has %zu columns\n", rows + 1,
                     cells.size(), names.size());
        std::exit(1);
      }
      for (size_t i = 0; i < names.size(); ++i)
        frame[names[i]].push_back(csvCell(cells[i], quoted[i]));
      ++rows;
      if (rows + 1 - first >= batch_rows) flush();
      progress.show(phase, rows, static_cast<size_t>(in.tellg()), false);
    }
  }
  flush();
  progress.show(phase, rows, progress.total_bytes, true);
}

int ingest(const Options& o, const std::string& view, const std::string& file) {
  Progress progress;
  {
    std::ifstream in(file, std::ios::binary | std::ios::ate);
    progress.total_bytes = in ? static_cast<size_t>(in.tellg()) : 0;
  }
  size_t written = 0, expired = 0;
  auto pass = [&](bool dry_run) {
    forEachBatch(file, o.batch_rows, progress, dry_run ? "checking" : "writing",
                 [&](size_t first, const json& frame) {
                   const json body = {{"feature_view_name", view},
                                      {"df", frame},
                                      {"first_row", first},
                                      {"dry_run", dry_run}};
                   auto [status, j] = call(o, "POST", "/admin/features/ingest", body.dump());
                   if (status != 200) {
                     if (!dry_run && written > 0) {
                       std::fprintf(stderr, "\nthe rows before row %zu were written\n", first);
                     } else if (progress.tty) {
                       std::fprintf(stderr, "\n");
                     }
                     failWith(status, j);
                   }
                   if (!dry_run) {
                     written += j["written"].get<size_t>();
                     expired += j["expired"].get<size_t>();
                   }
                 });
  };
  // Checked whole first, so a bad row anywhere writes nothing.
  if (o.precheck) pass(true);
  pass(false);
  std::printf(
      "%s: %zu rows written to %s%s\n", file.c_str(), written, view.c_str(),
      expired ? (" (" + std::to_string(expired) + " already past the view's ttl: skipped)").c_str()
              : "");
  return 0;
}

}  // namespace

void registerFeaturesCommands(CLI::App& app) {
  auto o = std::make_shared<Options>();
  o->url = envOr("INFERA_ADMIN_URL", "http://127.0.0.1:9090");
  o->token = envOr("INFERA_ADMIN_TOKEN", "");
  auto common = [o](CLI::App* c) {
    c->add_option("--admin-url", o->url, "Admin API base URL (env INFERA_ADMIN_URL)");
    c->add_option("--admin-token", o->token, "Admin token (env INFERA_ADMIN_TOKEN)");
    c->add_flag("--json", o->raw, "Print the API's JSON");
  };
  auto* f = app.add_subcommand(
      "features", "The feature store: plan/apply a repository, ingest files, show the registry");
  f->require_subcommand(1);
  auto dir = std::make_shared<std::string>();
  auto* plan = f->add_subcommand(
      "plan", "Show what applying a feature repository (a directory of YAML) would change");
  plan->add_option("dir", *dir, "Feature repository directory")->required();
  common(plan);
  plan->callback([o, dir] { std::exit(planOrApply(*o, *dir, false)); });
  auto* apply = f->add_subcommand(
      "apply", "Validate and register a feature repository (removed views are freed)");
  apply->add_option("dir", *dir, "Feature repository directory")->required();
  common(apply);
  apply->callback([o, dir] { std::exit(planOrApply(*o, *dir, true)); });
  auto* reg =
      f->add_subcommand("registry", "Show the registered entities, views and feature services");
  common(reg);
  reg->callback([o] { std::exit(showRegistry(*o)); });
  auto view = std::make_shared<std::string>();
  auto file = std::make_shared<std::string>();
  auto* ing = f->add_subcommand(
      "ingest", "Write a CSV or JSON-lines file into a feature view (all or nothing)");
  ing->add_option("view", *view, "Feature view")->required();
  ing->add_option("file", *file, "CSV (header row) or .jsonl/.ndjson file")->required();
  ing->add_option("--batch-rows", o->batch_rows, "Rows per request (default 10000)");
  ing->add_flag("!--no-precheck", o->precheck,
                "Skip the checking pass (faster; a bad row then stops the ingest after the batches "
                "before it)");
  common(ing);
  ing->callback([o, view, file] { std::exit(ingest(*o, *view, *file)); });
}

}  // namespace infera::cli
