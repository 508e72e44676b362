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
  // The store keys it reads (setting_keys() is the union of every scheme's).
  std::vector<SettingKey> keys;
  // Resolves its settings from those given (every store key, whichever scheme reads it) and
  // the environment; throws LodgeError(CONFIG_INVALID) naming the key.
  std::shared_ptr<const StoreConfig> (*resolve)(const Settings &given,
                                                const std::map<std::string, std::string> &env);
  // Opens the backend; `o.config` is set, by this scheme's resolve.
  std::shared_ptr<Backend> (*open)(const StoreOptions &o);
};

// The scheme the URL starts with ("name://"), or nullptr.
[[nodiscard]] const Scheme *scheme_for(const std::string &url);

// The backends' entries (each in its own file).
[[nodiscard]] const Scheme &s3_scheme();
[[nodiscard]] const Scheme &file_scheme();
[[nodiscard]] const Scheme &az_scheme();

// Lodge's store keys layered by its own precedence, for every scheme: a flag (any source but
// the configuration file) > the environment (endpoint: LODGE_ENDPOINT; region: LODGE_REGION,
// AWS_REGION, AWS_DEFAULT_REGION; ca_bundle: LODGE_CA_BUNDLE, AWS_CA_BUNDLE; profile:
// AWS_PROFILE, AWS_DEFAULT_PROFILE) > the configuration file > the default (source
// "default"). Every key is in the result.
[[nodiscard]] Settings layer_settings(const Settings &given, const std::map<std::string, std::string> &env);

// The settings of a scheme that reads only endpoint and ca_bundle (Azure, file://): the other
// keys are shown by `lodge config` as given and otherwise ignored.
[[nodiscard]] std::shared_ptr<const StoreConfig> common_config(const Settings &given,
                                                               const std::map<std::string, std::string> &env);

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
