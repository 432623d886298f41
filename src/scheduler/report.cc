#include "scheduler/report.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string_view>
#include <tuple>

namespace infera::sched {
namespace {

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), f, v);
  return buf;
}

Status writeFile(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::trunc);
  if (!out) return Status::unavailable("cannot write " + path);
  out << text;
  if (!out) return Status::unavailable("write failed: " + path);
  return Status::ok();
}

Status makeDir(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return Status::unavailable("cannot create " + dir + ": " + ec.message());
  return Status::ok();
}

const char* kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd",
                         "#8c564b", "#e377c2", "#7f7f7f", "#17becf", "#bcbd22"};

// A minimal line chart: series of (x, y) points with a legend.
struct Series {
  std::string name;
  std::vector<std::pair<double, double>> points;
  // Optional: a shaded band (x, low, high), e.g. the spread over seeds.
  std::vector<std::tuple<double, double, double>> band;
};

std::string lineChart(const std::string& title, const std::string& xlabel,
                      const std::string& ylabel, const std::vector<Series>& series, double xmin,
                      double xmax, double ymin, double ymax) {
  const double w = 720, h = 420, left = 70, right = 180, top = 40, bottom = 50;
  const double pw = w - left - right, ph = h - top - bottom;
  auto X = [&](double x) { return left + (x - xmin) / std::max(1e-12, xmax - xmin) * pw; };
  auto Y = [&](double y) { return top + ph - (y - ymin) / std::max(1e-12, ymax - ymin) * ph; };
  std::ostringstream s;
  s << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << w << "\" height=\"" << h
    << "\" font-family=\"sans-serif\" font-size=\"12\">\n";
  s << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  s << "<text x=\"" << w / 2 << "\" y=\"22\" text-anchor=\"middle\" font-size=\"15\">" << title
    << "</text>\n";
  s << "<rect x=\"" << left << "\" y=\"" << top << "\" width=\"" << pw << "\" height=\"" << ph
    << "\" fill=\"none\" stroke=\"#444\"/>\n";
  for (int i = 0; i <= 5; ++i) {
    const double xv = xmin + (xmax - xmin) * i / 5, yv = ymin + (ymax - ymin) * i / 5;
    s << "<line x1=\"" << X(xv) << "\" y1=\"" << top << "\" x2=\"" << X(xv) << "\" y2=\""
      << top + ph << "\" stroke=\"#eee\"/>\n";
    s << "<line x1=\"" << left << "\" y1=\"" << Y(yv) << "\" x2=\"" << left + pw << "\" y2=\""
      << Y(yv) << "\" stroke=\"#eee\"/>\n";
    s << "<text x=\"" << X(xv) << "\" y=\"" << top + ph + 16 << "\" text-anchor=\"middle\">"
      << fmt("%.3g", xv) << "</text>\n";
    s << "<text x=\"" << left - 6 << "\" y=\"" << Y(yv) + 4 << "\" text-anchor=\"end\">"
      << fmt("%.3g", yv) << "</text>\n";
  }
  s << "<text x=\"" << left + pw / 2 << "\" y=\"" << h - 12 << "\" text-anchor=\"middle\">"
    << xlabel << "</text>\n";
  s << "<text transform=\"translate(16," << top + ph / 2
    << ") rotate(-90)\" text-anchor=\"middle\">" << ylabel << "</text>\n";
  for (size_t i = 0; i < series.size(); ++i) {
    const char* color = kColors[i % (sizeof(kColors) / sizeof(kColors[0]))];
    if (!series[i].band.empty()) {
      s << "<polygon fill=\"" << color << "\" fill-opacity=\"0.18\" stroke=\"none\" points=\"";
      for (const auto& [x, lo, hi] : series[i].band) {
        s << fmt("%.1f", X(x)) << "," << fmt("%.1f", Y(std::clamp(hi, ymin, ymax))) << " ";
      }
      for (auto it = series[i].band.rbegin(); it != series[i].band.rend(); ++it) {
        const auto& [x, lo, hi] = *it;
        s << fmt("%.1f", X(x)) << "," << fmt("%.1f", Y(std::clamp(lo, ymin, ymax))) << " ";
      }
      s << "\"/>\n";
    }
    s << "<polyline fill=\"none\" stroke=\"" << color << "\" stroke-width=\"1.6\" points=\"";
    for (const auto& [x, y] : series[i].points) {
      s << fmt("%.1f", X(x)) << "," << fmt("%.1f", Y(std::clamp(y, ymin, ymax))) << " ";
    }
    s << "\"/>\n";
    const double ly = top + 14 + 18.0 * i;
    s << "<line x1=\"" << left + pw + 12 << "\" y1=\"" << ly << "\" x2=\"" << left + pw + 32
      << "\" y2=\"" << ly << "\" stroke=\"" << color << "\" stroke-width=\"3\"/>\n";
    s << "<text x=\"" << left + pw + 38 << "\" y=\"" << ly + 4 << "\">" << series[i].name
      << "</text>\n";
  }
  s << "</svg>\n";
  return s.str();
}

