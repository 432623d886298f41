#include "cli/models_cmd.h"

#include <fcntl.h>
#include <netdb.h>
#include <openssl/evp.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/admin_client.h"
#include "core/text.h"
#include "net/client.h"

namespace infera::cli {
namespace {

using nlohmann::json;

using Options = AdminOptions;

std::string enc(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out += static_cast<char>(c);
    } else {
      char buf[4];
      std::snprintf(buf, sizeof(buf), "%%%02X", c);
      out += buf;
    }
  }
  return out;
}

[[noreturn]] void die(const std::string& msg) {
  std::fprintf(stderr, "%s\n", msg.c_str());
  std::exit(1);
}

json call(const Options& o, const std::string& method, const std::string& path,
          const json& body = nullptr) {
  return adminCall(o, method, path, body);
}

json mlflow(const Options& o, const std::string& method, const std::string& endpoint,
            const json& body = nullptr) {
  return call(o, method, "/api/2.0/mlflow/" + endpoint, body);
}

std::string aliasesOf(const json& m) {
  std::string s;
  if (m.contains("aliases")) {
    for (const auto& a : m["aliases"]) {
      if (!s.empty()) s += ",";
      s += a.is_object() ? a.value("alias", "") + "->" + a.value("version", "")
                         : a.get<std::string>();
    }
  }
  return s.empty() ? "-" : s;
}

// ---- a streaming HTTP/1.1 exchange for artifacts (files are never read into memory whole) ----

struct Url {
  std::string host;
  std::string port = "80";
};

Url parseUrl(const std::string& url) {
  if (!url.starts_with("http://")) die("artifact transfers need an http:// admin URL, got " + url);
  std::string rest = url.substr(7);
  rest = rest.substr(0, rest.find('/'));
  Url u;
  const size_t colon = rest.rfind(':');
  u.host = colon == std::string::npos ? rest : rest.substr(0, colon);
  if (colon != std::string::npos) u.port = rest.substr(colon + 1);
  return u;
}

// The transfer steps report failures (an upload undoes its new version before it exits); the
// callers that have nothing to undo die() with the message.
int tryConnect(const Url& u, std::string& error) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (getaddrinfo(u.host.c_str(), u.port.c_str(), &hints, &res) != 0 || !res) {
    error = "cannot resolve " + u.host;
    return -1;
  }
  int fd = -1;
  for (addrinfo* a = res; a; a = a->ai_next) {
    fd = ::socket(a->ai_family, a->ai_socktype, a->ai_protocol);
    if (fd >= 0 && ::connect(fd, a->ai_addr, a->ai_addrlen) == 0) break;
    if (fd >= 0) ::close(fd);
    fd = -1;
  }
  freeaddrinfo(res);
  if (fd < 0) error = "cannot connect to " + u.host + ":" + u.port;
  return fd;
}

int connectTo(const Url& u) {
  std::string error;
  const int fd = tryConnect(u, error);
  if (fd < 0) die(error);
  return fd;
}

