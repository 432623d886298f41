// Fuzz target: the model registry's reading of MLflow REST requests (registry/internal/mlflow.h:
// handleMlflow over an in-memory SQLite store): the query string of a GET and the JSON body of a
// POST/PATCH/DELETE, for every endpoint. The input's first byte picks the endpoint, the second
// whether the rest is a query string or a body; the rest is that text (as the door lets it in:
// inputs the server would refuse with 400 before the registry, a query that is not valid UTF-8
// once percent-decoded, are skipped).
//
// Properties, for every input:
//  - no exception escapes and nothing aborts (the registry runs these on its pool);
//  - the reply is valid UTF-8 JSON, an object; an error reply is MLflow's {"error_code",
//    "message"} with a 4xx status (never a 5xx: no request makes a working store fail).

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "core/clock.h"
#include "core/json.h"
#include "core/utf8.h"
#include "fuzz_check.h"
#include "registry/internal/mlflow.h"
#include "registry/internal/store.h"

namespace {

using infera::fuzz::printable;
using infera::registry::MlflowReply;
using infera::registry::MlflowRequest;
using infera::registry::RegistryStore;

RegistryStore& store() {
  static std::unique_ptr<RegistryStore> s = [] {
    auto opened = RegistryStore::open("sqlite::memory:", infera::SystemClock::instance());
    if (!opened.ok()) std::abort();
    auto st = std::move(*opened);
    // A model with two versions and an alias, for the reads to find.
    MlflowRequest create{"POST", "registered-models/create", "", R"({"name":"fraud"})", "", "", {}};
    infera::registry::handleMlflow(*st, create);
    for (int i = 0; i < 2; ++i) {
      MlflowRequest v{"POST", "model-versions/create",
                      "",     R"({"name":"fraud","source":"s3://b/fraud"})",
                      "",     "",
                      {}};
      infera::registry::handleMlflow(*st, v);
    }
    MlflowRequest alias{"POST", "registered-models/alias",
                        "",     R"({"name":"fraud","alias":"champion","version":"1"})",
                        "",     "",
                        {}};
    infera::registry::handleMlflow(*st, alias);
    return st;
  }();
  return *s;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const auto& endpoints = infera::registry::mlflowEndpoints();
  const auto& ep = endpoints[data[0] % endpoints.size()];
  const bool as_query = (data[1] & 1) != 0;
  const std::string rest(reinterpret_cast<const char*>(data) + 2, size - 2);
  MlflowRequest req;
  req.method = ep.method;
  req.endpoint = ep.path;
  req.actor = "fuzz";
  if (as_query) {
    // The door refuses a target that is not valid UTF-8 once percent-decoded (net server).
    if (!infera::validPercentEncodedUtf8(rest)) return 0;
    req.method = "GET";
    req.query = rest;
  } else {
    req.body = rest;
    req.content_type = "application/json";
  }
  MlflowReply reply;
  try {
    reply = infera::registry::handleMlflow(store(), req);
  } catch (const std::exception& e) {
    FUZZ_CHECK(false, std::string("an exception escaped: ") + e.what() + " on " + ep.path + " " +
                          printable(rest));
  }
  FUZZ_CHECK(infera::validUtf8(reply.body),
             "a reply that is not valid UTF-8: " + printable(reply.body));
  const auto j = infera::readJson(reply.body.empty() ? "{}" : reply.body);
  FUZZ_CHECK(j.ok() && j->is_object(), std::string("a reply that is not a JSON object on ") +
                                           ep.path + ": " + printable(reply.body));
  FUZZ_CHECK(reply.status < 500, std::string("a 5xx for a request on ") + ep.path + ": " +
                                     printable(rest) + " -> " + printable(reply.body));
  if (reply.status >= 400) {
    FUZZ_CHECK(j->contains("error_code") && (*j)["error_code"].is_string() &&
                   j->contains("message") && (*j)["message"].is_string(),
               "an error not in MLflow's shape: " + printable(reply.body));
  }
  return 0;
}
