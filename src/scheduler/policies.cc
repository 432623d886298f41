// Placement policies. Each scores one feasible node; the engine keeps the best (random among
// exact ties). Formulas follow the FGD paper's simulator where it defines them (see
// docs/scheduler.md); scores are exact doubles, not the 0-100 integers of kube-scheduler.
#include <algorithm>
#include <cmath>

#include "scheduler/cluster.h"

namespace infera::sched {
namespace {

double gpuFreeAfter(const NodeState& n, const PodReq& r) {
  return static_cast<double>(n.gpu_free_total - r.gpuTotalMilli());
}

// Kubernetes' LeastAllocated: mean free share of CPU, memory (and GPU on GPU nodes) after placing.
double leastAllocated(const NodeState& n, const PodReq& r) {
  double s = static_cast<double>(n.cpu_free - r.cpu_milli) / std::max<int64_t>(1, n.cpu_capacity);
  s += static_cast<double>(n.mem_free - r.memory_mib) / std::max<int64_t>(1, n.mem_capacity);
  int dims = 2;
  if (n.gpus > 0) {
    s += gpuFreeAfter(n, r) / (n.gpus * kMilliPerGpu);
    ++dims;
  }
  return s / dims;
}

class SpreadPolicy final : public Policy {
 public:
  std::string_view name() const override { return "spread"; }
  double score(const ClusterView& v, int node, const PodReq& r, int* gpu) override {
    const NodeState& n = (*v.nodes)[node];
    if (r.sharing()) *gpu = bestFitGpu(n, r.gpu_milli);
    return leastAllocated(n, r);
  }
};

class MostAllocatedPolicy final : public Policy {
 public:
  std::string_view name() const override { return "most-allocated"; }
  double score(const ClusterView& v, int node, const PodReq& r, int* gpu) override {
    const NodeState& n = (*v.nodes)[node];
    if (r.sharing()) *gpu = bestFitGpu(n, r.gpu_milli);
    return -leastAllocated(n, r);
  }
};

// Lowest weighted leftover of CPU and GPU (normalised by the largest node) wins.
class BestFitPolicy final : public Policy {
 public:
  std::string_view name() const override { return "best-fit"; }
  double score(const ClusterView& v, int node, const PodReq& r, int* gpu) override {
    const NodeState& n = (*v.nodes)[node];
    if (r.sharing()) *gpu = bestFitGpu(n, r.gpu_milli);
    const double cpu = static_cast<double>(n.cpu_free - r.cpu_milli) / v.max_cpu;
    const double g = gpuFreeAfter(n, r) / v.max_gpu_milli;
    return -(0.5 * cpu + 0.5 * g);
  }
};

// Tetris-style alignment of node free vector and pod demand; the smaller the dot product the
// better (the FGD simulator's "DotProd", GPU dimension per candidate GPU for sharing pods).
class DotProductPolicy final : public Policy {
 public:
  std::string_view name() const override { return "dot-product"; }
  double score(const ClusterView& v, int node, const PodReq& r, int* gpu) override {
    const NodeState& n = (*v.nodes)[node];
    const double cpu = static_cast<double>(n.cpu_free) / v.max_cpu *
                       (static_cast<double>(r.cpu_milli) / v.max_cpu);
    if (!r.sharing()) {
      return -(cpu + static_cast<double>(n.gpu_free_total) / v.max_gpu_milli *
                         (static_cast<double>(r.gpuTotalMilli()) / v.max_gpu_milli));
    }
    double best = -1e300;
    for (int g = 0; g < n.gpus; ++g) {
      if (n.gpu_free[g] < r.gpu_milli) continue;
      const double s = -(cpu + n.gpu_free[g] / 1000.0 * (r.gpu_milli / 1000.0));
      if (s > best) {
        best = s;
        *gpu = g;
      }
    }
    return best;
  }
};

// Packs GPU demand: share an already used GPU, else take free GPUs on a used node, else open an
// empty node.
class GpuPackingPolicy final : public Policy {
 public:
  std::string_view name() const override { return "gpu-packing"; }
  double score(const ClusterView& v, int node, const PodReq& r, int* gpu) override {
    const NodeState& n = (*v.nodes)[node];
    if (r.num_gpu == 0) return 0;
    if (n.full_free_gpus == n.gpus) {
      return -static_cast<double>(n.gpus) / 100.0;  // empty node: smaller first
    }
    if (r.sharing()) {
      // Fullest partially used GPU that fits.
      int best = -1;
      for (int g = 0; g < n.gpus; ++g) {
        if (n.gpu_free[g] >= r.gpu_milli && n.gpu_free[g] < kMilliPerGpu &&
            (best < 0 || n.gpu_free[g] < n.gpu_free[best])) {
          best = g;
        }
      }
      if (best >= 0) {
        *gpu = best;
        return 2.0 + (kMilliPerGpu - n.gpu_free[best]) / 1000.0;
      }
      *gpu = bestFitGpu(n, r.gpu_milli);
      return 1.0 + (kMaxGpusPerNode - 1) / 100.0;
    }
    return 1.0 + (kMaxGpusPerNode - r.num_gpu) / 100.0;
  }
};

// Keeps pods of the same GPU shape together (Gandiva-like affinity), preferring fuller nodes
// within each band: same shape only > mixed incl. same > empty > other shapes.
class GpuClusteringPolicy final : public Policy {
 public:
  std::string_view name() const override { return "gpu-clustering"; }
  double score(const ClusterView& v, int node, const PodReq& r, int* gpu) override {
    const NodeState& n = (*v.nodes)[node];
    if (r.num_gpu == 0) return 0;
    if (r.sharing()) *gpu = bestFitGpu(n, r.gpu_milli);
    const int shape = shapeClass(r);
    int shapes_present = 0;
    for (int s = 1; s < static_cast<int>(n.shape_count.size()); ++s) {
      shapes_present += n.shape_count[s] > 0;
    }
    const double fullness = 1.0 - static_cast<double>(n.gpu_free_total) / v.max_gpu_milli;
    double band;
    if (n.shape_count[shape] > 0) {
      band = shapes_present == 1 ? 3 : 2;
    } else {
      band = shapes_present == 0 ? 1 : 0;
    }
    return band + fullness;
  }
};

class RandomFitPolicy final : public Policy {
 public:
  explicit RandomFitPolicy(uint64_t seed) : rng_(seed ^ 0x5eed) {}
  std::string_view name() const override { return "random-fit"; }
  bool isRandom() const override { return true; }
  double score(const ClusterView& v, int node, const PodReq& r, int* gpu) override {
    const NodeState& n = (*v.nodes)[node];
    if (r.sharing()) {
      // A random GPU among those that fit.
      int seen = 0;
      for (int g = 0; g < n.gpus; ++g) {
        if (n.gpu_free[g] >= r.gpu_milli && rng_.below(static_cast<uint64_t>(++seen)) == 0) {
          *gpu = g;
        }
      }
    }
    return 0;
  }

