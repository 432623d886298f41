// Feature store micro-benchmarks (Release): batch ingest into RocksDB on one core (JSON frame ->
// checked rows -> WriteBatch), aggregation updates (in memory, and read-fold-write through
// RocksDB), point reads, and per stored value: bytes in each store and restart time.
//
//   build/release/bench/features/features_bench --benchmark_filter=Ingest
//   FEATURES_BENCH_ROWS=1000000 build/release/bench/features/features_bench
//   --benchmark_filter='Memory|Restart'

#include <benchmark/benchmark.h>
#include <stdlib.h>

#include <chrono>
#include <filesystem>
#include <future>
#include <random>
#include <thread>

#include "fakes/servers.h"
#include "features/internal/aggregation.h"
#include "features/internal/ingest.h"
#include "features/internal/online_store.h"
#include "features/internal/pool.h"
#include "features/internal/registry.h"
#include "net/loops.h"
#include "store/redis.h"

namespace infera::features {
namespace {

const char* kRepo = R"(entities: [{name: driver, join_keys: [driver_id]}]
push_sources: [{name: p}]
feature_views:
  - name: stats
    entities: [driver]
    source: p
    schema:
      - {name: f0, dtype: double}
      - {name: f1, dtype: double}
      - {name: f2, dtype: double}
      - {name: f3, dtype: double}
      - {name: f4, dtype: double}
      - {name: f5, dtype: int64}
      - {name: f6, dtype: int64}
      - {name: f7, dtype: int64}
      - {name: f8, dtype: string}
      - {name: f9, dtype: string}
  - name: trips
    entities: [driver]
    source: p
    aggregations:
      - {name: n_1h, function: count, window: 1h}
      - {name: sum_1h, function: sum, column: fare, window: 1h}
      - {name: avg_1d, function: avg, column: fare, window: 1d}
      - {name: max_1d, function: max, column: fare, window: 1d}
      - {name: riders_7d, function: distinct_count, column: rider, dtype: string, window: 7d}
      - {name: last_city, function: last, column: city, dtype: string, window: 1d}
)";

const Registry& registry() {
  static const std::shared_ptr<const Registry> r = *buildRegistry({{"bench.yaml", kRepo}}, {});
  return *r;
}

constexpr int64_t kNowUs = 1'700'000'000LL * 1'000'000;

// A column-major frame of `rows` rows of the stats view, as a push body's df.
std::string frameJson(size_t rows, size_t first_id) {
  std::string ids, ts, d, i, s;
  for (size_t r = 0; r < rows; ++r) {
    const char* sep = r ? "," : "";
    ids += sep + std::to_string(first_id + r);
    ts += std::string(sep) + "\"2023-11-14 22:13:20+00:00\"";
    d += sep + std::to_string(static_cast<double>(r % 1000) / 7.0);
    i += sep + std::to_string(r * 13 % 100000);
    s += std::string(sep) + "\"city-" + std::to_string(r % 50) + "\"";
  }
  std::string out = "{\"driver_id\":[" + ids + "],\"event_timestamp\":[" + ts + "]";
  for (int f = 0; f < 5; ++f) out += ",\"f" + std::to_string(f) + "\":[" + d + "]";
  for (int f = 5; f < 8; ++f) out += ",\"f" + std::to_string(f) + "\":[" + i + "]";
  for (int f = 8; f < 10; ++f) out += ",\"f" + std::to_string(f) + "\":[" + s + "]";
  return out + "}";
}

std::vector<RowWrite> buildRows(const std::string& json, simdjson::dom::parser& parser,
                                size_t first_row = 0) {
  simdjson::dom::element doc;
  if (parser.parse(json).get(doc) != simdjson::SUCCESS) std::abort();
  DataFrame df;
  if (!readDataFrame(doc, df).isOk()) std::abort();
  ViewBatch b;
  IngestOptions o;
  o.now_us = kNowUs;
  o.first_row = first_row;
  Status s = buildViewBatch(*registry().view("stats"), "event_timestamp", df, o, b);
  if (!s.isOk()) std::abort();
  return std::move(b.rows);
}

struct TempDir {
  TempDir() {
    char tmpl[] = "/tmp/infera-features-bench-XXXXXX";
    path = ::mkdtemp(tmpl);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  std::string path;
};

std::unique_ptr<OnlineStore> openRocks(const std::string& dir, const Clock& clock) {
  RocksDbOptions o;
  o.path = dir + "/db";
  auto s = openRocksDbStore(o, clock);
  if (!s.ok()) std::abort();
  for (const auto& [n, v] : registry().views) (void)(*s)->createView(v->id, v->ttl_s);
  return std::move(*s);
}

// JSON frame -> checked, encoded rows (CPU only).
void BM_Ingest_EncodeRows(benchmark::State& state) {
  const std::string json = frameJson(10'000, 0);
  simdjson::dom::parser parser;
  for (auto _ : state) benchmark::DoNotOptimize(buildRows(json, parser));
  state.SetItemsProcessed(state.iterations() * 10'000);
}
BENCHMARK(BM_Ingest_EncodeRows)->Unit(benchmark::kMillisecond);

// Encoded rows -> RocksDB (one WriteBatch of merges per 10,000 rows, WAL on).
void BM_Ingest_RocksDbWrite(benchmark::State& state) {
  TempDir dir;
  auto store = openRocks(dir.path, SystemClock::instance());
  simdjson::dom::parser parser;
  size_t first = 0;
  for (auto _ : state) {
    state.PauseTiming();
    auto rows = buildRows(frameJson(10'000, first), parser);
    first += 10'000;
    state.ResumeTiming();
    if (!store->write(std::move(rows)).isOk()) std::abort();
  }
  state.SetItemsProcessed(state.iterations() * 10'000);
}
BENCHMARK(BM_Ingest_RocksDbWrite)->Unit(benchmark::kMillisecond);

// The whole batch-ingest path on one thread: JSON frame -> checked rows -> RocksDB.
void BM_Ingest_RocksDbEndToEnd(benchmark::State& state) {
  TempDir dir;
  auto store = openRocks(dir.path, SystemClock::instance());
  simdjson::dom::parser parser;
  std::vector<std::string> frames;
  for (int i = 0; i < 20; ++i) frames.push_back(frameJson(10'000, static_cast<size_t>(i) * 10'000));
  size_t k = 0;
  for (auto _ : state) {
    if (!store->write(buildRows(frames[k++ % frames.size()], parser)).isOk()) std::abort();
  }
  state.SetItemsProcessed(state.iterations() * 10'000);
}
BENCHMARK(BM_Ingest_RocksDbEndToEnd)->Unit(benchmark::kMillisecond);

std::vector<AggInput> tripInputs(std::mt19937_64& rng) {
  std::vector<AggInput> in(6);
  const double fare = static_cast<double>(rng() % 5000) / 100.0;
  for (auto& i : in) {
    i.present = true;
    i.number = fare;
  }
  in[4].hash = hashBytes("rider-" + std::to_string(rng() % 10'000));
  in[5].encoded = std::string("\x05\x04Lyon", 6);
  return in;
}

// One event folded into one entity's state (6 aggregations, windows 1h..7d), in memory.
void BM_Aggregation_AddEvent(benchmark::State& state) {
  const FeatureView& v = *registry().view("trips");
  std::mt19937_64 rng(1);
  std::vector<std::vector<AggInput>> inputs;
  for (int i = 0; i < 4096; ++i) inputs.push_back(tripInputs(rng));
  AggState st;
  int64_t ts = kNowUs;
  size_t k = 0;
  for (auto _ : state) {
    ts += 50'000;  // 20 events a second
    benchmark::DoNotOptimize(addEvent(v, st, ts, inputs[k++ & 4095], ts));
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_Aggregation_AddEvent);

// Batches of 10,000 events over 1,000 entities: read the states, fold, write (RocksDB).
void BM_Aggregation_RocksDb(benchmark::State& state) {
  TempDir dir;
  auto store = openRocks(dir.path, SystemClock::instance());
  const FeatureView& v = *registry().view("trips");
  std::mt19937_64 rng(2);
  std::mutex lock;
  int64_t ts = kNowUs;
  for (auto _ : state) {
    state.PauseTiming();
    std::vector<AggEvent> events(10'000);
    for (auto& e : events) {
      const uint64_t id = rng() % 1000;
      e.key.assign(reinterpret_cast<const char*>(&id), 8);
      e.ts_us = ts;
      ts += 100;
      e.inputs = tripInputs(rng);
    }
    state.ResumeTiming();
    if (!applyAggEvents(*store, v, events, ts, 0, lock).isOk()) std::abort();
  }
  state.SetItemsProcessed(state.iterations() * 10'000);
}
BENCHMARK(BM_Aggregation_RocksDb)->Unit(benchmark::kMillisecond);

// One entity's rows from 5 views (one MultiGet), from the block cache.
void BM_Read_RocksDb_OneEntityFiveViews(benchmark::State& state) {
  TempDir dir;
  auto reg = buildRegistry({{"r.yaml", R"(entities: [{name: d, join_keys: [d_id]}]
feature_views:
  - {name: a, entities: [d], schema: [{name: x, dtype: double}]}
  - {name: b, entities: [d], schema: [{name: x, dtype: double}]}
  - {name: c, entities: [d], schema: [{name: x, dtype: double}]}
  - {name: e, entities: [d], schema: [{name: x, dtype: double}]}
  - {name: f, entities: [d], schema: [{name: x, dtype: double}]}
)"}},
                           {});
  RocksDbOptions o;
  o.path = dir.path + "/db";
  auto store = std::move(*openRocksDbStore(o, SystemClock::instance()));
  std::vector<uint32_t> ids;
  for (const auto& [n, v] : (*reg)->views) {
    ids.push_back(v->id);
    (void)store->createView(v->id, 0);
    std::vector<RowWrite> rows;
    for (uint64_t k = 0; k < 100'000; ++k) {
      RowWrite w{v->id, std::string(reinterpret_cast<const char*>(&k), 8), {}, 0};
      putEventTime(w.row, kNowUs);
      w.row.append(120, 'x');  // ~10 features' worth
      rows.push_back(std::move(w));
    }
    (void)store->write(std::move(rows));
  }
  (void)store->compact();
  std::mt19937_64 rng(3);
  std::vector<std::string> out;
  for (auto _ : state) {
    const uint64_t k = rng() % 100'000;
    const std::string key(reinterpret_cast<const char*>(&k), 8);
    std::vector<ReadKey> keys;
    for (uint32_t id : ids) keys.push_back({id, key});
    if (!store->read(keys, out).isOk() || out[0].empty()) std::abort();
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_Read_RocksDb_OneEntityFiveViews);

// Single-entity reads through the Redis store's loop session (one MGET of the entity's key) with
// 16 reads in flight on one loop, against the same loop's AsyncRedis issuing raw GETs of the same
// keys with the same concurrency (the pipelined floor of the client and redis-server): reads/s.
net::Task<void> readWorker(Session* session, store::AsyncRedis* raw, std::string prefix, int n,
                           uint64_t seed, std::atomic<int>* left, std::promise<void>* done) {
  std::mt19937_64 rng(seed);
  std::vector<std::string> rows;
  for (int i = 0; i < n; ++i) {
    const uint64_t k = rng() % 10'000;
    std::string key;
    putVarint(key, zigzag(static_cast<int64_t>(k)));
    if (session) {
      std::vector<ReadKey> keys(1);
      keys[0] = ReadKey{registry().view("stats")->id, key};
      auto t = session->read(keys, rows);
      Status st = co_await std::move(t);
      if (!st.isOk() || rows[0].empty()) std::abort();
    } else {
      std::vector<std::string> argv{"GET", prefix + key};
      auto t = raw->command(std::move(argv));
      auto r = co_await std::move(t);
      if (!r.ok() || r->str.empty()) std::abort();
    }
  }
  if (left->fetch_sub(1) == 1) done->set_value();
}

void redisReads(benchmark::State& state, bool through_session) {
  auto redis = testing::RedisServer::start();
  if (!redis) std::abort();
  RedisStoreOptions o;
  o.url = redis->url();
  auto store = std::move(*openRedisStore(o, SystemClock::instance()));
  simdjson::dom::parser parser;
  for (size_t first = 0; first < 10'000; first += 1'000) {
    if (!store->write(buildRows(frameJson(1'000, first), parser)).isOk()) std::abort();
  }
  const std::string prefix = "infera:f:" + std::to_string(registry().view("stats")->id) + ":";
  net::EventLoops loops(1);
  loops.start();
  WorkerPool pool(1, 16);
  std::unique_ptr<Session> session;
  std::unique_ptr<store::AsyncRedis> raw;
  std::promise<void> made;
  net::asio::post(loops.loop(0), [&] {
    session = store->session(loops.loop(0), pool);
    raw = store::AsyncRedis::create(loops.loop(0), *store::parseRedisUrl(redis->url()));
    made.set_value();
  });
  made.get_future().get();
  constexpr int kInFlight = 16, kPer = 2'000;
  for (auto _ : state) {
    std::atomic<int> left{kInFlight};
    std::promise<void> done;
    net::asio::post(loops.loop(0), [&] {
      for (int w = 0; w < kInFlight; ++w) {
        net::spawn(loops.loop(0),
                   readWorker(through_session ? session.get() : nullptr, raw.get(), prefix, kPer,
                              static_cast<uint64_t>(w), &left, &done),
                   "bench reads");
      }
    });
    done.get_future().get();
  }
  std::promise<void> closed;
  net::asio::post(loops.loop(0), [&] {
    session.reset();
    raw->close();
    raw.reset();
    closed.set_value();
  });
  closed.get_future().get();
  loops.stop();
  state.SetItemsProcessed(state.iterations() * kInFlight * kPer);
}
void BM_Read_RedisSession_OneEntity(benchmark::State& state) { redisReads(state, true); }
void BM_Read_RedisRawGet_Floor(benchmark::State& state) { redisReads(state, false); }
BENCHMARK(BM_Read_RedisSession_OneEntity)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_Read_RedisRawGet_Floor)->Unit(benchmark::kMillisecond)->UseRealTime();

size_t benchRows() {
  const char* e = std::getenv("FEATURES_BENCH_ROWS");
  return e ? static_cast<size_t>(std::atoll(e)) : 200'000;
}

// Bytes per stored feature value after a full compaction, and the time to open the store again
// (RocksDB: reopen and read one row). Rows of the stats view: 10 values each.
void BM_MemoryAndRestart_RocksDb(benchmark::State& state) {
  const size_t rows = benchRows();
  for (auto _ : state) {
    TempDir dir;
    auto store = openRocks(dir.path, SystemClock::instance());
    simdjson::dom::parser parser;
    for (size_t first = 0; first < rows; first += 10'000) {
      if (!store->write(buildRows(frameJson(std::min<size_t>(10'000, rows - first), first), parser))
               .isOk())
        std::abort();
    }
    (void)store->compact();
    const StoreStats st = store->stats();
    state.counters["values"] = static_cast<double>(rows * 10);
    state.counters["bytes_per_value"] =
        static_cast<double>(st.bytes) / static_cast<double>(rows * 10);
    store.reset();
    const auto t0 = std::chrono::steady_clock::now();
    auto again = openRocks(dir.path, SystemClock::instance());
    std::vector<std::string> out;
    const std::string key("\x02", 1);  // driver_id 1 (zigzag varint)
    (void)again->read(std::vector<ReadKey>{{registry().view("stats")->id, key}}, out);
    state.counters["restart_ms"] =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (out[0].empty()) std::abort();
  }
}
BENCHMARK(BM_MemoryAndRestart_RocksDb)->Iterations(1)->Unit(benchmark::kMillisecond);

// The same rows in a real redis-server: used_memory per value, and the time a restarted
// redis-server takes to load them from its RDB.
void BM_MemoryAndRestart_Redis(benchmark::State& state) {
  const size_t rows = benchRows();
  for (auto _ : state) {
    auto redis = testing::RedisServer::start();
    if (!redis) std::abort();
    RedisStoreOptions o;
    o.url = redis->url();
    auto store = std::move(*openRedisStore(o, SystemClock::instance()));
    auto client = std::move(*store::RedisClient::connect(*store::parseRedisUrl(redis->url())));
    auto used = [&] {
      auto r = client->command({"INFO", "memory"});
      const size_t at = r->str.find("used_memory:");
      return std::stoll(r->str.substr(at + 12));
    };
    const int64_t before = used();
    simdjson::dom::parser parser;
    for (size_t first = 0; first < rows; first += 1'000) {
      if (!store->write(buildRows(frameJson(std::min<size_t>(1'000, rows - first), first), parser))
               .isOk())
        std::abort();
    }
    state.counters["values"] = static_cast<double>(rows * 10);
    state.counters["bytes_per_value"] =
        static_cast<double>(used() - before) / static_cast<double>(rows * 10);
    // Restart: SAVE the RDB, SIGKILL, start again on the same directory, until it serves the keys
    // (redis-server answers LOADING while it reads the file).
    auto saved = client->command({"SAVE"});
    if (!saved.ok() || saved->isError()) std::abort();
    client.reset();
    store.reset();
    redis->kill();
    const auto t0 = std::chrono::steady_clock::now();
    if (!redis->restart()) std::abort();
    for (;;) {
      auto c = store::RedisClient::connect(*store::parseRedisUrl(redis->url()));
      if (c.ok()) {
        auto n = (*c)->command({"DBSIZE"});
        if (n.ok() && n->type == store::RedisReply::Type::kInteger &&
            n->integer >= static_cast<int64_t>(rows))
          break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    state.counters["restart_ms"] =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  }
}
BENCHMARK(BM_MemoryAndRestart_Redis)->Iterations(1)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace infera::features

BENCHMARK_MAIN();