bool trySendAll(int fd, std::string_view data, std::string& error) {
  while (!data.empty()) {
    const ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      error = std::string("sending: ") + std::strerror(errno);
      return false;
    }
    data.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

void sendAll(int fd, std::string_view data) {
  std::string error;
  if (!trySendAll(fd, data, error)) die(error);
}

struct Head {
  int status = 0;
  std::map<std::string, std::string> headers;
  std::string rest;  // body bytes read with the head
};

bool tryReadHead(int fd, Head& h, std::string& error) {
  std::string buf;
  char tmp[16384];
  size_t end = std::string::npos;
  while ((end = buf.find("\r\n\r\n")) == std::string::npos) {
    const ssize_t n = ::recv(fd, tmp, sizeof(tmp), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      error = "the admin API closed the connection before answering";
      return false;
    }
    buf.append(tmp, static_cast<size_t>(n));
  }
  const std::string head = buf.substr(0, end);
  h.rest = buf.substr(end + 4);
  h.status = std::atoi(head.substr(head.find(' ') + 1, 3).c_str());
  size_t pos = head.find("\r\n");
  while (pos != std::string::npos && pos + 2 < head.size()) {
    const size_t next = head.find("\r\n", pos + 2);
    const std::string line =
        head.substr(pos + 2, next == std::string::npos ? std::string::npos : next - pos - 2);
    const size_t colon = line.find(':');
    if (colon != std::string::npos) {
      std::string name = line.substr(0, colon);
      for (auto& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      std::string value = line.substr(colon + 1);
      while (!value.empty() && value.front() == ' ') value.erase(0, 1);
      h.headers[name] = value;
    }
    pos = next;
  }
  return true;
}

Head readHead(int fd) {
  Head h;
  std::string error;
  if (!tryReadHead(fd, h, error)) die(error);
  return h;
}

std::string readRest(int fd, std::string have) {
  char tmp[16384];
  for (;;) {
    const ssize_t n = ::recv(fd, tmp, sizeof(tmp), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    have.append(tmp, static_cast<size_t>(n));
  }
  return have;
}

std::string requestHead(const Options& o, const Url& u, const std::string& method,
                        const std::string& path, int64_t length) {
  std::string h = method + " " + path + " HTTP/1.1\r\nHost: " + u.host + ":" + u.port +
                  "\r\nConnection: close\r\n";
  if (const std::string token = adminToken(o); !token.empty()) {
    h += "Authorization: Bearer " + token + "\r\n";
  }
  if (!o.actor.empty()) h += "X-Infera-Actor: " + o.actor + "\r\n";
  if (length >= 0)
    h += "Content-Type: application/octet-stream\r\nContent-Length: " + std::to_string(length) +
         "\r\n";
  return h + "\r\n";
}

// A file to upload, opened (and found to be a regular file) before anything is created.
struct LocalFile {
  std::string name;
  int fd = -1;
  off_t size = 0;
};

LocalFile openUpload(const std::string& file) {
  LocalFile f;
  f.name = file;
  f.fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  if (f.fd < 0) die("cannot open " + file + ": " + std::strerror(errno));
  struct stat st {};
  if (::fstat(f.fd, &st) != 0 || !S_ISREG(st.st_mode)) die(file + " is not a regular file");
  f.size = st.st_size;
  return f;
}

// The server's answer to one upload, or why it failed ("" when it did not). Closes `in.fd`.
json uploadFile(const Options& o, const std::string& path, LocalFile& in, std::string& error) {
  const Url u = parseUrl(o.url);
  const int fd = tryConnect(u, error);
  if (fd < 0) {
    ::close(in.fd);
    return nullptr;
  }
  const bool sent = trySendAll(fd, requestHead(o, u, "PUT", path, in.size), error);
  off_t offset = 0;
  while (sent && offset < in.size) {
    const ssize_t n = ::sendfile(fd, in.fd, &offset, static_cast<size_t>(in.size - offset));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // the server answered early (the answer says why)
  }
  ::close(in.fd);
  in.fd = -1;
  Head h;
  if (!sent || !tryReadHead(fd, h, error)) {
    ::close(fd);
    return nullptr;
  }
  const std::string body = readRest(fd, std::move(h.rest));
  ::close(fd);
  if (h.status != 200) {
    error = "error " + std::to_string(h.status) + ": " + adminErrorText(body);
    return nullptr;
  }
  return json::parse(body, nullptr, false);
}

void downloadFile(const Options& o, const std::string& path, const std::string& out_file) {
  const Url u = parseUrl(o.url);
  const int fd = connectTo(u);
  sendAll(fd, requestHead(o, u, "GET", path, -1));
  Head h = readHead(fd);
  if (h.status != 200) {
    const std::string body = readRest(fd, std::move(h.rest));
    die("error " + std::to_string(h.status) + ": " + adminErrorText(body));
  }
  const int out = out_file == "-"
                      ? 1
                      : ::open(out_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (out < 0) die("cannot create " + out_file + ": " + std::strerror(errno));
  EVP_MD_CTX* sha = EVP_MD_CTX_new();
  EVP_DigestInit_ex(sha, EVP_sha256(), nullptr);
  int64_t total = 0;
  auto put = [&](const char* p, size_t n) {
    EVP_DigestUpdate(sha, p, n);
    total += static_cast<int64_t>(n);
    while (n > 0) {
      const ssize_t w = ::write(out, p, n);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) die(std::string("writing: ") + std::strerror(errno));
      p += w;
      n -= static_cast<size_t>(w);
    }
  };
  put(h.rest.data(), h.rest.size());
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    put(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  if (out != 1) ::close(out);
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_DigestFinal_ex(sha, md, &len);
  EVP_MD_CTX_free(sha);
  const std::string got = toHex(md, len);
  const auto want = h.headers.find("x-infera-sha256");
  const auto clen = h.headers.find("content-length");
  if (clen != h.headers.end() && std::to_string(total) != clen->second) {
    die("download cut short: " + std::to_string(total) + " of " + clen->second + " bytes");
  }
  if (want != h.headers.end() && want->second != got)
    die("sha256 mismatch: got " + got + ", expected " + want->second);
  if (out != 1)
    std::fprintf(stderr, "%s: %lld bytes, sha256 %s\n", out_file.c_str(),
                 static_cast<long long>(total), got.c_str());
}

std::string baseName(const std::string& p) {
  const size_t slash = p.rfind('/');
  return slash == std::string::npos ? p : p.substr(slash + 1);
}

void printMove(const json& m) {
  const auto v = [](const json& x) {
    return x.is_null() ? std::string("-") : x.get<std::string>();
  };
  std::printf("%-4lld %-22s %-12s %-6s -> %-6s %-16s %s\n",
              static_cast<long long>(m.value("seq", int64_t{0})),
              timeText(m.value("ts_ms", int64_t{0})).c_str(), m.value("alias", "").c_str(),
              v(m["from_version"]).c_str(), v(m["to_version"]).c_str(),
              m.value("actor", "").c_str(), m.value("reason", "").c_str());
}

}  // namespace

void registerModelCommands(CLI::App& app) {
  auto o = std::make_shared<Options>(adminOptionsFromEnv());
  auto common = [o](CLI::App* c) {
    addAdminOptions(c, *o, "Who is making the change (alias history, audit log)");
  };
  auto* models =
      app.add_subcommand("models", "Model registry: models, versions, aliases, artifacts, serving");
  models->require_subcommand(1);
  auto name = std::make_shared<std::string>();
  auto version = std::make_shared<std::string>();
  auto alias = std::make_shared<std::string>();
  auto reason = std::make_shared<std::string>();
  auto text = std::make_shared<std::string>();
  auto list_a = std::make_shared<std::vector<std::string>>();
  auto list_b = std::make_shared<std::vector<std::string>>();
  auto flag = std::make_shared<bool>(false);
  auto num = std::make_shared<double>(-1);
  const std::string admin = "/admin/registry/models/";

  auto* list = models->add_subcommand("list", "List registered models");
  list->add_option("--filter", *text, "MLflow filter, e.g. \"name LIKE 'fraud%'\"");
  common(list);
  list->callback([o, text] {
    json all = json::array();
    std::string token;
    for (;;) {
      std::string q = "registered-models/search?max_results=1000";
      if (!text->empty()) q += "&filter=" + enc(*text);
      if (!token.empty()) q += "&page_token=" + enc(token);
      const json j = mlflow(*o, "GET", q);
      if (j.contains("registered_models")) {
        for (const auto& m : j["registered_models"]) all.push_back(m);
      }
      token = j.value("next_page_token", "");
      if (token.empty()) break;
    }
    output(*o, json{{"registered_models", all}}, [&] {
      std::printf("%-28s %-8s %-22s %s\n", "NAME", "LATEST", "UPDATED", "ALIASES");
      for (const auto& m : all) {
        std::string latest = "-";
        if (m.contains("latest_versions")) {
          int64_t best = 0;
          for (const auto& v : m["latest_versions"])
            best = std::max<int64_t>(best, std::stoll(v.value("version", "0")));
          if (best > 0) latest = std::to_string(best);
        }
        std::printf("%-28s %-8s %-22s %s\n", m.value("name", "").c_str(), latest.c_str(),
                    timeText(m.value("last_updated_timestamp", int64_t{0})).c_str(),
                    aliasesOf(m).c_str());
      }
    });
  });

  auto* show =
      models->add_subcommand("show", "Show a model: versions, aliases, bindings, experiment");
  show->add_option("name", *name, "Model")->required();
  common(show);
  show->callback([o, name, admin] {
    const json m = mlflow(*o, "GET", "registered-models/get?name=" + enc(*name));
    const json vs = mlflow(
        *o, "GET",
        "model-versions/search?filter=" + enc("name='" + *name + "'") + "&max_results=10000");
    const json b = call(*o, "GET", admin + enc(*name) + "/bindings");
    json j = {{"registered_model", m["registered_model"]},
              {"model_versions", vs.value("model_versions", json::array())},
              {"bindings", b}};
    output(*o, j, [&] {
      const json& rm = m["registered_model"];
      std::printf("model %s  (created %s, updated %s)\n", rm.value("name", "").c_str(),
                  timeText(rm.value("creation_timestamp", int64_t{0})).c_str(),
                  timeText(rm.value("last_updated_timestamp", int64_t{0})).c_str());
      if (rm.contains("description")) std::printf("  %s\n", rm.value("description", "").c_str());
      std::printf("aliases: %s\n", aliasesOf(rm).c_str());
      std::printf("%-8s %-12s %-22s %-10s %s\n", "VERSION", "STAGE", "CREATED", "ALIASES",
                  "SOURCE");
      for (const auto& v : j["model_versions"]) {
        std::printf("%-8s %-12s %-22s %-10s %s\n", v.value("version", "").c_str(),
                    v.value("current_stage", "").c_str(),
                    timeText(v.value("creation_timestamp", int64_t{0})).c_str(),
                    aliasesOf(v).c_str(), v.value("source", "").c_str());
      }
      for (const auto& bd : b["bindings"]) {
        std::string deps;
        for (const auto& d : bd["deployments"]) {
          // Appended piece by piece: "literal" + std::string trips g++ 12's false -Wrestrict at
          // -O3.
          if (!deps.empty()) deps += ',';
          deps += d.get<std::string>();
        }
        std::printf("bound: %s -> %s\n", bd.value("ref", "").c_str(), deps.c_str());
      }
    });
  });

  auto* create = models->add_subcommand("create", "Register a model");
  create->add_option("name", *name, "Model")->required();
  create->add_option("--description", *text, "Description");
  create->add_option("--tag", *list_a, "key=value (repeat)");
  common(create);
  create->callback([o, name, text, list_a] {
    json body = {{"name", *name}};
    if (!text->empty()) body["description"] = *text;
    json tags = json::array();
    for (const auto& t : *list_a) {
      const size_t eq = t.find('=');
      tags.push_back(
          {{"key", t.substr(0, eq)}, {"value", eq == std::string::npos ? "" : t.substr(eq + 1)}});
    }
    if (!tags.empty()) body["tags"] = tags;
    const json j = mlflow(*o, "POST", "registered-models/create", body);
    output(*o, j, [&] { std::printf("registered model %s\n", name->c_str()); });
  });

  auto* versions = models->add_subcommand("versions", "List a model's versions");
  versions->add_option("name", *name, "Model")->required();
  common(versions);
  versions->callback([o, name] {
    const json j = mlflow(*o, "GET",
                          "model-versions/search?filter=" + enc("name='" + *name + "'") +
                              "&max_results=10000&order_by=" + enc("version_number DESC"));
    output(*o, j, [&] {
      std::printf("%-8s %-12s %-22s %-10s %-8s %s\n", "VERSION", "STAGE", "CREATED", "ALIASES",
                  "STATUS", "SOURCE");
      if (!j.contains("model_versions")) return;
      for (const auto& v : j["model_versions"]) {
        std::printf("%-8s %-12s %-22s %-10s %-8s %s\n", v.value("version", "").c_str(),
                    v.value("current_stage", "").c_str(),
                    timeText(v.value("creation_timestamp", int64_t{0})).c_str(),
                    aliasesOf(v).c_str(), v.value("status", "").c_str(),
                    v.value("source", "").c_str());
      }
    });
  });

  auto* upload = models->add_subcommand(
      "upload", "Upload files as a version's artifacts (a new version by default)");
  upload->add_option("name", *name, "Model")->required();
  upload->add_option("files", *list_a, "Files to upload")->required();
  upload->add_option("--version", *version, "An existing version (default: create a new one)");
  upload->add_option("--source", *text,
                     "The new version's source URI (default: the registry's own artifacts)");
  common(upload);
  upload->callback([o, name, list_a, version, text, admin] {
    // Every file opens before a version is made: a missing file leaves nothing behind.
    std::vector<LocalFile> locals;
    for (const auto& f : *list_a) locals.push_back(openUpload(f));
    std::string v = *version;
    const bool created = v.empty();
    if (created) {
      const std::string source = text->empty() ? "mlflow-artifacts:/registry/" + enc(*name) : *text;
      const json made =
          mlflow(*o, "POST", "model-versions/create", json{{"name", *name}, {"source", source}});
      v = made["model_version"].value("version", "");
    }
    json files = json::array();
    for (auto& f : locals) {
      std::string error;
      const json r = uploadFile(
          *o, admin + enc(*name) + "/versions/" + v + "/artifacts/" + enc(baseName(f.name)), f,
          error);
      if (!error.empty()) {
        for (auto& rest : locals) {
          if (rest.fd >= 0) ::close(rest.fd);
        }
        // A version this command made is READY in the registry: without its files it would be
        // served and downloaded as if complete. Remove it (an existing --version is left as is).
        if (created) {
          const std::string undo = json{{"name", *name}, {"version", v}}.dump();
          auto d = net::fetchBlocking(o->url + "/api/2.0/mlflow/model-versions/delete", "DELETE",
                                      undo, adminHeaders(*o, true), std::chrono::seconds(30));
          if (d.ok() && d->status == 200) {
            die("uploading " + f.name + ": " + error + " (version " + v + " was removed)");
          }
          die("uploading " + f.name + ": " + error + " (version " + v +
              " has no files and could not be removed: delete it with MLflow's "
              "model-versions/delete)");
        }
        die("uploading " + f.name + ": " + error);
      }
      files.push_back(r);
    }
    output(*o, json{{"version", v}, {"files", files}}, [&] {
      std::printf("model %s version %s\n", name->c_str(), v.c_str());
      for (const auto& f : files) {
        std::printf("  %-30s %12lld bytes  sha256 %s\n", f.value("path", "").c_str(),
                    static_cast<long long>(f.value("size", int64_t{0})),
                    f.value("sha256", "").c_str());
      }
    });
  });

  auto* download = models->add_subcommand(
      "download", "Download a version's artifact (to a file, or - for stdout)");
  download->add_option("name", *name, "Model")->required();
  download->add_option("version", *version, "Version")->required();
  download->add_option("path", *text, "Artifact path (as listed by --list)");
  download->add_option("-o,--output", *alias, "Output file (default: the artifact's name)");
  download->add_flag("--list", *flag, "List the version's artifacts");
  common(download);
  download->callback([o, name, version, text, alias, flag, admin] {
    const std::string base = admin + enc(*name) + "/versions/" + *version + "/artifacts";
    if (*flag || text->empty()) {
      const json j = call(*o, "GET", base);
      output(*o, j, [&] {
        for (const auto& f : j["artifacts"]) {
          std::printf("%-30s %12lld  %s\n", f.value("path", "").c_str(),
                      static_cast<long long>(f.value("size", int64_t{0})),
                      f.value("sha256", "").c_str());
        }
      });
    }
    std::string path;
    for (size_t i = 0; i <= text->size();) {
      size_t j = text->find('/', i);
      if (j == std::string::npos) j = text->size();
      path += (i ? "/" : "") + enc(text->substr(i, j - i));
      i = j + 1;
    }
    downloadFile(*o, base + "/" + path, alias->empty() ? baseName(*text) : *alias);
    std::exit(0);
  });

  auto* al =
      models->add_subcommand("alias", "Point an alias at a version (recorded in its history)");
  al->add_option("name", *name, "Model")->required();
  al->add_option("alias", *alias, "Alias")->required();
  al->add_option("version", *version, "Version (omit with --delete)");
  al->add_option("--reason", *reason, "Why (kept in the history)");
  al->add_flag("--delete", *flag, "Delete the alias");
  common(al);
  al->callback([o, name, alias, version, reason, flag, admin] {
    const std::string path = admin + enc(*name) + "/aliases/" + enc(*alias);
    if (*flag) {
      const json j = call(*o, "DELETE", path + (reason->empty() ? "" : "?reason=" + enc(*reason)));
      output(*o, j, [&] { std::printf("deleted alias %s@%s\n", name->c_str(), alias->c_str()); });
    }
    if (version->empty()) die("give a version (or --delete)");
    const json j = call(*o, "POST", path, json{{"version", *version}, {"reason", *reason}});
    output(*o, j, [&] { printMove(j["move"]); });
  });

  auto* rb = models->add_subcommand(
      "rollback", "Move an alias back to the version it pointed to before its last move");
  rb->add_option("name", *name, "Model")->required();
  rb->add_option("--alias", *alias, "Alias")->required();
  rb->add_option("--reason", *reason, "Why (kept in the history)");
  common(rb);
  rb->callback([o, name, alias, reason, admin] {
    const json j = call(*o, "POST", admin + enc(*name) + "/aliases/" + enc(*alias) + "/rollback",
                        json{{"reason", *reason}});
    output(*o, j, [&] {
      const json& m = j["move"];
      std::printf("%s@%s rolled back: %s -> %s\n", name->c_str(), alias->c_str(),
                  m["from_version"].is_null() ? "-" : m["from_version"].get<std::string>().c_str(),
                  m["to_version"].is_null() ? "-" : m["to_version"].get<std::string>().c_str());
    });
  });

  auto* hist = models->add_subcommand("history", "Every move of a model's aliases, newest first");
  hist->add_option("name", *name, "Model")->required();
  hist->add_option("--alias", *alias, "Only this alias");
  common(hist);
  hist->callback([o, name, alias, admin] {
    const json j =
        call(*o, "GET",
             admin + enc(*name) + "/history" + (alias->empty() ? "" : "?alias=" + enc(*alias)));
    output(*o, j, [&] {
      std::printf("%-4s %-22s %-12s %-6s    %-6s %-16s %s\n", "SEQ", "WHEN", "ALIAS", "FROM", "TO",
                  "WHO", "REASON");
      for (const auto& m : j["history"]) printMove(m);
    });
  });

  auto* bind =
      models->add_subcommand("bind", "Serve a version or an alias with gateway deployments");
  bind->add_option("name", *name, "Model")->required();
  bind->add_option("--version", *version, "Version");
  bind->add_option("--alias", *alias, "Alias");
  bind->add_option("--deployment", *list_a,
                   "Deployment of the config's models (\"d\" or \"model/d\"; repeat)");
  bind->add_flag("--unbind", *flag, "Remove the binding");
  common(bind);
  bind->callback([o, name, version, alias, list_a, flag, admin] {
    if (version->empty() == alias->empty()) die("give exactly one of --version or --alias");
    const std::string ref = version->empty() ? "@" + *alias : *version;
    const std::string path = admin + enc(*name) + "/bindings/" + enc(ref);
    if (*flag) {
      const json j = call(*o, "DELETE", path);
      output(*o, j, [&] { std::printf("unbound %s %s\n", name->c_str(), ref.c_str()); });
    }
    if (list_a->empty()) die("give at least one --deployment");
    const json j = call(*o, "PUT", path, json{{"deployments", *list_a}});
    output(*o, j, [&] {
      std::printf("%s%s%s served by", name->c_str(), ref.starts_with("@") ? "" : "/", ref.c_str());
      for (const auto& d : *list_a) std::printf(" %s", d.c_str());
      std::printf("\n");
    });
  });

  auto* ex = models->add_subcommand(
      "experiment", "A/B split and shadow of a model's traffic; with no flags, its arms' figures");
  ex->add_option("name", *name, "Model")->required();
  ex->add_option("--arm", *list_a, "name=target:weight, target \"3\" or \"@alias\" (repeat)");
  ex->add_option("--weights", *list_b, "name=weight: change live weights (repeat)");
  ex->add_option("--sticky", *text, "user | key | header");
  ex->add_option("--header", *reason, "The header to be sticky by (--sticky header)");
  ex->add_option("--shadow", *alias, "target:share, e.g. @challenger:0.1");
  ex->add_option("--shadow-timeout-ms", *num, "The shadow's deadline");
  ex->add_flag("--delete", *flag, "End the experiment");
  common(ex);
  ex->callback([o, name, list_a, list_b, text, reason, alias, num, flag, admin] {
    const std::string path = admin + enc(*name) + "/experiment";
    if (*flag) {
      const json j = call(*o, "DELETE", path);
      output(*o, j, [&] { std::printf("experiment of %s ended\n", name->c_str()); });
    }
    if (!list_b->empty()) {
      json w = json::object();
      for (const auto& a : *list_b) {
        const size_t eq = a.find('=');
        if (eq == std::string::npos) die("--weights takes name=weight");
        w[a.substr(0, eq)] = std::stoll(a.substr(eq + 1));
      }
      const json j = call(*o, "PATCH", path, json{{"weights", w}});
      output(*o, j, [&] { std::printf("%s\n", j["experiment"].dump().c_str()); });
    }
    if (!list_a->empty() || !alias->empty()) {
      json body = json::object();
      json arms = json::array();
      for (const auto& a : *list_a) {
        const size_t eq = a.find('=');
        const size_t colon = a.rfind(':');
        if (eq == std::string::npos || colon == std::string::npos || colon < eq)
          die("--arm takes name=target:weight");
        arms.push_back({{"name", a.substr(0, eq)},
                        {"target", a.substr(eq + 1, colon - eq - 1)},
                        {"weight", std::stoll(a.substr(colon + 1))}});
      }
      body["arms"] = arms;
      if (!text->empty()) body["sticky"] = *text;
      if (!reason->empty()) body["header"] = *reason;
      if (!alias->empty()) {
        const size_t colon = alias->rfind(':');
        json sh = {{"target", alias->substr(0, colon)}};
        if (colon != std::string::npos) sh["share"] = std::stod(alias->substr(colon + 1));
        if (*num > 0) sh["timeout_ms"] = static_cast<int64_t>(*num);
        body["shadow"] = sh;
      }
      const json j = call(*o, "PUT", path, body);
      output(*o, j, [&] { std::printf("%s\n", j["experiment"].dump().c_str()); });
    }
    const json j = call(*o, "GET", path);
    output(*o, j, [&] {
      std::printf("%-12s %-18s %-7s %-9s %-7s %-9s %-9s %-9s %s\n", "ARM", "TARGET", "WEIGHT",
                  "REQUESTS", "ERRORS", "P50_MS", "P99_MS", "TTFT_P50", "TOKENS(P/C)");
      if (!j.contains("stats")) return;
      for (const auto& a : j["stats"]["arms"]) {
        std::printf("%-12s %-18s %-7lld %-9.0f %-7.0f %-9.1f %-9.1f %-9.1f %.0f/%.0f\n",
                    a.value("arm", "").c_str(), a.value("target", "").c_str(),
                    static_cast<long long>(a.value("weight", int64_t{0})), a.value("requests", 0.0),
                    a.value("errors", 0.0), a.value("latency_p50_s", 0.0) * 1000,
                    a.value("latency_p99_s", 0.0) * 1000, a.value("ttft_p50_s", 0.0) * 1000,
                    a.value("prompt_tokens", 0.0), a.value("completion_tokens", 0.0));
      }
      if (j["stats"].contains("shadow")) {
        const json& s = j["stats"]["shadow"];
        std::printf(
            "shadow %s (share %.2f): ok %.0f, errors %.0f, failed %.0f, shed %.0f, match %.0f, "
            "mismatch %.0f, p99 %.1f ms\n",
            s.value("target", "").c_str(), s.value("share", 0.0), s.value("ok", 0.0),
            s.value("error", 0.0), s.value("failed", 0.0), s.value("shed", 0.0),
            s.value("match", 0.0), s.value("mismatch", 0.0), s.value("latency_p99_s", 0.0) * 1000);
      }
    });
  });

  auto* sh = models->add_subcommand("shadow", "Recorded shadow outcomes of a model");
  sh->add_option("name", *name, "Model")->required();
  common(sh);
  sh->callback([o, name, admin] {
    const json j = call(*o, "GET", admin + enc(*name) + "/shadow");
    output(*o, j, [&] {
      const json& s = j["summary"];
      std::printf("%lld outcomes: %lld ok, %lld failed, %lld matched, %lld mismatched\n",
                  static_cast<long long>(s.value("count", int64_t{0})),
                  static_cast<long long>(s.value("ok", int64_t{0})),
                  static_cast<long long>(s.value("failed", int64_t{0})),
                  static_cast<long long>(s.value("matched", int64_t{0})),
                  static_cast<long long>(s.value("mismatched", int64_t{0})));
    });
  });

  auto* cap =
      models->add_subcommand("capture", "Data capture of a version's requests and responses");
  cap->add_option("name", *name, "Model")->required();
  cap->add_option("version", *version, "Version")->required();
  cap->add_option("--sample", *num, "Share captured, 0..1");
  cap->add_option("--flag-contains", *list_a,
                  "Flag (and capture) answers containing this (repeat)");
  cap->add_flag("--off", *flag, "Stop capturing");
  auto flag_errors = std::make_shared<bool>(false);
  cap->add_flag("--flag-errors", *flag_errors, "Flag (and capture) answers with status >= 500");
  common(cap);
  cap->callback([o, name, version, num, list_a, flag, flag_errors, admin] {
    const std::string path = admin + enc(*name) + "/versions/" + *version + "/capture";
    if (*flag) {
      const json j = call(*o, "DELETE", path);
      output(*o, j,
             [&] { std::printf("capture of %s/%s off\n", name->c_str(), version->c_str()); });
    }
    if (*num < 0 && list_a->empty() && !*flag_errors) {
      const json j = call(*o, "GET", path);
      output(*o, j, [&] { std::printf("%s\n", j["capture"].dump().c_str()); });
    }
    json body = {
        {"sample", std::max(0.0, *num)}, {"flag_errors", *flag_errors}, {"flag_contains", *list_a}};
    const json j = call(*o, "PUT", path, body);
    output(*o, j, [&] { std::printf("%s\n", j["capture"].dump().c_str()); });
  });

  auto* oo = models->add_subcommand(
      "opt-out", "Keys whose traffic is never captured: list them, add one, or --remove it");
  oo->add_option("key_id", *text, "The key's id (as `infera keys list` shows it)");
  auto remove = std::make_shared<bool>(false);
  oo->add_flag("--remove", *remove, "Take the key off the list");
  common(oo);
  oo->callback([o, text, remove] {
    if (text->empty()) {
      if (*remove) die("--remove needs a key id");
      const json j = call(*o, "GET", "/admin/registry/opt-outs");
      output(*o, j, [&] {
        for (const auto& k : j["keys"]) std::printf("%s\n", k.get<std::string>().c_str());
      });
    }
    const json j = call(*o, *remove ? "DELETE" : "PUT", "/admin/registry/opt-outs/" + enc(*text));
    output(*o, j, [&] {
      std::printf("%s %s\n", text->c_str(),
                  *remove ? "is captured again" : "opted out: its traffic is never captured");
    });
  });

  auto* rv = models->add_subcommand(
      "reviews", "The review queue: flagged inferences (of a model, or a version)");
  rv->add_option("name", *name, "Model (\"\" = all)");
  rv->add_option("--version", *version, "Version");
  rv->add_option("--state", *text, "pending (default) | reviewed | flagged | captured");
  common(rv);
  rv->callback([o, name, version, text] {
    std::string q = "/admin/registry/reviews?state=" + enc(text->empty() ? "pending" : *text);
    if (!name->empty()) q += "&model=" + enc(*name);
    if (!version->empty()) q += "&version=" + enc(*version);
    const json j = call(*o, "GET", q);
    output(*o, j, [&] {
      std::printf("%-26s %-16s %-8s %-6s %-10s %s\n", "REQUEST", "TARGET", "ARM", "STATUS",
                  "VERDICT", "REASON");
      for (const auto& r : j["reviews"]) {
        std::printf("%-26s %-16s %-8s %-6lld %-10s %s\n", r.value("request_id", "").c_str(),
                    r.value("target", "").c_str(), r.value("arm", "").c_str(),
                    static_cast<long long>(r.value("status", int64_t{0})),
                    r.value("verdict", "").empty() ? "-" : r.value("verdict", "").c_str(),
                    r.value("reason", "").c_str());
      }
    });
  });

  auto* review =
      models->add_subcommand("review", "Answer a review: a verdict and a label for an inference");
  review->add_option("request_id", *text, "The inference's x-request-id")->required();
  review->add_option("--verdict", *alias, "e.g. good | bad")->required();
  review->add_option("--label", *version, "The label for training");
  review->add_option("--note", *reason, "A note");
  common(review);
  review->callback([o, text, alias, version, reason] {
    const json j = call(*o, "POST", "/admin/registry/reviews/" + enc(*text),
                        json{{"verdict", *alias}, {"label", *version}, {"note", *reason}});
    output(*o, j, [&] { std::printf("reviewed %s: %s\n", text->c_str(), alias->c_str()); });
  });

  auto* fl = models->add_subcommand("flag", "Flag an inference (by request id) for review");
  fl->add_option("request_id", *text, "The inference's x-request-id")->required();
  fl->add_option("--reason", *reason, "Why");
  fl->add_option("--model", *name, "The model it was for (when it was not captured)");
  common(fl);
  fl->callback([o, text, reason, name] {
    const json j = call(*o, "POST", "/admin/registry/flags",
                        json{{"request_id", *text}, {"reason", *reason}, {"model", *name}});
    output(*o, j, [&] { std::printf("flagged %s\n", text->c_str()); });
  });

  auto* ex2 =
      models->add_subcommand("export", "Reviewed cases as JSON lines (the next training set)");
  ex2->add_option("name", *name, "Model (\"\" = all)");
  ex2->add_option("--version", *version, "Version");
  common(ex2);
  ex2->callback([o, name, version] {
    std::string q = "/admin/registry/reviews/export?state=reviewed";
    if (!name->empty()) q += "&model=" + enc(*name);
    if (!version->empty()) q += "&version=" + enc(*version);
    auto r = net::fetchBlocking(o->url + q, "GET", "", adminHeaders(*o, false),
                                std::chrono::seconds(600));
    if (!r.ok()) die("cannot reach the admin API at " + o->url + ": " + r.status().message());
    if (r->status >= 400)
      die("error " + std::to_string(r->status) + ": " + adminErrorText(r->body));
    std::fwrite(r->body.data(), 1, r->body.size(), stdout);
    std::exit(0);
  });
}

}  // namespace infera::cli