 private:
  Rng rng_;
};

// Fragmentation gradient descent: the node (and GPU) whose fragmentation grows least.
class FgdPolicy : public Policy {
 public:
  FgdPolicy(const ClusterView& v, const FragModel* model) : model_(model) {
    before_.assign(v.nodes->size(), 0);
    valid_.assign(v.nodes->size(), 0);
  }
  std::string_view name() const override { return "fgd"; }
  void nodeChanged(int node) override {
    if (static_cast<size_t>(node) < valid_.size()) valid_[node] = 0;
  }
  double score(const ClusterView& v, int node, const PodReq& r, int* gpu) override {
    return -fragDelta(v, node, r, gpu);
  }

 protected:
  // Growth of the node's fragmentation if `r` lands there (best GPU for sharing pods).
  double fragDelta(const ClusterView& v, int node, const PodReq& r, int* gpu) {
    const NodeState& n = (*v.nodes)[node];
    if (static_cast<size_t>(node) >= valid_.size()) {
      before_.resize(node + 1, 0);
      valid_.resize(node + 1, 0);
    }
    if (!valid_[node]) {
      before_[node] = model_->nodeFrag(n);
      valid_[node] = 1;
    }
    if (!r.sharing()) {
      return model_->fragAfter(n, r, -1) - before_[node];
    }
    double best = 1e300;
    int16_t tried[kMaxGpusPerNode];
    int ntried = 0;
    for (int g = 0; g < n.gpus; ++g) {
      if (n.gpu_free[g] < r.gpu_milli) continue;
      // GPUs with equal free milli give equal results.
      bool dup = false;
      for (int k = 0; k < ntried; ++k) dup |= tried[k] == n.gpu_free[g];
      if (dup) continue;
      tried[ntried++] = n.gpu_free[g];
      const double after = model_->fragAfter(n, r, g);
      if (after < best) {
        best = after;
        *gpu = g;
      }
    }
    return best - before_[node];
  }

