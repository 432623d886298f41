#include "emulator/internal/scoring.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <mutex>
#include <set>
#include <unordered_map>
#include <vector>

#include "emulator/emulator.h"
#include "emulator/internal/engine.h"
#include "net/http.h"

namespace infera::emulator {
namespace {

std::set<std::string> words(std::string_view text) {
  std::set<std::string> out;
  std::string w;
  for (char c : text) {
    const unsigned char u = static_cast<unsigned char>(c);
    if (std::isalnum(u) || u >= 0x80) {
      w += static_cast<char>(std::tolower(u));
    } else if (!w.empty()) {
      out.insert(std::move(w));
      w.clear();
    }
  }
  if (!w.empty()) out.insert(std::move(w));
  return out;
}

std::string number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.6g", v);
  return buf;
}

// A string, or an array of strings (objects with "text" too, as rerank documents may be).
Status texts(simdjson::dom::element e, std::string_view field, std::vector<std::string_view>& out) {
  std::string_view one;
  simdjson::dom::array arr;
  if (e.get(one) == simdjson::SUCCESS) {
    out.push_back(one);
    return Status::ok();
  }
  if (e.get(arr) != simdjson::SUCCESS) {
    return Status::invalidArgument("'" + std::string(field) +
                                   "' must be a string or an array of strings");
  }
  for (auto item : arr) {
    if (item.get(one) == simdjson::SUCCESS || item["text"].get(one) == simdjson::SUCCESS) {
      out.push_back(one);
    } else {
      return Status::invalidArgument("'" + std::string(field) + "' holds a non-text item");
    }
  }
  return Status::ok();
}

// Words seen by /tokenize, so /detokenize can give them back (token ids are hashes of words).
std::mutex vocab_mu;
std::unordered_map<uint32_t, std::string>& vocab() {
  static std::unordered_map<uint32_t, std::string> v;
  return v;
}

}  // namespace

double relevance(std::string_view query, std::string_view document) {
  const auto a = words(query), b = words(document);
  if (a.empty() || b.empty()) return 0;
  size_t common = 0;
  for (const auto& w : a) common += b.count(w);
  return static_cast<double>(common) / static_cast<double>(a.size() + b.size() - common);
}

Result<std::string> rerankAnswer(simdjson::dom::element request, std::string_view id) {
  std::string_view model, query;
  if (request["model"].get(model) != simdjson::SUCCESS)
    return Status::invalidArgument("missing required field 'model'");
  if (request["query"].get(query) != simdjson::SUCCESS)
    return Status::invalidArgument("'query' must be a string");
  std::vector<std::string_view> docs;
  simdjson::dom::element d;
  if (request["documents"].get(d) != simdjson::SUCCESS)
    return Status::invalidArgument("missing required field 'documents'");
  INFERA_RETURN_IF_ERROR(texts(d, "documents", docs));
  int64_t top_n = static_cast<int64_t>(docs.size());
  if (int64_t n = 0; request["top_n"].get(n) == simdjson::SUCCESS && n > 0) top_n = n;
  bool return_documents = true;
  if (bool b = true; request["return_documents"].get(b) == simdjson::SUCCESS) return_documents = b;
  std::vector<std::pair<double, size_t>> ranked;
  int tokens = 0;
  for (size_t i = 0; i < docs.size(); ++i) {
    ranked.emplace_back(relevance(query, docs[i]), i);
    tokens += estimateTokens(query) + estimateTokens(docs[i]);  // one pair per document
  }
  std::stable_sort(ranked.begin(), ranked.end(),
                   [](const auto& x, const auto& y) { return x.first > y.first; });
  if (static_cast<int64_t>(ranked.size()) > top_n) ranked.resize(static_cast<size_t>(top_n));
  std::string out = "{\"id\":\"" + std::string(id) + "\",\"model\":";
  net::appendJsonString(out, model);
  out += ",\"usage\":{\"total_tokens\":" + std::to_string(tokens) + "},\"results\":[";
  for (size_t k = 0; k < ranked.size(); ++k) {
    if (k) out += ',';
    out += "{\"index\":" + std::to_string(ranked[k].second);
    if (return_documents) {
      out += ",\"document\":{\"text\":";
      net::appendJsonString(out, docs[ranked[k].second]);
      out += '}';
    }
    out += ",\"relevance_score\":" + number(ranked[k].first) + "}";
  }
  return out + "]}";
}

