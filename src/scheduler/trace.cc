#include "scheduler/trace.h"

#include <algorithm>
#include <charconv>
#include <fstream>
#include <limits>
#include <map>

namespace infera::sched {
namespace {

std::vector<std::string_view> splitView(std::string_view s, char sep) {
  std::vector<std::string_view> out;
  size_t start = 0;
  while (true) {
    const size_t pos = s.find(sep, start);
    if (pos == std::string_view::npos) {
      out.push_back(s.substr(start));
      return out;
    }
    out.push_back(s.substr(start, pos - start));
    start = pos + 1;
  }
}

struct Csv {
  std::map<std::string, size_t> columns;
  std::vector<std::string> lines;
};

Result<Csv> readCsv(const std::string& path, const std::vector<std::string>& required) {
  std::ifstream in(path);
  if (!in) return Status::notFound("cannot open " + path);
  Csv csv;
  std::string header;
  if (!std::getline(in, header)) return Status::invalidArgument(path + ": empty file");
  if (!header.empty() && header.back() == '\r') header.pop_back();
  const auto cols = splitView(header, ',');
  for (size_t i = 0; i < cols.size(); ++i) csv.columns[std::string(cols[i])] = i;
  for (const auto& r : required) {
    if (!csv.columns.count(r)) return Status::invalidArgument(path + ": missing column " + r);
  }
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (!line.empty()) csv.lines.push_back(line);
  }
  return csv;
}

bool parseInt(std::string_view s, int64_t* out) {
  if (s.empty()) return false;
  const auto res = std::from_chars(s.data(), s.data() + s.size(), *out);
  return res.ec == std::errc() && res.ptr == s.data() + s.size();
}

Status fieldInt(const std::vector<std::string_view>& f, size_t col, const std::string& path,
                size_t line, int64_t* out, bool optional = false) {
  if (col >= f.size() || f[col].empty()) {
    if (optional) return Status::ok();
    return Status::invalidArgument(path + ":" + std::to_string(line) + ": missing value");
  }
  if (!parseInt(f[col], out)) {
    return Status::invalidArgument(path + ":" + std::to_string(line) + ": not an integer: '" +
                                   std::string(f[col]) + "'");
  }
  return Status::ok();
}

}  // namespace

Result<std::vector<NodeSpec>> loadNodeCsv(const std::string& path) {
  INFERA_ASSIGN_OR_RETURN(Csv csv,
                          readCsv(path, {"sn", "cpu_milli", "memory_mib", "gpu", "model"}));
  std::vector<NodeSpec> nodes;
  nodes.reserve(csv.lines.size());
  for (size_t i = 0; i < csv.lines.size(); ++i) {
    const auto f = splitView(csv.lines[i], ',');
    NodeSpec n;
    const size_t line = i + 2;
    n.name = std::string(f[csv.columns["sn"]]);
    int64_t gpus = 0;
    INFERA_RETURN_IF_ERROR(fieldInt(f, csv.columns["cpu_milli"], path, line, &n.cpu_milli));
    INFERA_RETURN_IF_ERROR(fieldInt(f, csv.columns["memory_mib"], path, line, &n.memory_mib));
    INFERA_RETURN_IF_ERROR(fieldInt(f, csv.columns["gpu"], path, line, &gpus));
    n.gpus = static_cast<int>(gpus);
    const size_t mc = csv.columns["model"];
    if (mc < f.size()) n.gpu_model = std::string(f[mc]);
    if (n.gpus == 0) n.gpu_model.clear();
    nodes.push_back(std::move(n));
  }
  return nodes;
}

Result<std::vector<PodSpec>> loadPodCsv(const std::string& path) {
  INFERA_ASSIGN_OR_RETURN(
      Csv csv, readCsv(path, {"name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli"}));
  auto col = [&](const char* name) {
    const auto it = csv.columns.find(name);
    return it == csv.columns.end() ? std::numeric_limits<size_t>::max() : it->second;
  };
  const size_t c_spec = col("gpu_spec");
  const size_t c_qos = col("qos");
  const size_t c_phase = col("pod_phase");
  const size_t c_create = col("creation_time");
  const size_t c_delete = col("deletion_time");
  std::vector<PodSpec> pods;
  pods.reserve(csv.lines.size());
  for (size_t i = 0; i < csv.lines.size(); ++i) {
    const auto f = splitView(csv.lines[i], ',');
    const size_t line = i + 2;
    PodSpec p;
    p.name = std::string(f[csv.columns["name"]]);
    int64_t num_gpu = 0, gpu_milli = 0;
    INFERA_RETURN_IF_ERROR(fieldInt(f, csv.columns["cpu_milli"], path, line, &p.cpu_milli));
    INFERA_RETURN_IF_ERROR(fieldInt(f, csv.columns["memory_mib"], path, line, &p.memory_mib));
    INFERA_RETURN_IF_ERROR(fieldInt(f, csv.columns["num_gpu"], path, line, &num_gpu));
    INFERA_RETURN_IF_ERROR(fieldInt(f, csv.columns["gpu_milli"], path, line, &gpu_milli));
    p.num_gpu = static_cast<int>(num_gpu);
    p.gpu_milli = static_cast<int>(gpu_milli);
    if (p.num_gpu == 0) p.gpu_milli = 0;
    if (c_spec < f.size() && !f[c_spec].empty()) {
      for (const auto t : splitView(f[c_spec], '|')) {
        const std::string s(t);
        if (!s.empty() &&
            std::find(p.gpu_types.begin(), p.gpu_types.end(), s) == p.gpu_types.end()) {
          p.gpu_types.push_back(s);
        }
      }
    }
    if (c_qos < f.size()) {
      p.qos = std::string(f[c_qos]);
      if (!p.qos.empty()) p.labels["qos"] = p.qos;
    }
    if (c_phase < f.size() && !f[c_phase].empty()) p.labels["phase"] = std::string(f[c_phase]);
    INFERA_RETURN_IF_ERROR(fieldInt(f, c_create, path, line, &p.creation_s, true));
    INFERA_RETURN_IF_ERROR(fieldInt(f, c_delete, path, line, &p.deletion_s, true));
    pods.push_back(std::move(p));
  }
  return pods;
}

}  // namespace infera::sched