 private:
  const FragModel* model_;
  std::vector<double> before_;
  std::vector<uint8_t> valid_;
};

// Infera's default: FGD measured against the whole workload (every shape, memory included), plus
// three terms, weighted per pod class, all in milli-GPU:
//  - CPU deficit (GPU pods): the growth of the node's free GPU that its free CPU can no longer
//    serve at the workload's CPU per GPU. FGD sees CPU only through each shape's threshold; this
//    term sees the node's CPU budget for all its free GPUs, so a GPU pod goes where its CPU does
//    not strand the GPUs left behind (on the trace, 8-GPU nodes with 12 cores per GPU run out of
//    CPU first).
//  - GPU left on the node: CPU-only and sharing pods go where GPUs are already taken, so empty
//    nodes and whole GPUs stay whole. Whole-GPU pods get no such term: FGD already charges them
//    for breaking a node.
//  - CPU left on the node (normalised by the largest node): pods go where CPU is already used, so
//    nodes with free CPU keep room for the GPU pods that need it.
class InferaPolicy final : public FgdPolicy {
 public:
  InferaPolicy(const ClusterView& v, const FragModel* model) : FgdPolicy(v, model) {
    double cpu = 0;
    double gpu = 0;
    for (const FragModel::Class& c : model->classes()) {
      if (c.req.num_gpu == 0) continue;
      cpu += c.weight * static_cast<double>(c.req.cpu_milli);
      gpu += c.weight * static_cast<double>(c.req.gpuTotalMilli());
    }
    gpu_per_cpu_ = cpu > 0 ? gpu / cpu : 0;
  }
  std::string_view name() const override { return "infera"; }
  double score(const ClusterView& v, int node, const PodReq& r, int* gpu) override {
    const NodeState& n = (*v.nodes)[node];
    const double delta = fragDelta(v, node, r, gpu);
    const Weights& w = r.num_gpu == 0 ? kCpuOnly : r.sharing() ? kSharing : kWholeGpu;
    const double gpu_left = gpuFreeAfter(n, r);
    const double cpu_after = static_cast<double>(n.cpu_free - r.cpu_milli);
    const double cpu_left = cpu_after / static_cast<double>(v.max_cpu) * kMilliPerGpu;
    double s = -delta - w.gpu_left * gpu_left - w.cpu_left * cpu_left;
    if (w.cpu_deficit > 0 && gpu_per_cpu_ > 0) {
      s -= w.cpu_deficit * (cpuDeficit(gpu_left, cpu_after) -
                            cpuDeficit(n.gpu_free_total, static_cast<double>(n.cpu_free)));
    }
    return s;
  }

 private:
  struct Weights {
    double cpu_deficit;
    double gpu_left;
    double cpu_left;
  };
  // Free GPU milli beyond what `cpu_free` can serve at the workload's CPU per GPU.
  double cpuDeficit(double gpu_free, double cpu_free) const {
    return std::max(0.0, gpu_free - cpu_free * gpu_per_cpu_);
  }

  // Tuned on six pod lists (gpushare60/80/100, default, cpu250, multigpu30; 5 seeds), then checked
  // on all 24 with 10 seeds and on unseen seeds (docs/scheduler.md). The deficit term for CPU-only
  // pods cost 60-80 GPUs on cpu250 and is off.
  static constexpr Weights kCpuOnly{0.0, 0.005, 0.05};
  static constexpr Weights kSharing{1.0, 0.005, 0.02};
  static constexpr Weights kWholeGpu{1.0, 0.0, 0.05};
  double gpu_per_cpu_ = 0;  // milli-GPU per milli-CPU over the workload's GPU pods
};

}  // namespace

std::unique_ptr<Policy> makePolicy(std::string_view name, const ClusterView& view,
                                   const FragModel* fgd_model, const FragModel* full_model,
                                   uint64_t seed) {
  if (name == "infera") return std::make_unique<InferaPolicy>(view, full_model);
  if (name == "fgd") return std::make_unique<FgdPolicy>(view, fgd_model);
  if (name == "spread") return std::make_unique<SpreadPolicy>();
  if (name == "most-allocated") return std::make_unique<MostAllocatedPolicy>();
  if (name == "best-fit") return std::make_unique<BestFitPolicy>();
  if (name == "dot-product") return std::make_unique<DotProductPolicy>();
  if (name == "gpu-packing") return std::make_unique<GpuPackingPolicy>();
  if (name == "gpu-clustering") return std::make_unique<GpuClusteringPolicy>();
  if (name == "random-fit") return std::make_unique<RandomFitPolicy>(seed);
  return nullptr;
}

}  // namespace infera::sched
