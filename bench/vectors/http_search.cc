// Search latency through HTTP (the data port's Qdrant API, one keep-alive connection) versus
// in-process (Infera's HNSW built in this process from the same file, same M/ef_construction),
// on the same queries at the same ef, in one run: p50/p99 per search and recall@10 for both, the
// in-process closed-loop QPS, the HTTP closed-loop QPS over one connection, and HTTP p50/p99 at a
// fixed rate (open loop: latency counted from each request's scheduled time, so a late answer
// delays nothing unseen).
//
//   http_search URL COLLECTION DIR [--ef 64] [--rate 500] [--seconds 10] [--m 16] [--ef-construct
//   100]
//               [--cosine] [--no-inprocess]
//
// DIR holds base.fvecs, queries.fvecs, gt.ivecs (vecgen); the collection must hold base.fvecs
// loaded with ids = row numbers (`infera vectors load C DIR/base.fvecs`).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "datasets.h"
#include "vectors/internal/hnsw.h"

namespace {

using namespace infera::vectors;
using namespace infera::vectors::bench;

// One keep-alive HTTP/1.1 connection, blocking.
class Conn {
 public:
  ~Conn() {
    if (fd_ >= 0) ::close(fd_);
  }
  bool connect(const std::string& host, int port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(uint16_t(port));
    if (inet_pton(AF_INET, host.c_str(), &a.sin_addr) != 1) return false;
    const int one = 1;
    setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    host_ = host + ":" + std::to_string(port);
    return ::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  }
  // Status code (0 on a broken connection); the body in `out`.
  int post(const std::string& path, const std::string& body, std::string& out) {
    std::string req =
        "POST " + path + " HTTP/1.1\r\nHost: " + host_ +
        "\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
        "\r\n\r\n" + body;
    for (size_t sent = 0; sent < req.size();) {
      const ssize_t n = ::send(fd_, req.data() + sent, req.size() - sent, MSG_NOSIGNAL);
      if (n <= 0) return 0;
      sent += size_t(n);
    }
    size_t head_end;
    while ((head_end = buf_.find("\r\n\r\n")) == std::string::npos) {
      if (!fill()) return 0;
    }
    const int status = std::atoi(buf_.c_str() + 9);
    std::string head = buf_.substr(0, head_end);
    for (auto& c : head) c = char(std::tolower(uint8_t(c)));
    const size_t cl = head.find("content-length:");
    if (cl == std::string::npos) return 0;
    const size_t len = std::strtoul(head.c_str() + cl + 15, nullptr, 10);
    while (buf_.size() < head_end + 4 + len) {
      if (!fill()) return 0;
    }
    out = buf_.substr(head_end + 4, len);
    buf_.erase(0, head_end + 4 + len);
    return status;
  }

 private:
  bool fill() {
    char tmp[65536];
    const ssize_t n = ::recv(fd_, tmp, sizeof tmp, 0);
    if (n <= 0) return false;
    buf_.append(tmp, size_t(n));
    return true;
  }
  int fd_ = -1;
  std::string host_;
  std::string buf_;
};

// The point ids of a query answer, in order.
std::vector<uint32_t> idsOf(const std::string& body) {
  std::vector<uint32_t> ids;
  for (size_t at = body.find("\"id\":"); at != std::string::npos;
       at = body.find("\"id\":", at + 5)) {
    ids.push_back(uint32_t(std::strtoul(body.c_str() + at + 5, nullptr, 10)));
  }
  return ids;
}

double recallOf(const std::vector<std::vector<uint32_t>>& got, const std::vector<uint32_t>& gt,
                size_t k) {
  size_t hits = 0;
  for (size_t q = 0; q < got.size(); ++q) {
    std::set<uint32_t> t(gt.begin() + long(q * k), gt.begin() + long(q * k + k));
    for (uint32_t id : got[q]) hits += t.count(id);
  }
  return double(hits) / double(got.size() * k);
}

double pct(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, size_t(p * double(v.size())))];
}