std::vector<std::pair<double, double>> downsample(std::vector<std::pair<double, double>> pts,
                                                  size_t max_points) {
  if (pts.size() <= max_points) return pts;
  std::vector<std::pair<double, double>> out;
  const double step = static_cast<double>(pts.size()) / max_points;
  for (size_t i = 0; i < max_points; ++i) out.push_back(pts[static_cast<size_t>(i * step)]);
  out.push_back(pts.back());
  return out;
}

nlohmann::json failedJson(const FailedPods& f) {
  return {{"cpu_only", f.cpu_only}, {"shared_gpu", f.shared}, {"whole_gpu", f.whole},
          {"multi_gpu", f.multi},   {"typed", f.typed},       {"total", f.total()}};
}

nlohmann::json curveJson(const CurvePoint& c) {
  return {{"load", c.load},
          {"allocated_gpus", c.allocated_gpus},
          {"unallocated_gpus", c.unallocated_gpus},
          {"fragmented_gpus", c.fragmented_gpus},
          {"alloc_ratio", c.alloc_ratio},
          {"frag_ratio", c.frag_ratio},
          {"failed_pods", failedJson(c.failed)}};
}

}  // namespace

double paperUnallocatedGpus(const std::string& policy, const std::string& pod_list) {
  // The FGD artifact's published results (hkust-adsl/kubernetes-scheduler-simulator,
  // experiments/analysis/expected_results/analysis_allo_discrete.csv): 6,212 x (1 - allocation
  // at 130% of arrivals), mean of its seeds 42-51, for the 17 pod lists it ran. Columns:
  // random-fit, dot-product, gpu-clustering, gpu-packing, best-fit, fgd.
  static const std::map<std::string, std::array<double, 6>> kPaper = {
      {"cpu050", {544.0, 418.3, 386.0, 390.3, 385.5, 297.8}},
      {"cpu100", {676.3, 499.8, 457.0, 452.5, 407.3, 288.6}},
      {"cpu200", {1008.2, 763.8, 626.1, 607.2, 472.1, 307.8}},
      {"cpu250", {1216.6, 1006.0, 746.1, 728.0, 531.4, 409.3}},
      {"default", {778.4, 568.5, 504.5, 496.8, 430.1, 286.3}},
      {"gpushare100", {1277.0, 1092.3, 1078.0, 1082.9, 931.4, 813.7}},
      {"gpushare40", {869.6, 648.6, 620.3, 619.3, 516.3, 363.5}},
      {"gpushare60", {1015.5, 800.4, 794.9, 779.8, 661.0, 534.2}},
      {"gpushare80", {1166.4, 963.7, 941.2, 931.9, 807.1, 664.4}},
      {"gpuspec10", {781.0, 597.0, 486.0, 468.4, 415.9, 313.8}},
      {"gpuspec20", {792.7, 623.2, 481.7, 438.8, 416.4, 320.7}},
      {"gpuspec25", {811.5, 643.9, 492.0, 435.9, 420.5, 326.7}},
      {"gpuspec33", {841.4, 674.4, 489.7, 421.2, 429.1, 338.7}},
      {"multigpu20", {702.5, 493.1, 400.2, 390.7, 376.9, 270.2}},
      {"multigpu30", {666.8, 417.4, 327.9, 318.5, 328.1, 220.2}},
      {"multigpu40", {615.5, 360.7, 279.3, 264.6, 296.0, 187.0}},
      {"multigpu50", {604.1, 319.9, 260.2, 237.2, 264.8, 175.3}},
  };
  static const std::array<std::string_view, 6> kPolicies = {
      "random-fit", "dot-product", "gpu-clustering", "gpu-packing", "best-fit", "fgd"};
  const auto row = kPaper.find(pod_list);
  if (row == kPaper.end()) return -1;
  for (size_t i = 0; i < kPolicies.size(); ++i) {
    if (kPolicies[i] == policy) return row->second[i];
  }
  return -1;
}

