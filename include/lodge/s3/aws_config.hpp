#pragma once
// The AWS shared config and credentials files (~/.aws/config, ~/.aws/credentials) as the
// AWS CLI v2 reads them: an INI reader with the CLI's nested sub-settings, and the
// selected profile's settings, each with the file and section it came from.
// https://docs.aws.amazon.com/sdkref/latest/guide/file-format.html

#include <cstdint>
#include <functional>
#include <lodge/error.hpp>
#include <lodge/http/transport.hpp>
#include <lodge/s3/signer.hpp>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace lodge::s3 {

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

// One provider of the credential chain as `lodge config --explain` shows it.
struct ProviderStep {
  std::string provider; // "environment", "shared credentials file PATH", ...
  bool used = false;
  std::string why; // why it was used or not
};

struct CredentialChain {
  Result<Credentials> credentials{Error(Errc::config_invalid, "no S3 credentials")};
  std::vector<ProviderStep> steps; // in the order they were asked, up to the one that answered
};

// How the chain reaches STS: the endpoint (AWS_ENDPOINT_URL_STS, else the configured S3
// endpoint, else https://sts.REGION.amazonaws.com) and a transport for one call.
struct StsAccess {
  std::string endpoint;
  std::string region = "us-east-1";
  std::function<std::unique_ptr<http::Transport>()> transport;
};

// STS AssumeRoleWithWebIdentity: an unsigned form POST; the temporary credentials with
// their expiry. STORAGE_UNAVAILABLE when STS cannot be reached, ACCESS_DENIED when it
// refuses, naming the role (never the token).
[[nodiscard]] Result<Credentials> assume_role_with_web_identity(const StsAccess &sts,
                                                                const std::string &role_arn,
                                                                const std::string &session_name,
                                                                const std::string &token);

// The S3 credentials as the SDKs' default chain finds them: the environment (only one of
// AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY set is an error naming the missing one), then
// web identity (AWS_WEB_IDENTITY_TOKEN_FILE + AWS_ROLE_ARN, or the profile's
// web_identity_token_file + role_arn) through STS when `sts` is given, then the profile's
// static keys in the shared credentials file, then in the config file. A provider lodge
// does not implement (role_arn with source_profile, credential_process, SSO) is an error
// naming it, never a fall-through to another identity. CONFIG_INVALID when nothing answers.
[[nodiscard]] CredentialChain resolve_credential_chain(const std::map<std::string, std::string> &env,
                                                       const AwsShared &shared,
                                                       const StsAccess *sts = nullptr);

// A shell-style leading ~ of path replaced by home (as the CLI expands AWS_CONFIG_FILE).
[[nodiscard]] std::string expand_home(const std::string &path, const std::string &home);

} // namespace lodge::s3