void line(const char* what, double p50, double p99, double qps, double recall, size_t n) {
  std::printf("| %s | %.1f | %.1f | %.0f | %.4f | %zu |\n", what, p50, p99, qps, recall, n);
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr,
                 "usage: http_search URL COLLECTION DIR [--ef N] [--rate R] [--seconds S] [--m M] "
                 "[--ef-construct N] [--cosine] [--no-inprocess]\n");
    return 2;
  }
  const std::string url = argv[1], collection = argv[2], dir = argv[3];
  size_t ef = 64, m = 16, efc = 100;
  double rate = 500, seconds = 10;
  bool cosine = false, inprocess = true;
  for (int i = 4; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&] { return i + 1 < argc ? std::string(argv[++i]) : std::string("0"); };
    if (a == "--ef")
      ef = std::stoul(next());
    else if (a == "--rate")
      rate = std::stod(next());
    else if (a == "--seconds")
      seconds = std::stod(next());
    else if (a == "--m")
      m = std::stoul(next());
    else if (a == "--ef-construct")
      efc = std::stoul(next());
    else if (a == "--cosine")
      cosine = true;
    else if (a == "--no-inprocess")
      inprocess = false;
  }
  std::vector<float> base, queries;
  std::vector<uint32_t> gt;
  size_t n = 0, dim = 0, nq = 0, qdim = 0, ng = 0, k = 0;
  if (!readVecs(dir + "/base.fvecs", base, n, dim) ||
      !readVecs(dir + "/queries.fvecs", queries, nq, qdim) ||
      !readVecs(dir + "/gt.ivecs", gt, ng, k) || qdim != dim || ng != nq || k != 10) {
    std::fprintf(stderr, "cannot read %s/{base,queries}.fvecs and gt.ivecs\n", dir.c_str());
    return 1;
  }
  const size_t colon = url.rfind(':');
  const std::string host = url.substr(url.find("//") + 2, colon - url.find("//") - 2);
  const int port = std::atoi(url.c_str() + colon + 1);
  std::printf(
      "%zu x %zu, %zu queries, k=10, ef=%zu; HTTP: %s collection %s, one keep-alive connection\n\n",
      n, dim, nq, ef, url.c_str(), collection.c_str());
  std::printf(
      "| path | p50 µs | p99 µs | QPS | recall@10 | searches |\n|---|---|---|---|---|---|\n");

  if (inprocess) {
    HnswParams p;
    p.m = int(m);
    p.ef_construct = int(efc);
    Hnsw index(dim, cosine ? Metric::kDot : Metric::kL2, p);
    index.reserve(n);
    SearchScratch s;
    const auto t = Clock::now();
    for (size_t i = 0; i < n; ++i) index.insert(uint32_t(i), &base[i * dim], s);
    std::fprintf(stderr, "in-process build: %.1f s\n", secondsSince(t));
    std::vector<Neighbor> out;
    std::vector<double> lat;
    std::vector<std::vector<uint32_t>> got(nq);
    const auto t0 = Clock::now();
    size_t done = 0;
    while (done < nq || secondsSince(t0) < seconds / 2) {
      const size_t q = done % nq;
      const auto a = Clock::now();
      index.search(&queries[q * dim], 10, ef, {}, s, out);
      lat.push_back(secondsSince(a) * 1e6);
      got[q].clear();
      for (auto& nb : out) got[q].push_back(nb.slot);
      ++done;
    }
    line("in-process (closed loop, one thread)", pct(lat, 0.5), pct(lat, 0.99),
         double(done) / secondsSince(t0), recallOf(got, gt, 10), done);
  }

  std::vector<std::string> bodies(nq);
  for (size_t q = 0; q < nq; ++q) {
    std::string& b = bodies[q];
    b = "{\"query\":[";
    for (size_t j = 0; j < dim; ++j) {
      char num[32];
      std::snprintf(num, sizeof num, j ? ",%.9g" : "%.9g", double(queries[q * dim + j]));
      b += num;
    }
    b += "],\"limit\":10,\"params\":{\"hnsw_ef\":" + std::to_string(ef) + "}}";
  }
  const std::string path = "/collections/" + collection + "/points/query";
  Conn c;
  if (!c.connect(host, port)) {
    std::fprintf(stderr, "cannot connect to %s:%d\n", host.c_str(), port);
    return 1;
  }
  std::string resp;
  auto one = [&](size_t q, std::vector<std::vector<uint32_t>>& got) {
    const int st = c.post(path, bodies[q], resp);
    if (st != 200) {
      std::fprintf(stderr, "HTTP %d: %s\n", st, resp.substr(0, 200).c_str());
      std::exit(1);
    }
    got[q] = idsOf(resp);
  };
  {
    std::vector<double> lat;
    std::vector<std::vector<uint32_t>> got(nq);
    const auto t0 = Clock::now();
    size_t done = 0;
    while (done < nq || secondsSince(t0) < seconds / 2) {
      const auto a = Clock::now();
      one(done % nq, got);
      lat.push_back(secondsSince(a) * 1e6);
      ++done;
    }
    line("HTTP (closed loop, one connection)", pct(lat, 0.5), pct(lat, 0.99),
         double(done) / secondsSince(t0), recallOf(got, gt, 10), done);
  }
  {
    std::vector<double> lat;
    std::vector<std::vector<uint32_t>> got(nq);
    const size_t total = size_t(rate * seconds);
    const auto t0 = Clock::now();
    const auto interval = std::chrono::nanoseconds(int64_t(1e9 / rate));
    for (size_t i = 0; i < total; ++i) {
      const auto due = t0 + i * interval;
      std::this_thread::sleep_until(due);
      one(i % nq, got);
      lat.push_back(std::chrono::duration<double>(Clock::now() - due).count() * 1e6);
    }
    char what[96];
    std::snprintf(what, sizeof what, "HTTP at %.0f req/s (open loop, one connection)", rate);
    line(what, pct(lat, 0.5), pct(lat, 0.99), double(total) / secondsSince(t0),
         recallOf(got, gt, 10), total);
  }
  return 0;
}