std::optional<StepComparison> worstStepAgainst(const FgdResult& r, const FgdResult& reference,
                                               double from_load) {
  std::optional<StepComparison> worst;
  const size_t n = std::min(r.mean_curve.size(), reference.mean_curve.size());
  for (size_t i = 0; i < n; ++i) {
    const CurvePoint& a = r.mean_curve[i];
    if (a.load < from_load - 1e-9) continue;
    const double diff = a.unallocated_gpus - reference.mean_curve[i].unallocated_gpus;
    if (!worst || diff > worst->more_unallocated) worst = StepComparison{a.load, diff};
  }
  return worst;
}

std::string fgdSummary(const std::vector<FgdResult>& results, const std::string& reference) {
  std::ostringstream s;
  if (results.empty()) return "no results\n";
  s << "FGD protocol: " << results.front().pod_list << ", " << results.front().runs.size()
    << " seeds, capacity " << fmt("%.0f", results.front().capacity_gpus) << " GPUs\n";
  s << "policy            unalloc GPUs (±sd)   paper   alloc%   frag%   failed pods   dec/s\n";
  for (const FgdResult& r : results) {
    double failed = 0, dps = 0;
    for (const FgdRun& run : r.runs) {
      failed += run.pods_failed;
      dps += run.decisions_per_second;
    }
    failed /= r.runs.size();
    dps /= r.runs.size();
    const double paper = paperUnallocatedGpus(r.policy, r.pod_list);
    char line[256];
    std::snprintf(line, sizeof(line),
                  "%-17s %8.1f (±%5.1f)   %5s   %6.2f   %5.1f   %11.0f   %5.0f\n", r.policy.c_str(),
                  r.mean_unallocated, r.stddev_unallocated,
                  paper < 0 ? "-" : fmt("%.0f", paper).c_str(), 100 * r.mean_alloc_ratio,
                  100 * r.mean_frag_ratio, failed, dps);
    s << line;
  }
  const FgdResult* ref = nullptr;
  for (const FgdResult& r : results) {
    if (r.policy == reference) ref = &r;
  }
  if (ref && results.size() > 1) {
    s << "against " << reference << " along the load curve (mean over seeds, 50% to "
      << fmt("%.0f", 100 * ref->mean_curve.back().load)
      << "% of arrivals; + = more GPUs left unallocated):\n";
    for (const FgdResult& r : results) {
      if (&r == ref) continue;
      const auto w = worstStepAgainst(r, *ref, 0.5);
      if (!w) continue;
      const CurvePoint& at = r.mean_curve.back();
      const CurvePoint& rat = ref->mean_curve.back();
      char line[256];
      std::snprintf(
          line, sizeof(line),
          "  %-15s worst step %3.0f%%: %+7.1f GPUs %s; failed pods at the end %.0f vs %.0f\n",
          r.policy.c_str(), 100 * w->load, w->more_unallocated,
          w->more_unallocated <= 0 ? "(never behind)" : "(behind there)", at.failed.total(),
          rat.failed.total());
      s << line;
    }
  }
  return s.str();
}

