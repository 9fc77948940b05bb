#pragma once
// Where the real wsync programs are that a benchmark runs as they are (wsync-coordinator, wsync-worker, wsync-mon).
#include <string>

namespace wsync::bench {

// `name` in `binDir` when one is given (an error if it is not there); else beside this executable, which is where
// an install puts them, and where a relocated bin/ folder keeps them together; else `builtPath`, where this build
// made it. Throws BenchFailure naming the places it looked.
std::string locateProgram(const std::string& name, const std::string& binDir, const std::string& builtPath);

}  // namespace wsync::bench
