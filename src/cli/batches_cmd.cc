// Flags, HTTP calls and printing only: the work is on the server (src/batch).
#include "cli/batches_cmd.h"

#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "cli/admin_client.h"
#include "cli/progress.h"
#include "core/json.h"
#include "core/text.h"
#include "net/client.h"

namespace infera::cli {
namespace {

using nlohmann::json;

struct Common {
  std::string url;
  std::string api_key;
  bool raw = false;
};

std::vector<net::HttpHeader> headersOf(const Common& c) {
  std::vector<net::HttpHeader> h;
  if (!c.api_key.empty()) h.push_back({"authorization", "Bearer " + c.api_key});
  return h;
}

// One call to the data port: the raw body of a 2xx answer, or exits 1 with the API's message.
std::string call(const Common& c, const std::string& method, const std::string& path,
                 const std::string& body = {}, std::vector<net::HttpHeader> extra = {},
                 std::chrono::seconds timeout = std::chrono::seconds(60)) {
  std::vector<net::HttpHeader> h = headersOf(c);
  for (auto& x : extra) h.push_back(std::move(x));
  auto r = net::fetchBlocking(c.url + path, method, body, h, timeout);
  if (!r.ok()) {
    std::fprintf(stderr, "cannot reach %s: %s\n", c.url.c_str(), r.status().message().c_str());
    std::exit(1);
  }
  if (r->status >= 400) {
    std::fprintf(stderr, "error %d: %s\n", r->status, adminErrorText(r->body).c_str());
    std::exit(1);
  }
  return r->body;
}

json callJson(const Common& c, const std::string& method, const std::string& path,
              const std::string& body = {}, std::vector<net::HttpHeader> extra = {}) {
  json j = json::parse(call(c, method, path, body, std::move(extra)), nullptr, false);
  if (j.is_discarded()) {
    std::fprintf(stderr, "the server answered something that is not JSON\n");
    std::exit(1);
  }
  return j;
}

int64_t num(const json& j, const char* key) {
  const auto it = j.find(key);
  return it != j.end() && it->is_number_integer() ? it->get<int64_t>() : 0;
}

std::string str(const json& j, const char* key) {
  const auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string("-");
}

// "12 of 100 done (2 failed), ETA 40 s" from a Batch object.
std::string progressText(const json& b) {
  const json& rc = b.contains("request_counts") ? b["request_counts"] : json::object();
  const int64_t total = num(rc, "total"), completed = num(rc, "completed"),
                failed = num(rc, "failed"), done = completed + failed;
  std::string s = std::to_string(done) + " of " + std::to_string(total) + " done";
  if (failed > 0) s += " (" + std::to_string(failed) + " failed)";
  const int64_t started = num(b, "in_progress_at");
  if (b.value("status", "") == "in_progress" && started > 0 && done > 0 && done < total) {
    const int64_t now = std::chrono::duration_cast<std::chrono::seconds>(
                            std::chrono::system_clock::now().time_since_epoch())
                            .count();
    const double per_line = double(now - started) / double(done);
    s += ", ETA " + std::to_string(static_cast<int64_t>(per_line * double(total - done))) + " s";
  }
  return s;
}

void printBatch(const json& b) {
  std::printf("%s  %s  %s  %s\n", str(b, "id").c_str(), str(b, "status").c_str(),
              str(b, "endpoint").c_str(), progressText(b).c_str());
  std::printf("  input %s  output %s  errors %s\n", str(b, "input_file_id").c_str(),
              str(b, "output_file_id").c_str(), str(b, "error_file_id").c_str());
  if (b.contains("errors") && b["errors"].is_object()) {
    for (const auto& e : b["errors"].value("data", json::array())) {
      std::printf("  line %s: %s: %s\n",
                  e.contains("line") && e["line"].is_number() ? e["line"].dump().c_str() : "-",
                  str(e, "code").c_str(), str(e, "message").c_str());
    }
  }
}

void addCommon(CLI::App* c, Common& o) {
  c->add_option("--url", o.url, "Data port base URL (env INFERA_URL)");
  c->add_option("--api-key", o.api_key, "API key (env INFERA_API_KEY)");
  c->add_flag("--json", o.raw, "Print the API's JSON");
}

[[noreturn]] void done(const Common& o, const json& j, const std::function<void()>& pretty) {
  if (o.raw) {
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    pretty();
  }
  std::exit(0);
}

// Polls until the batch ends, drawing its progress; the last Batch object.
json waitFor(const Common& o, const std::string& id) {
  ProgressBar bar("batch", true);
  for (;;) {
    json b = callJson(o, "GET", "/v1/batches/" + id);
    const std::string status = b.value("status", "");
    const json& rc = b.contains("request_counts") ? b["request_counts"] : json::object();
    const int64_t total = num(rc, "total");
    bar.update(total > 0 ? double(num(rc, "completed") + num(rc, "failed")) / double(total) : 0,
               status + ", " + progressText(b));
    if (status == "completed" || status == "failed" || status == "cancelled" || status == "expired")
      return b;
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
}

// Uploads `content` as a batch input file and creates a batch over it with the fields of `req`
// (input_file_id added); waits for it to end when `wait`. Prints it and exits.
[[noreturn]] void uploadAndCreate(const Common& o, const std::string& file,
                                  const std::string& content, json req,
                                  const std::vector<std::string>& metadata, bool wait) {
  const std::string boundary = "infera-cli-" + std::to_string(::getpid()) + "-boundary";
  std::string name = file;
  if (const size_t slash = name.rfind('/'); slash != std::string::npos) name.erase(0, slash + 1);
  for (char& ch : name) {
    if (ch == '"' || ch == '\r' || ch == '\n') ch = '_';
  }
  const std::string body =
      "--" + boundary + "\r\nContent-Disposition: form-data; name=\"purpose\"\r\n\r\nbatch\r\n--" +
      boundary + "\r\nContent-Disposition: form-data; name=\"file\"; filename=\"" + name +
      "\"\r\nContent-Type: application/octet-stream\r\n\r\n" + content + "\r\n--" + boundary +
      "--\r\n";
  if (!metadata.empty()) {
    json m = json::object();
    for (const auto& kv : metadata) {
      const size_t eq = kv.find('=');
      if (eq == std::string::npos) {
        std::fprintf(stderr, "--metadata takes key=value, got %s\n", kv.c_str());
        std::exit(1);
      }
      m[kv.substr(0, eq)] = kv.substr(eq + 1);
    }
    req["metadata"] = m;
  }
  const json f = callJson(o, "POST", "/v1/files", body,
                          {{"content-type", "multipart/form-data; boundary=" + boundary}});
  req["input_file_id"] = f.value("id", "");
  json b = callJson(o, "POST", "/v1/batches", req.dump(), {{"content-type", "application/json"}});
  if (wait) b = waitFor(o, b.value("id", ""));
  done(o, b, [&] { printBatch(b); });
}

std::string readWhole(const std::string& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "cannot read %s\n", file.c_str());
    std::exit(1);
  }
  std::stringstream content;
  content << in.rdbuf();
  return content.str();
}

// `infera vectors embed`'s input ({"id", "text", "payload"} per line) as a batch's lines: one
// /v1/embeddings request per text, its point id and payload (the text under `text_key`) beside it.
std::string embedLines(const std::string& file, const std::string& model,
                       const std::string& text_key) {
  std::ifstream in(file, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "cannot read %s\n", file.c_str());
    std::exit(1);
  }
  auto uuid = [](const std::string& s) {
    if (s.size() != 36) return false;
    for (size_t i = 0; i < s.size(); ++i) {
      const bool dash = i == 8 || i == 13 || i == 18 || i == 23;
      if (dash ? s[i] != '-' : !std::isxdigit(static_cast<unsigned char>(s[i]))) return false;
    }
    return true;
  };
  std::set<std::string> ids;  // a repeated id would be a duplicate custom_id: the batch would fail
  std::string out, line;
  for (size_t n = 1; std::getline(in, line); ++n) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    auto j = readJson(line);
    const char* bad = nullptr;
    if (!j.ok() || !j->is_object()) {
      bad = "not a JSON object";
    } else if (!j->contains("id") ||
               !((*j)["id"].is_number_unsigned() ||
                 ((*j)["id"].is_string() && uuid((*j)["id"].get<std::string>())))) {
      bad = "'id' must be an unsigned integer or a UUID";
    } else if (!ids.insert((*j)["id"].is_string() ? (*j)["id"].get<std::string>()
                                                  : (*j)["id"].dump())
                    .second) {
      bad = "this 'id' is on an earlier line too";
    } else if (!j->contains("text") || !(*j)["text"].is_string() ||
               (*j)["text"].get_ref<const std::string&>().empty()) {
      bad = "'text' must be a non-empty string";
    } else if (j->contains("payload") && !(*j)["payload"].is_object() &&
               !(*j)["payload"].is_null()) {
      bad = "'payload' must be an object";
    }
    if (bad != nullptr) {
      std::fprintf(stderr, "%s:%zu: %s\n", file.c_str(), n, bad);
      std::exit(1);
    }
    const json& id = (*j)["id"];
    json payload =
        j->contains("payload") && (*j)["payload"].is_object() ? (*j)["payload"] : json::object();
    if (!text_key.empty()) payload[text_key] = (*j)["text"];
    const json l = {{"custom_id", id.is_string() ? id.get<std::string>() : id.dump()},
                    {"method", "POST"},
                    {"url", "/v1/embeddings"},
                    {"body", {{"model", model}, {"input", (*j)["text"]}}},
                    {"point_id", id},
                    {"payload", payload}};
    out += l.dump();
    out += '\n';
  }
  return out;
}

}  // namespace