std::string fgdJson(const std::vector<FgdResult>& results) {
  nlohmann::json j = nlohmann::json::array();
  for (const FgdResult& r : results) {
    nlohmann::json pj;
    pj["policy"] = r.policy;
    pj["pod_list"] = r.pod_list;
    pj["capacity_gpus"] = r.capacity_gpus;
    pj["mean_unallocated_gpus"] = r.mean_unallocated;
    pj["stddev_unallocated_gpus"] = r.stddev_unallocated;
    pj["mean_alloc_ratio"] = r.mean_alloc_ratio;
    pj["mean_frag_ratio"] = r.mean_frag_ratio;
    const double paper = paperUnallocatedGpus(r.policy, r.pod_list);
    if (paper >= 0) pj["paper_unallocated_gpus"] = paper;
    for (const CurvePoint& c : r.mean_curve) {
      nlohmann::json cj = curveJson(c);
      cj["unallocated_gpus_min"] = c.unallocated_min;
      cj["unallocated_gpus_max"] = c.unallocated_max;
      pj["curve"].push_back(std::move(cj));
    }
    for (const FgdRun& run : r.runs) {
      nlohmann::json rj = {{"seed", run.seed},
                           {"pods_arrived", run.pods_arrived},
                           {"pods_failed", run.pods_failed},
                           {"failed_pods", failedJson(run.failed)},
                           {"unallocated_gpus", run.unallocated_gpus},
                           {"alloc_ratio", run.alloc_ratio},
                           {"frag_ratio", run.frag_ratio},
                           {"decisions_per_second", run.decisions_per_second}};
      for (const CurvePoint& c : run.curve) rj["curve"].push_back(curveJson(c));
      pj["runs"].push_back(std::move(rj));
    }
    j.push_back(pj);
  }
  nlohmann::json root;
  root["mode"] = "fgd";
  root["results"] = j;
  return root.dump(2) + "\n";
}

std::string fgdUnallocatedSvg(const std::vector<FgdResult>& results) {
  std::vector<Series> series;
  double xmax = 0.05, ymax = 1;
  for (const FgdResult& r : results) {
    Series s{r.policy, {}, {}};
    for (const CurvePoint& c : r.mean_curve) {
      if (c.load < 0.5 - 1e-9) continue;
      s.points.emplace_back(c.load * 100, c.unallocated_gpus);
      s.band.emplace_back(c.load * 100, c.unallocated_min, c.unallocated_max);
      xmax = std::max(xmax, c.load * 100);
      ymax = std::max(ymax, c.unallocated_max);
    }
    series.push_back(std::move(s));
  }
  return lineChart("Unallocated GPUs vs arrived load (band: min-max over seeds)",
                   "arrived GPU load (% of capacity)", "GPUs unallocated", series, 50, xmax, 0,
                   ymax * 1.05);
}

std::string fgdAllocationSvg(const std::vector<FgdResult>& results) {
  std::vector<Series> series;
  double xmax = 0.05;
  for (const FgdResult& r : results) {
    Series s{r.policy, {}, {}};
    for (const CurvePoint& c : r.mean_curve) {
      s.points.emplace_back(c.load * 100, c.alloc_ratio * 100);
      xmax = std::max(xmax, c.load * 100);
    }
    series.push_back(std::move(s));
  }
  return lineChart("GPU allocation vs arrived load", "arrived GPU load (% of capacity)",
                   "GPUs allocated (%)", series, 0, xmax, 0, 100);
}

Status writeFgdReport(const std::string& dir, const std::vector<FgdResult>& results,
                      const std::string& reference) {
  INFERA_RETURN_IF_ERROR(makeDir(dir));
  INFERA_RETURN_IF_ERROR(writeFile(dir + "/report.json", fgdJson(results)));
  INFERA_RETURN_IF_ERROR(writeFile(dir + "/alloc_vs_load.svg", fgdAllocationSvg(results)));
  INFERA_RETURN_IF_ERROR(writeFile(dir + "/unallocated_vs_load.svg", fgdUnallocatedSvg(results)));
  return writeFile(dir + "/summary.txt", fgdSummary(results, reference));
}

