#pragma once
// Internal to the store layer: the registry of schemes, the backends' entries in it and
// small helpers they share.

#include <cerrno>
#include <lodge/store/store.hpp>
#include <lodge/util/fd.hpp>
#include <unistd.h>

namespace lodge::store {

// One URL scheme: how its URLs are checked, bound and opened. A backend parses its own
// URL, resolves its own credentials and options, and reports its capabilities.
struct Scheme {
  const char *name; // "s3"
  const char *form; // "s3://bucket/prefix", for messages
  // Whether its stores tag objects (Capabilities::state_tags): never, as tag_state says, always.
  enum class Tagging { never, configured, always } tagging;
  // Throws LodgeError(CONFIG_INVALID) naming the URL and the reason.
  void (*check)(const std::string &url);
  Binding (*bind)(const std::string &url, const std::string &endpoint);
  std::shared_ptr<Backend> (*open)(const StoreOptions &o);
};

// The scheme the URL starts with ("name://"), or nullptr.
[[nodiscard]] const Scheme *scheme_for(const std::string &url);

// The backends' entries (each in its own file).
[[nodiscard]] const Scheme &s3_scheme();
[[nodiscard]] const Scheme &file_scheme();
[[nodiscard]] const Scheme &az_scheme();

// Wraps a connection so the store.* failpoints apply; every Backend::connect uses it.
std::unique_ptr<ObjectStore> with_failpoints(std::unique_ptr<ObjectStore> inner);

// "a//b/" -> "a/b": the segments, none empty, joined by one '/'.
[[nodiscard]] std::string join_segments(const std::string &path);
// An endpoint URL canonicalized: scheme and host lowercased, no default port, no trailing
// '/'; "" stays "".
[[nodiscard]] std::string canonical_endpoint_url(std::string e);
// A prefix or directory with a segment a server would rewrite (an empty, '.' or '..'
// one, percent-encoding, a backslash...) lands under keys no row records: CONFIG_INVALID.
void refuse_unsafe(const std::string &url, const char *what, const std::string &path);

using util::write_all;

} // namespace lodge::store
