// ds41/core/error.hpp — the one exception type of the library.
//
// Messages name the tensor / key / file, the shape and the value that was wrong, so that a user can
// act on them without a debugger.
#pragma once
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "fp_exact_begin.hpp"
namespace ds41 {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

namespace detail {
inline void append(std::ostringstream&) {}
template <class T, class... R>
void append(std::ostringstream& os, const T& v, const R&... r) {
  os << v;
  append(os, r...);
}
}  // namespace detail

/// Builds a message from its parts (streamed) and throws `ds41::Error`.
template <class... A>
[[noreturn]] void fail(const A&... parts) {
  std::ostringstream os;
  detail::append(os, parts...);
  throw Error(os.str());
}

/// "[2, 3, 4]" for messages.
inline std::string shape_str(const std::vector<long long>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

#define DS41_CHECK(cond, ...)              \
  do {                                     \
    if (!(cond)) ::ds41::fail(__VA_ARGS__); \
  } while (0)

}  // namespace ds41
#include "fp_exact_end.hpp"