Result<std::string> scoreAnswer(simdjson::dom::element request, std::string_view id,
                                int64_t created) {
  std::string_view model;
  if (request["model"].get(model) != simdjson::SUCCESS)
    return Status::invalidArgument("missing required field 'model'");
  simdjson::dom::element e1, e2;
  if (request["text_1"].get(e1) != simdjson::SUCCESS ||
      request["text_2"].get(e2) != simdjson::SUCCESS) {
    return Status::invalidArgument("missing required fields 'text_1' and 'text_2'");
  }
  std::vector<std::string_view> a, b;
  INFERA_RETURN_IF_ERROR(texts(e1, "text_1", a));
  INFERA_RETURN_IF_ERROR(texts(e2, "text_2", b));
  // One text_1 against every text_2, or pairs of two lists of one length (as vLLM pairs them).
  if (a.size() != 1 && a.size() != b.size()) {
    return Status::invalidArgument("text_1 must be one text or as many as text_2");
  }
  std::string out = "{\"id\":\"" + std::string(id) +
                    "\",\"object\":\"list\",\"created\":" + std::to_string(created) + ",\"model\":";
  net::appendJsonString(out, model);
  out += ",\"data\":[";
  int tokens = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    const std::string_view q = a.size() == 1 ? a[0] : a[i];
    if (i) out += ',';
    out += "{\"index\":" + std::to_string(i) +
           ",\"object\":\"score\",\"score\":" + number(relevance(q, b[i])) + "}";
    tokens += estimateTokens(q) + estimateTokens(b[i]);
  }
  out += "],\"usage\":{\"prompt_tokens\":" + std::to_string(tokens) +
         ",\"total_tokens\":" + std::to_string(tokens) + ",\"completion_tokens\":0}}";
  return out;
}

Result<std::string> tokenizeAnswer(simdjson::dom::element request, int max_model_len) {
  std::string_view model, prompt;
  if (request["model"].get(model) != simdjson::SUCCESS)
    return Status::invalidArgument("missing required field 'model'");
  if (request["prompt"].get(prompt) != simdjson::SUCCESS)
    return Status::invalidArgument("'prompt' must be a string");
  std::vector<uint32_t> ids;
  appendTokens(prompt, ids);
  {
    std::lock_guard<std::mutex> lock(vocab_mu);
    size_t i = 0;
    for (uint32_t t : ids) {
      while (i < prompt.size() && std::isspace(static_cast<unsigned char>(prompt[i]))) ++i;
      const size_t start = i;
      while (i < prompt.size() && !std::isspace(static_cast<unsigned char>(prompt[i]))) ++i;
      if (vocab().size() < 100'000)
        vocab().emplace(t, std::string(prompt.substr(start, i - start)));
    }
  }
  std::string out = "{\"count\":" + std::to_string(ids.size()) +
                    ",\"max_model_len\":" + std::to_string(max_model_len) + ",\"tokens\":[";
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i) out += ',';
    out += std::to_string(ids[i]);
  }
  return out + "],\"token_strs\":null}";
}

Result<std::string> detokenizeAnswer(simdjson::dom::element request) {
  std::string_view model;
  if (request["model"].get(model) != simdjson::SUCCESS)
    return Status::invalidArgument("missing required field 'model'");
  simdjson::dom::array tokens;
  if (request["tokens"].get(tokens) != simdjson::SUCCESS)
    return Status::invalidArgument("'tokens' must be an array of token ids");
  std::string text;
  std::lock_guard<std::mutex> lock(vocab_mu);
  for (auto t : tokens) {
    uint64_t id = 0;
    if (t.get(id) != simdjson::SUCCESS || id > UINT32_MAX)
      return Status::invalidArgument("'tokens' must be an array of token ids");
    const auto it = vocab().find(static_cast<uint32_t>(id));
    if (!text.empty()) text += ' ';
    text += it == vocab().end() ? "<unk>" : it->second;
  }
  std::string out = "{\"prompt\":";
  net::appendJsonString(out, text);
  return out + "}";
}

}  // namespace infera::emulator
