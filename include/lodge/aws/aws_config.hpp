#pragma once
// The AWS shared config and credentials files (~/.aws/config, ~/.aws/credentials) as the
// AWS CLI v2 reads them: an INI reader with the CLI's nested sub-settings, and the
// selected profile's settings, each with the file and section it came from.
// https://docs.aws.amazon.com/sdkref/latest/guide/file-format.html

#include <cstdint>
#include <lodge/error.hpp>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace lodge::aws {

struct IniValue {
  std::string value;                      // trimmed; "" for a key that only opens sub-settings
  std::map<std::string, std::string> sub; // `s3 =` followed by indented `key = value` lines
  int line = 0;
};

struct IniSection {
  std::string name; // as written between the brackets, trimmed ("profile ci", "default")
  std::map<std::string, IniValue> values; // keys lowercased
  int line = 0;
};

struct IniFile {
  std::string path;
  bool exists = false;
  std::map<std::string, IniSection> sections;
  [[nodiscard]] const IniSection *find(const std::string &name) const;
};

// Parses an INI document: `[section]` headers, `key = value` (or `key: value`), full-line
// comments starting with # or ;, inline comments after whitespace, indented sub-settings
// under a key with no value. Throws LodgeError(config_invalid) "PATH:LINE: why" (never
// quoting the line: it may hold a secret).
[[nodiscard]] IniFile parse_ini(const std::string &text, const std::string &path);

// Reads and parses path; a missing file is an empty IniFile with exists = false. One that
// exists but cannot be read is LodgeError(config_invalid) naming it and the reason.
[[nodiscard]] IniFile read_ini(const std::string &path);

// A value found in a shared file, and where: "file PATH [profile P]".
struct AwsValue {
  std::string value;
  std::string source;
};

// The two shared files and the profile chosen.
class AwsShared {
public:
  // Which files and profile to read. `profile` empty: AWS_PROFILE, AWS_DEFAULT_PROFILE,
  // then "default". Files: AWS_CONFIG_FILE / AWS_SHARED_CREDENTIALS_FILE, else under HOME.
  struct Inputs {
    std::map<std::string, std::string> env;
    std::string profile;        // a lodge flag or config file's choice ("" when none)
    std::string profile_source; // where that came from ("flag --profile", "file PATH")
  };
  // Reads both files. Throws LodgeError(config_invalid) for a malformed or unreadable file,
  // and for an explicitly chosen profile that neither file has ("The config profile (x)
  // could not be found").
  [[nodiscard]] static AwsShared load(const Inputs &in);
  // From already parsed files (tests).
  AwsShared(IniFile config, IniFile credentials, std::string profile, std::string profile_source);

  [[nodiscard]] const std::string &profile() const { return m_profile; }
  // The same files with another profile selected (a role's source_profile).
  [[nodiscard]] AwsShared for_profile(const std::string &profile) const;
  // Whether either file has a section for the selected profile.
  [[nodiscard]] bool has_profile() const { return config_section() || credentials_section(); }
  [[nodiscard]] const std::string &profile_source() const { return m_profile_source; }
  [[nodiscard]] const IniFile &config_file() const { return m_config; }
  [[nodiscard]] const IniFile &credentials_file() const { return m_credentials; }

  // The profile's section in the config file ([profile P], or [default] / [profile default]).
  [[nodiscard]] const IniSection *config_section() const;
  // The profile's section in the credentials file ([P]).
  [[nodiscard]] const IniSection *credentials_section() const;
  // key in the profile: the credentials file's [P] wins over the config file's, as the CLI.
  [[nodiscard]] std::optional<AwsValue> get(const std::string &key) const;
  // A sub-setting of the profile (`s3 =` then `  addressing_style = path`).
  [[nodiscard]] std::optional<AwsValue> sub(const std::string &key, const std::string &subkey) const;
  // A service's setting from the [services NAME] section the profile names (`services = NAME`).
  [[nodiscard]] std::optional<AwsValue> service(const std::string &service, const std::string &key) const;
  // The value of key in section of file, with its source, when set and not empty.
  [[nodiscard]] static std::optional<AwsValue> in_section(const IniFile &f, const IniSection *s,
                                                          const std::string &key, const std::string &label);

private:
  IniFile m_config;
  IniFile m_credentials;
  std::string m_profile;
  std::string m_profile_source;
};

// A size as the AWS CLI reads its `s3 =` settings (multipart_threshold, multipart_chunksize):
// bytes ("16777216"), or an integer with KB, MB, GB, TB or KiB, MiB, GiB, TiB, any case; the
// CLI's KB is 1024 bytes and its MB 1024 KB, as its KiB and MiB. nullopt for anything else,
// zero, or on overflow.
[[nodiscard]] std::optional<uint64_t> parse_aws_size(const std::string &text);
// A rate as the CLI reads max_bandwidth: bytes per second ("1048576"), or a size followed by
// B/s ("1048576B/s", "300KB/s", "50MB/s"). nullopt for anything else or zero.
[[nodiscard]] std::optional<uint64_t> parse_aws_rate(const std::string &text);

// A shell-style leading ~ of path replaced by home (as the CLI expands AWS_CONFIG_FILE).
[[nodiscard]] std::string expand_home(const std::string &path, const std::string &home);

} // namespace lodge::aws
