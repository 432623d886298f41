#pragma once
// Getting data into a collection over the Qdrant API: vector files (TEXMEX .fvecs/.ivecs/.bvecs,
// TSV, JSON lines) loaded in batches, and JSON lines of texts embedded through an OpenAI-shaped
// /v1/embeddings and upserted with their payloads, resuming from a checkpoint after a crash.
//
//   vectors::VectorsClient client(cfg);
//   vectors::ReadOptions ro;                       // dim comes from the collection
//   vectors::LoadOptions lo;                       // batch 256, 4 in flight
//   auto report = vectors::loadFile(client, "docs", "base.fvecs", ro, lo);
//
// Bad input: a record that cannot be read (wrong dimension, not a number, non-finite, bad id,
// malformed JSON) stops the run with kInvalidArgument "FILE:LINE:COLUMN: what", and the batch it
// belongs to is never sent (nothing of it is written); batches before it are written. For binary
// files LINE is the record number (1-based) and the byte offset is named instead of a column.
//
// Threads: loadFile/embedFile block; they read on the calling thread and send from `concurrency`
// threads of their own. Progress callbacks run on the calling thread.

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "vectors/client.h"

namespace infera::vectors {

enum class FileFormat { kAuto, kFvecs, kIvecs, kBvecs, kTsv, kJsonl };
// "fvecs", "ivecs", "bvecs", "tsv", "jsonl" (also "json", "ndjson"); false otherwise.
bool parseFileFormat(const std::string& name, FileFormat& out);
// By extension: .fvecs .ivecs .bvecs, .jsonl/.ndjson/.json, anything else TSV.
FileFormat formatOf(const std::string& path);

struct ReadOptions {
  FileFormat format = FileFormat::kAuto;
  size_t dim = 0;  // every vector must have it (0: taken from the first record)
  // TSV: which column is the point id ("first", "last"); none: ids are first_id + row number.
  enum class IdColumn { kNone, kFirst, kLast } id_column = IdColumn::kNone;
  bool ignore_extra_columns = false;  // TSV: columns past the vector (and id) are dropped
  uint64_t first_id = 0;              // binary formats and TSV without an id column
};

// One point as read: its id as JSON (integer or UUID string), vector, payload (null: none).
struct FilePoint {
  nlohmann::json id;
  std::vector<float> vector;
  nlohmann::json payload;
  uint64_t line = 0;  // 1-based line (text) or record (binary)
};

class VectorFileReader {
 public:
  // kNotFound / kInvalidArgument when the file cannot be opened or its format not used.
  static Result<std::unique_ptr<VectorFileReader>> open(const std::string& path,
                                                        const ReadOptions& options);
  virtual ~VectorFileReader() = default;
  // The next point into `out`: true, or false at the end; kInvalidArgument "FILE:LINE:COL: ..."
  // for a bad record.
  virtual Result<bool> next(FilePoint& out) = 0;
  // Bytes consumed so far, and the file's size (progress).
  virtual uint64_t offset() const = 0;
  virtual uint64_t size() const = 0;
  // The dimension in force (the option's, or the first record's).
  virtual size_t dim() const = 0;
};

struct Progress {
  uint64_t points = 0;  // written (confirmed by the server)
  uint64_t bytes = 0;   // of the input read
  uint64_t total_bytes = 0;
  int64_t retries = 0;
  double seconds = 0;
};

struct LoadOptions {
  size_t batch_points = 256;
  int concurrency = 4;                            // batches in flight
  bool dry_run = false;                           // read and check everything, send nothing
  std::function<void(const Progress&)> progress;  // after each confirmed batch
};

struct LoadReport {
  uint64_t points = 0;
  uint64_t batches = 0;
  double seconds = 0;
  int64_t retries = 0;
};

// Loads `path` into `collection` (which must exist; its dimension is used when options.dim is 0).
// On a bad record: the error (see above) says which batch was refused and how many points were
// written before it.
Result<LoadReport> loadFile(const VectorsClient& client, const std::string& collection,
                            const std::string& path, ReadOptions read, const LoadOptions& options);

// Embedding JSON lines `{"id": 1 | "uuid", "text": "...", "payload": {...}}` (payload optional).
struct EmbedOptions {
  std::string model;
  std::string gateway_url;  // where /v1/embeddings is (the data port, normally)
  std::string gateway_key;  // sent as Authorization: Bearer (empty: none)
  size_t batch = 64;        // texts per embeddings call (and per upsert)
  int concurrency = 4;      // batches in flight
  std::string text_key =
      "text";             // the text is stored in the payload under this key ("": not stored)
  std::string state_dir;  // where the checkpoint goes ("": next to the input)
  bool restart = false;   // ignore (and replace) an existing checkpoint
  bool create = false;    // create the collection (Cosine, the model's dimension) if missing
  std::function<void(const Progress&)> progress;
};

struct EmbedReport {
  uint64_t points = 0;             // upserted in this run
  uint64_t resumed_from_line = 0;  // 0: from the start; else the first line this run read
  uint64_t lines = 0;              // lines of the input done in total (this run and earlier ones)
  double seconds = 0;
  int64_t retries = 0;
  std::string checkpoint;  // its path
};

// The checkpoint: after every batch whose lines and all before them are upserted (wait=true),
// `checkpoint` records the byte offset and line after them (written to a temporary file, fsynced,
// renamed). A rerun resumes there; the batches that were in flight at a crash are sent again,
// which is safe because an upsert is idempotent by id. The checkpoint also keeps the model and
// collection (a rerun with others is refused unless restart) and a hash of every byte before the
// offset (an input changed there is refused unless restart; appending lines is fine: a rerun
// embeds just them).
std::string checkpointPath(const std::string& input, const std::string& collection,
                           const std::string& state_dir);
Result<EmbedReport> embedFile(const VectorsClient& client, const std::string& collection,
                              const std::string& input, const EmbedOptions& options);

}  // namespace infera::vectors
