// Flags, wiring and printing only: the work is in src/vectors (client.h, ingest.h).
#include "cli/vectors_cmd.h"

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/progress.h"
#include "core/text.h"
#include "vectors/client.h"
#include "vectors/ingest.h"

namespace infera::cli {
namespace {

using nlohmann::json;

struct Common {
  std::string url;
  std::string api_key;
  bool raw = false;
  bool progress = true;
  int retries = 8;
};

[[noreturn]] void die(const Status& s) {
  std::fprintf(stderr, "error: %s\n", s.message().c_str());
  std::exit(1);
}

vectors::VectorsClient clientOf(const Common& c) {
  vectors::ClientConfig cfg;
  cfg.url = c.url;
  cfg.api_key = c.api_key;
  cfg.retry.max_attempts = c.retries;
  return vectors::VectorsClient(cfg);
}

template <typename T>
T orDie(Result<T> r) {
  if (!r.ok()) die(r.status());
  return std::move(*r);
}

std::string human(double n) {
  char buf[32];
  if (n >= 1e9)
    std::snprintf(buf, sizeof buf, "%.2fG", n / 1e9);
  else if (n >= 1e6)
    std::snprintf(buf, sizeof buf, "%.2fM", n / 1e6);
  else if (n >= 1e4)
    std::snprintf(buf, sizeof buf, "%.1fk", n / 1e3);
  else
    std::snprintf(buf, sizeof buf, "%.0f", n);
  return buf;
}

std::string progressDetail(const vectors::Progress& p) {
  std::string s = human(double(p.points)) + " points";
  if (p.seconds > 0.5) s += ", " + human(double(p.points) / p.seconds) + "/s";
  if (p.retries > 0) s += ", " + std::to_string(p.retries) + " retries";
  return s;
}

// "0.1,0.2 0.3" -> numbers (commas or spaces).
std::vector<float> parseVectorArg(const std::string& text) {
  std::vector<float> v;
  size_t i = 0;
  while (i < text.size()) {
    while (i < text.size() &&
           (text[i] == ',' || text[i] == ' ' || text[i] == '[' || text[i] == ']'))
      ++i;
    if (i >= text.size()) break;
    size_t j = i;
    while (j < text.size() && text[j] != ',' && text[j] != ' ' && text[j] != ']') ++j;
    char* end = nullptr;
    const std::string part = text.substr(i, j - i);
    const float x = std::strtof(part.c_str(), &end);
    if (end != part.c_str() + part.size()) {
      throw CLI::ValidationError("--vector", "'" + part + "' is not a number");
    }
    v.push_back(x);
    i = j;
  }
  return v;
}

void addCommon(CLI::App* c, const std::shared_ptr<Common>& o) {
  c->add_option("--url", o->url, "The data port (env INFERA_URL)")->capture_default_str();
  c->add_option("--api-key", o->api_key, "API key, sent as api-key (env INFERA_API_KEY)");
  c->add_option("--retries", o->retries, "Tries per call on 429/5xx/no answer")
      ->check(CLI::Range(1, 100));
  c->add_flag("--json", o->raw, "Print the API's JSON");
}

struct CreateArgs {
  std::string name;
  vectors::CollectionSpec spec;
  std::string quantization;
};

struct LoadArgs {
  std::string name, file, format = "auto", id_column = "none";
  vectors::ReadOptions read;
  vectors::LoadOptions load;
};

struct SearchArgs {
  std::string name, vector, from_file, format = "auto", filter;
  size_t limit = 10;
  size_t ef = 0;
  bool exact = false, with_payload = false, with_vector = false;
};

struct EmbedArgs {
  std::string name, file, gateway;
  vectors::EmbedOptions o;
};

void runCreate(const Common& c, CreateArgs a) {
  if (a.quantization == "int8") a.spec.int8 = true;
  const Status s = clientOf(c).createCollection(a.name, a.spec);
  if (!s.isOk()) die(s);
  std::printf("created collection %s (dim %zu, %s%s)\n", a.name.c_str(), a.spec.dim,
              a.spec.distance.c_str(), a.spec.int8 ? ", int8" : "");
}

void runLoad(const Common& c, LoadArgs a) {
  if (!vectors::parseFileFormat(a.format, a.read.format))
    die(Status::invalidArgument("unknown --format " + a.format));
  if (a.id_column == "first") a.read.id_column = vectors::ReadOptions::IdColumn::kFirst;
  if (a.id_column == "last") a.read.id_column = vectors::ReadOptions::IdColumn::kLast;
  auto client = clientOf(c);
  ProgressBar bar("load " + a.name, c.progress);
  a.load.progress = [&](const vectors::Progress& p) {
    bar.update(p.total_bytes ? double(p.bytes) / double(p.total_bytes) : 0, progressDetail(p));
  };
  auto r = vectors::loadFile(client, a.name, a.file, a.read, a.load);
  bar.done();
  if (!r.ok()) die(r.status());
  std::printf(
      "%s %llu points from %s into %s in %.1f s (%.0f points/s, %llu batches, %lld retries)\n",
      a.load.dry_run ? "checked" : "loaded", static_cast<unsigned long long>(r->points),
      a.file.c_str(), a.name.c_str(), r->seconds,
      r->seconds > 0 ? double(r->points) / r->seconds : 0.0,
      static_cast<unsigned long long>(r->batches), static_cast<long long>(r->retries));
}

void printHits(const json& points, bool with_payload) {
  size_t rank = 1;
  for (const auto& p : points) {
    std::string id = p["id"].is_string() ? p["id"].get<std::string>() : p["id"].dump();
    std::printf("%4zu  %-38s %.6g", rank++, id.c_str(), p.value("score", 0.0));
    if (with_payload && p.contains("payload")) std::printf("  %s", p["payload"].dump().c_str());
    std::printf("\n");
  }
}

void runSearch(const Common& c, const SearchArgs& a) {
  std::vector<std::vector<float>> queries;
  if (!a.vector.empty() == !a.from_file.empty()) {
    die(Status::invalidArgument("give one of --vector or --from-file"));
  }
  auto client = clientOf(c);
  if (!a.vector.empty()) {
    queries.push_back(parseVectorArg(a.vector));
  } else {
    vectors::ReadOptions ro;
    if (!vectors::parseFileFormat(a.format, ro.format))
      die(Status::invalidArgument("unknown --format " + a.format));
    const json info = orDie(client.collectionInfo(a.name));
    ro.dim = info["config"]["params"]["vectors"].value("size", size_t{0});
    ro.ignore_extra_columns = true;
    auto reader = orDie(vectors::VectorFileReader::open(a.from_file, ro));
    vectors::FilePoint p;
    while (orDie(reader->next(p))) queries.push_back(p.vector);
  }
  json filter;
  if (!a.filter.empty()) {
    filter = json::parse(a.filter, nullptr, false);
    if (filter.is_discarded()) die(Status::invalidArgument("--filter is not JSON: " + a.filter));
  }
  json all = json::array();
  for (size_t q = 0; q < queries.size(); ++q) {
    json body = {{"query", queries[q]},
                 {"limit", a.limit},
                 {"with_payload", a.with_payload},
                 {"with_vector", a.with_vector}};
    if (!filter.is_null()) body["filter"] = filter;
    json params = json::object();
    if (a.ef > 0) params["hnsw_ef"] = a.ef;
    if (a.exact) params["exact"] = true;
    if (!params.empty()) body["params"] = params;
    const json r = orDie(client.call(
        "POST", "/collections/" + vectors::pathSegment(a.name) + "/points/query", body.dump()));
    if (c.raw) {
      all.push_back(r);
      continue;
    }
    if (queries.size() > 1) std::printf("query %zu\n", q + 1);
    printHits(r.value("points", json::array()), a.with_payload);
  }
  if (c.raw) std::printf("%s\n", (queries.size() == 1 ? all[0] : all).dump(2).c_str());
}

void runStats(const Common& c, const std::string& name) {
  auto client = clientOf(c);
  const json info = orDie(client.collectionInfo(name));
  const json stats = orDie(client.collectionStats(name));
  if (c.raw) {
    std::printf("%s\n", json{{"info", info}, {"stats", stats}}.dump(2).c_str());
    return;
  }
  const auto& cfg = info["config"];
  const auto& v = cfg["params"]["vectors"];
  std::printf("collection     %s\n", name.c_str());
  std::printf("points         %llu\n",
              static_cast<unsigned long long>(info.value("points_count", uint64_t{0})));
  std::printf("segments       %llu (one HNSW graph per collection)\n",
              static_cast<unsigned long long>(info.value("segments_count", uint64_t{0})));
  std::printf("vectors        dim %llu, %s\n",
              static_cast<unsigned long long>(v.value("size", uint64_t{0})),
              v.value("distance", "").c_str());
  std::printf("hnsw           m %d, ef_construct %d, full_scan_threshold %lld KB\n",
              cfg["hnsw_config"].value("m", 0), cfg["hnsw_config"].value("ef_construct", 0),
              static_cast<long long>(cfg["hnsw_config"].value("full_scan_threshold", int64_t{0})));
  std::printf("quantization   %s%s\n",
              cfg["quantization_config"].is_null() ? "none" : "int8 scalar",
              stats.value("quantized", false) ? " (trained)" : "");
  std::printf("slots          %llu (%llu free for reuse)\n",
              static_cast<unsigned long long>(stats.value("slots", uint64_t{0})),
              static_cast<unsigned long long>(stats.value("free_slots", uint64_t{0})));
  std::printf("index memory   %s bytes (%.0f per point: vectors, links%s)\n",
              human(double(stats.value("index_bytes", uint64_t{0}))).c_str(),
              stats.value("index_bytes_per_point", 0.0),
              stats.value("quantized", false) ? ", int8 codes" : "");
  std::printf("mean degree    %.1f\n", stats.value("mean_degree", 0.0));
  std::printf("payload index  %zu fields\n", info.value("payload_schema", json::object()).size());
  std::printf("kernels        %s\n", stats.value("kernels", "").c_str());
}

void runList(const Common& c) {
  auto client = clientOf(c);
  const auto names = orDie(client.listCollections());
  if (c.raw) {
    std::printf("%s\n", json(names).dump(2).c_str());
    return;
  }
  std::printf("%-32s %12s %6s %-8s\n", "COLLECTION", "POINTS", "DIM", "DISTANCE");
  for (const auto& n : names) {
    auto info = client.collectionInfo(n);
    if (!info.ok()) continue;  // dropped between the two calls
    const auto& v = (*info)["config"]["params"]["vectors"];
    std::printf("%-32s %12llu %6llu %-8s\n", n.c_str(),
                static_cast<unsigned long long>(info->value("points_count", uint64_t{0})),
                static_cast<unsigned long long>(v.value("size", uint64_t{0})),
                v.value("distance", "").c_str());
  }
}

void runEmbed(const Common& c, EmbedArgs a) {
  auto client = clientOf(c);
  a.o.gateway_url = a.gateway.empty() ? c.url : a.gateway;
  if (a.o.gateway_key.empty()) a.o.gateway_key = c.api_key;
  ProgressBar bar("embed " + a.name, c.progress);
  a.o.progress = [&](const vectors::Progress& p) {
    bar.update(p.total_bytes ? double(p.bytes) / double(p.total_bytes) : 0, progressDetail(p));
  };
  auto r = vectors::embedFile(client, a.name, a.file, a.o);
  bar.done();
  if (!r.ok()) die(r.status());
  if (r->resumed_from_line > 0)
    std::printf("resumed at line %llu (checkpoint %s)\n",
                static_cast<unsigned long long>(r->resumed_from_line), r->checkpoint.c_str());
  std::printf(
      "embedded %llu texts with %s into %s in %.1f s (%.0f/s, %lld retries); lines 1-%llu done\n",
      static_cast<unsigned long long>(r->points), a.o.model.c_str(), a.name.c_str(), r->seconds,
      r->seconds > 0 ? double(r->points) / r->seconds : 0.0, static_cast<long long>(r->retries),
      static_cast<unsigned long long>(r->lines));
}

}  // namespace

void registerVectorsCommands(CLI::App& app) {
  auto common = std::make_shared<Common>();
  common->url = envOr("INFERA_URL", "http://127.0.0.1:8080");
  common->api_key = envOr("INFERA_API_KEY", "");
  CLI::App* vec = app.add_subcommand(
      "vectors", "Vector index: collections, loading files, search, embedding texts");
  vec->require_subcommand(1);

  auto ca = std::make_shared<CreateArgs>();
  CLI::App* create = vec->add_subcommand("create", "Create a collection");
  create->add_option("name", ca->name, "Collection")->required();
  create->add_option("--dim", ca->spec.dim, "Vector dimension")
      ->required()
      ->check(CLI::Range(1, 65536));
  create->add_option("--distance", ca->spec.distance, "Cosine | Euclid | Dot")
      ->check(CLI::IsMember({"Cosine", "Euclid", "Dot"}))
      ->capture_default_str();
  create->add_option("--m", ca->spec.m, "HNSW links per node (default 16)")
      ->check(CLI::Range(2, 128));
  create->add_option("--ef-construct", ca->spec.ef_construct, "HNSW build beam (default 100)")
      ->check(CLI::Range(4, 100000));
  create->add_option("--quantization", ca->quantization, "int8: scalar quantization with rescoring")
      ->check(CLI::IsMember({"int8", "none"}));
  addCommon(create, common);
  create->callback([common, ca] {
    runCreate(*common, *ca);
    std::exit(0);
  });

  auto la = std::make_shared<LoadArgs>();
  CLI::App* load =
      vec->add_subcommand("load", "Load vectors from .fvecs/.ivecs/.bvecs, TSV or JSON lines");
  load->add_option("name", la->name, "Collection (must exist)")->required();
  load->add_option("file", la->file, "Input file")->required()->check(CLI::ExistingFile);
  load->add_option("--format", la->format,
                   "auto (by extension) | fvecs | ivecs | bvecs | tsv | jsonl")
      ->capture_default_str();
  load->add_option("--batch", la->load.batch_points, "Points per upsert")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  load->add_option("--concurrency", la->load.concurrency, "Upserts in flight")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  load->add_option("--id-column", la->id_column,
                   "TSV: the column holding point ids (none: ids are row numbers)")
      ->check(CLI::IsMember({"none", "first", "last"}))
      ->capture_default_str();
  load->add_flag("--ignore-extra-columns", la->read.ignore_extra_columns,
                 "TSV: drop columns past the vector");
  load->add_option("--first-id", la->read.first_id,
                   "Id of the first row/record when ids are row numbers")
      ->capture_default_str();
  load->add_flag("--dry-run", la->load.dry_run, "Read and check the whole file, send nothing");
  load->add_flag("!--no-progress", common->progress, "No progress bar");
  addCommon(load, common);
  load->callback([common, la] {
    runLoad(*common, *la);
    std::exit(0);
  });

  auto sa = std::make_shared<SearchArgs>();
  CLI::App* search =
      vec->add_subcommand("search", "Nearest neighbours of a vector, or of every vector of a file");
  search->add_option("name", sa->name, "Collection")->required();
  search->add_option("--vector", sa->vector, "The query: numbers separated by commas");
  search->add_option("--from-file", sa->from_file, "Queries from a file (any format `load` reads)")
      ->check(CLI::ExistingFile);
  search->add_option("--format", sa->format, "Format of --from-file")->capture_default_str();
  search->add_option("--limit,-k", sa->limit, "Results per query")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  search->add_option("--filter", sa->filter,
                     "A Qdrant filter (JSON), e.g. "
                     "'{\"must\":[{\"key\":\"city\",\"match\":{\"value\":\"Berlin\"}}]}'");
  search->add_option("--ef", sa->ef, "HNSW search beam (default: the server's)");
  search->add_flag("--exact", sa->exact, "Brute force instead of the graph");
  search->add_flag("--with-payload", sa->with_payload, "Print payloads");
  search->add_flag("--with-vector", sa->with_vector, "Return vectors (with --json)");
  addCommon(search, common);
  search->callback([common, sa] {
    runSearch(*common, *sa);
    std::exit(0);
  });

  auto name = std::make_shared<std::string>();
  CLI::App* stats =
      vec->add_subcommand("stats", "Points, graph, memory and config of a collection");
  stats->add_option("name", *name, "Collection")->required();
  addCommon(stats, common);
  stats->callback([common, name] {
    runStats(*common, *name);
    std::exit(0);
  });

  CLI::App* list = vec->add_subcommand("list", "List collections");
  addCommon(list, common);
  list->callback([common] {
    runList(*common);
    std::exit(0);
  });

  CLI::App* del = vec->add_subcommand("delete", "Delete a collection and its data");
  del->add_option("name", *name, "Collection")->required();
  addCommon(del, common);
  del->callback([common, name] {
    const Status s = clientOf(*common).deleteCollection(*name);
    if (!s.isOk()) die(s);
    std::printf("deleted collection %s\n", name->c_str());
    std::exit(0);
  });

  auto ea = std::make_shared<EmbedArgs>();
  CLI::App* embed = vec->add_subcommand("embed",
                                        "Embed JSON lines {\"id\",\"text\",\"payload\"} through "
                                        "/v1/embeddings and upsert them (resumable)");
  embed->add_option("name", ea->name, "Collection")->required();
  embed->add_option("file", ea->file, "JSON lines")->required()->check(CLI::ExistingFile);
  embed->add_option("--model", ea->o.model, "Embedding model")->required();
  embed->add_option("--gateway", ea->gateway, "Where /v1/embeddings is (default: --url)");
  embed->add_option("--gateway-key", ea->o.gateway_key, "Key for the gateway (default: --api-key)");
  embed->add_option("--batch", ea->o.batch, "Texts per embeddings call")
      ->check(CLI::Range(1, 2048))
      ->capture_default_str();
  embed->add_option("--concurrency", ea->o.concurrency, "Batches in flight")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  embed->add_option("--text-key", ea->o.text_key, "Payload key for the text (\"\": not stored)")
      ->capture_default_str();
  embed->add_option("--state", ea->o.state_dir,
                    "Directory for the checkpoint (default: next to the input)");
  embed->add_flag("--restart", ea->o.restart,
                  "Ignore the checkpoint and start from the first line");
  embed->add_flag("--create", ea->o.create,
                  "Create the collection (Cosine, the model's dimension) if missing");
  embed->add_flag("!--no-progress", common->progress, "No progress bar");
  addCommon(embed, common);
  embed->callback([common, ea] {
    runEmbed(*common, *ea);
    std::exit(0);
  });
}

}  // namespace infera::cli