void registerBatchesCommands(CLI::App& app) {
  auto* batches = app.add_subcommand("batches", "Batch inference (OpenAI Batches API)");
  batches->require_subcommand(1);
  auto common = std::make_shared<Common>();
  common->url = envOr("INFERA_URL", "http://127.0.0.1:8080");
  common->api_key = envOr("INFERA_API_KEY", "");

  auto* create = batches->add_subcommand(
      "create", "Upload a JSONL file of requests and start a batch over it");
  auto file = std::make_shared<std::string>();
  auto endpoint = std::make_shared<std::string>("/v1/chat/completions");
  auto window = std::make_shared<std::string>("24h");
  auto metadata = std::make_shared<std::vector<std::string>>();
  auto wait = std::make_shared<bool>(false);
  create->add_option("file", *file, "JSONL file: one {custom_id, method, url, body} per line")
      ->required();
  create->add_option("--endpoint", *endpoint, "The endpoint every line calls");
  create->add_option("--window", *window, "Completion window");
  create->add_option("--metadata", *metadata, "key=value (repeatable)");
  auto collection = std::make_shared<std::string>();
  create->add_option("--collection", *collection,
                     "/v1/embeddings: upsert each line's vector into this collection");
  create->add_flag("--wait", *wait, "Wait for the batch to end, showing its progress");
  addCommon(create, *common);
  create->callback([common, file, endpoint, window, metadata, collection, wait] {
    json req = {{"endpoint", *endpoint}, {"completion_window", *window}};
    if (!collection->empty()) req["vector_collection"] = *collection;
    uploadAndCreate(*common, *file, readWhole(*file), std::move(req), *metadata, *wait);
  });

  auto* embed = batches->add_subcommand(
      "embed", "Embed a file of texts into a vector collection as a batch (resumable, half price)");
  auto model = std::make_shared<std::string>();
  auto text_key = std::make_shared<std::string>("text");
  embed->add_option("collection", *collection, "The collection (it must exist)")->required();
  embed->add_option("file", *file, "JSON lines {\"id\", \"text\", \"payload\"}")->required();
  embed->add_option("--model", *model, "The embedding model")->required();
  embed->add_option("--text-key", *text_key,
                    "Keep the text in the payload under this key (\"\": not)");
  embed->add_option("--window", *window, "Completion window");
  embed->add_option("--metadata", *metadata, "key=value (repeatable)");
  embed->add_flag("--wait", *wait, "Wait for the batch to end, showing its progress");
  addCommon(embed, *common);
  embed->callback([common, file, collection, model, text_key, window, metadata, wait] {
    json req = {{"endpoint", "/v1/embeddings"},
                {"completion_window", *window},
                {"vector_collection", *collection}};
    uploadAndCreate(*common, *file, embedLines(*file, *model, *text_key), std::move(req), *metadata,
                    *wait);
  });

  auto* list = batches->add_subcommand("list", "The batches this key's team sees, newest first");
  auto limit = std::make_shared<int>(20);
  list->add_option("--limit", *limit, "At most this many (1-100)");
  addCommon(list, *common);
  list->callback([common, limit] {
    const json j = callJson(*common, "GET", "/v1/batches?limit=" + std::to_string(*limit));
    done(*common, j, [&] {
      for (const auto& b : j.value("data", json::array())) {
        std::printf("%-40s %-11s %-22s %s\n", str(b, "id").c_str(), str(b, "status").c_str(),
                    str(b, "endpoint").c_str(), progressText(b).c_str());
      }
    });
  });

  auto* show = batches->add_subcommand("show", "One batch: status, progress and ETA, errors");
  auto id = std::make_shared<std::string>();
  show->add_option("id", *id, "Batch id")->required();
  show->add_flag("--wait", *wait, "Wait for the batch to end, showing its progress");
  addCommon(show, *common);
  show->callback([common, id, wait] {
    const json b = *wait ? waitFor(*common, *id) : callJson(*common, "GET", "/v1/batches/" + *id);
    done(*common, b, [&] { printBatch(b); });
  });

  auto* cancel = batches->add_subcommand("cancel", "Cancel a batch (its answers so far are kept)");
  cancel->add_option("id", *id, "Batch id")->required();
  addCommon(cancel, *common);
  cancel->callback([common, id] {
    const json b = callJson(*common, "POST", "/v1/batches/" + *id + "/cancel");
    done(*common, b, [&] { printBatch(b); });
  });

  auto* out = batches->add_subcommand("output", "Print (or save) a batch's output or error file");
  auto errors = std::make_shared<bool>(false);
  auto to = std::make_shared<std::string>();
  out->add_option("id", *id, "Batch id")->required();
  out->add_flag("--errors", *errors, "The error file instead of the output file");
  out->add_option("-o,--output", *to, "Write to this file instead of stdout");
  out->add_option("--url", common->url, "Data port base URL (env INFERA_URL)");
  out->add_option("--api-key", common->api_key, "API key (env INFERA_API_KEY)");
  out->callback([common, id, errors, to] {
    const json b = callJson(*common, "GET", "/v1/batches/" + *id);
    const char* key = *errors ? "error_file_id" : "output_file_id";
    if (!b.contains(key) || !b[key].is_string()) {
      std::fprintf(stderr, "batch %s has no %s file (status %s)\n", id->c_str(),
                   *errors ? "error" : "output", b.value("status", "?").c_str());
      std::exit(1);
    }
    const std::string content =
        call(*common, "GET", "/v1/files/" + b[key].get<std::string>() + "/content", {}, {},
             std::chrono::seconds(600));
    if (to->empty()) {
      std::fwrite(content.data(), 1, content.size(), stdout);
    } else {
      std::ofstream f(*to, std::ios::binary);
      f << content;
      if (!f) {
        std::fprintf(stderr, "cannot write %s\n", to->c_str());
        std::exit(1);
      }
    }
    std::exit(0);
  });
}

}  // namespace infera::cli