std::string replaySummary(const ReplayResult& r) {
  std::ostringstream s;
  s << "Time replay (" << r.policy << "): " << r.pods << " pods, " << r.scheduled << " started, "
    << r.never_scheduled << " never started\n";
  if (r.offered_load > 0) {
    s << "  synthetic arrivals: " << r.arrivals
      << " pods drawn from the list, Poisson at an offered GPU load of "
      << fmt("%.2f", r.offered_load) << " x capacity\n";
  } else {
    s << "  trace times, arrivals sped up " << fmt("%g", r.arrival_speedup) << "x\n";
  }
  s << "  pending time: mean " << fmt("%.0f", r.mean_pending_s) << " s, p99 "
    << fmt("%.0f", r.p99_pending_s) << " s; " << fmt("%.1f", 100 * r.waited_share)
    << "% of started pods waited\n";
  s << "  preemptions: " << r.preemptions << "; idle reclaimed: " << r.idle_reclaimed_pods
    << " pods, " << fmt("%.1f", r.idle_reclaimed_gpus) << " GPUs\n";
  s << "  GPU allocation (mean over time): " << fmt("%.1f", 100 * r.mean_gpu_alloc_ratio)
    << "%; free GPUs on fully empty nodes: " << fmt("%.1f", 100 * r.mean_free_on_empty_share)
    << "%\n";
  s << "  nodes needed for tier-0 guarantees: " << r.nodes_for_guarantees << " ("
    << fmt("%.1f", 100 * r.nodes_for_guarantees_share) << "% of nodes)\n";
  if (r.whole_node_gpus > 1) {
    s << "  " << r.whole_node_gpus << "-GPU pods: " << r.whole_node_pods << " arrived, "
      << r.whole_node_started << " started; pending (unstarted ones until the end) mean "
      << fmt("%.0f", r.whole_node_mean_pending_s) << " s, p99 "
      << fmt("%.0f", r.whole_node_p99_pending_s) << " s\n";
  }
  if (r.repack_moves_per_hour > 0) {
    s << "  re-packing (at most " << r.repack_moves_per_hour << " moves/h): " << r.repack_moves
      << " pods moved by " << r.repack_plans << " plans, " << r.repack_nodes_emptied
      << " nodes emptied\n";
  }
  s << "  " << r.decisions << " decisions in " << fmt("%.2f", r.seconds) << " s\n";
  return s.str();
}

std::string repackComparison(const ReplayResult& base, const ReplayResult& repack) {
  std::ostringstream s;
  s << "Re-packing (" << repack.policy << ", at most " << repack.repack_moves_per_hour
    << " moves/h): without -> with\n";
  s << "  free GPUs on fully empty nodes (mean): "
    << fmt("%.1f", 100 * base.mean_free_on_empty_share) << "% -> "
    << fmt("%.1f", 100 * repack.mean_free_on_empty_share) << "%\n";
  s << "  " << repack.whole_node_gpus << "-GPU pods pending (unstarted ones until the end): mean "
    << fmt("%.0f", base.whole_node_mean_pending_s) << " -> "
    << fmt("%.0f", repack.whole_node_mean_pending_s) << " s, p99 "
    << fmt("%.0f", base.whole_node_p99_pending_s) << " -> "
    << fmt("%.0f", repack.whole_node_p99_pending_s) << " s; started " << base.whole_node_started
    << " -> " << repack.whole_node_started << " of " << repack.whole_node_pods << "\n";
  s << "  all pods pending: mean " << fmt("%.0f", base.mean_pending_s) << " -> "
    << fmt("%.0f", repack.mean_pending_s) << " s, p99 " << fmt("%.0f", base.p99_pending_s) << " -> "
    << fmt("%.0f", repack.p99_pending_s) << " s\n";
  s << "  GPU allocation (mean): " << fmt("%.1f", 100 * base.mean_gpu_alloc_ratio) << "% -> "
    << fmt("%.1f", 100 * repack.mean_gpu_alloc_ratio) << "%; pods moved: " << repack.repack_moves
    << " (" << repack.repack_nodes_emptied << " nodes emptied)\n";
  return s.str();
}

