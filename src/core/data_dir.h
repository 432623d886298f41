#pragma once
// Where the data Infera ships (data/ in the repository: the GPU trace, the SIFT vectors) is found,
// independent of the working directory.

#include <string>
#include <string_view>

#include "core/status.h"

namespace infera {

// The directory of the shipped data set `name` (e.g. "alibaba-gpu-v2023"), looked for in order:
//   1. $INFERA_DATA_DIR/<name>, when INFERA_DATA_DIR is set (an error if it is set and lacks it);
//   2. next to the running binary: <dir>/data/<name> or <dir>/share/infera/data/<name> for the
//      binary's directory and each of its parents (a build tree inside a checkout, an install);
//   3. <source tree the binary was built from>/data/<name>.
// NotFound names every place it looked.
Result<std::string> findDataDir(std::string_view name);

}  // namespace infera