std::string replayJson(const ReplayResult& r) {
  nlohmann::json j;
  j["mode"] = "replay";
  j["policy"] = r.policy;
  j["arrival_speedup"] = r.arrival_speedup;
  j["offered_load"] = r.offered_load;
  j["arrivals"] = r.arrivals;
  j["pods"] = r.pods;
  j["scheduled"] = r.scheduled;
  j["never_scheduled"] = r.never_scheduled;
  j["pending"] = {{"mean_s", r.mean_pending_s},
                  {"p99_s", r.p99_pending_s},
                  {"waited_share", r.waited_share},
                  {"waited", r.waited}};
  j["preemptions"] = r.preemptions;
  j["idle_reclaimed"] = {{"pods", r.idle_reclaimed_pods}, {"gpus", r.idle_reclaimed_gpus}};
  j["nodes_for_guarantees"] = {{"nodes", r.nodes_for_guarantees},
                               {"share", r.nodes_for_guarantees_share}};
  j["mean_gpu_alloc_ratio"] = r.mean_gpu_alloc_ratio;
  j["mean_free_on_empty_share"] = r.mean_free_on_empty_share;
  j["decisions"] = r.decisions;
  j["whole_node_pods"] = {{"gpus", r.whole_node_gpus},
                          {"arrived", r.whole_node_pods},
                          {"started", r.whole_node_started},
                          {"mean_pending_s", r.whole_node_mean_pending_s},
                          {"p99_pending_s", r.whole_node_p99_pending_s}};
  j["repack"] = {{"moves_per_hour", r.repack_moves_per_hour},
                 {"plans", r.repack_plans},
                 {"moves", r.repack_moves},
                 {"nodes_emptied", r.repack_nodes_emptied}};
  for (const Migration& m : r.migrations) {
    j["repack"]["migrations"].push_back(
        {{"pod", m.pod_name}, {"from", m.from}, {"to", m.to}, {"reason", m.reason}});
  }
  for (const SeriesPoint& p : r.series) {
    j["series"].push_back({{"t", p.t},
                           {"gpu_alloc_ratio", p.gpu_alloc_ratio},
                           {"free_on_empty_share", p.free_on_empty_share},
                           {"pending", p.pending},
                           {"running", p.running}});
  }
  for (const Eviction& e : r.evictions) {
    j["evictions"].push_back({{"pod", e.pod_name}, {"node", e.node}, {"reason", e.reason}});
  }
  return j.dump(2) + "\n";
}

Status writeReplayReport(const std::string& dir, const ReplayResult& r) {
  INFERA_RETURN_IF_ERROR(makeDir(dir));
  INFERA_RETURN_IF_ERROR(writeFile(dir + "/report.json", replayJson(r)));
  std::vector<std::pair<double, double>> alloc, empty;
  double tmax = 1;
  for (const SeriesPoint& p : r.series) {
    alloc.emplace_back(p.t / 86400.0, 100 * p.gpu_alloc_ratio);
    empty.emplace_back(p.t / 86400.0, 100 * p.free_on_empty_share);
    tmax = std::max(tmax, p.t / 86400.0);
  }
  INFERA_RETURN_IF_ERROR(
      writeFile(dir + "/allocation.svg",
                lineChart("GPU allocation over time", "time (days)", "GPUs allocated (%)",
                          {Series{r.policy, downsample(alloc, 600), {}}}, 0, tmax, 0, 100)));
  INFERA_RETURN_IF_ERROR(
      writeFile(dir + "/free_node_aggregation.svg",
                lineChart("Free GPUs on fully empty nodes", "time (days)", "share of free GPUs (%)",
                          {Series{r.policy, downsample(empty, 600), {}}}, 0, tmax, 0, 100)));
  // Pending time CDF.
  std::vector<double> w = r.pending_times_s;
  std::sort(w.begin(), w.end());
  std::vector<std::pair<double, double>> cdf;
  double wmax = 1;
  for (size_t i = 0; i < w.size(); ++i) {
    cdf.emplace_back(w[i] / 3600.0, 100.0 * (i + 1) / w.size());
    wmax = std::max(wmax, w[i] / 3600.0);
  }
  INFERA_RETURN_IF_ERROR(
      writeFile(dir + "/pending_time.svg",
                lineChart("Pending time (CDF)", "pending time (hours)", "pods started (%)",
                          {Series{r.policy, downsample(cdf, 600), {}}}, 0, wmax, 0, 100)));
  return writeFile(dir + "/summary.txt", replaySummary(r));
}

}  // namespace infera::sched
